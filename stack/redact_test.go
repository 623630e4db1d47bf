package stack

import (
	"errors"
	"strings"
	"testing"
)

// TestRedact: the password of every URL in a text is hidden, the rest is kept; a redacted
// error keeps no reference to the original.
func TestRedact(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"postgres URL": {in: "error: unable to open bucket postgres://user:hunter2@db:5432/pulumi?sslmode=disable: refused",
			want: "error: unable to open bucket postgres://user:xxxxx@db:5432/pulumi?sslmode=disable: refused"},
		"two URLs, two lines": {in: "s3://id:s3cret@host/b\nhttps://u:p4ss@example.com/x",
			want: "s3://id:xxxxx@host/b\nhttps://u:xxxxx@example.com/x"},
		"user without password": {in: "postgres://user@db/pulumi", want: "postgres://user@db/pulumi"},
		"no URL":                {in: "error: boom: a:b@c", want: "error: boom: a:b@c"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RedactText(tc.in); got != tc.want {
				t.Fatalf("RedactText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if got := RedactURL("postgres://user:hunter2@db/pulumi"); got != "postgres://user:xxxxx@db/pulumi" {
		t.Errorf("RedactURL = %q", got)
	}
	if got := RedactURL("::postgres://u:hunter2@h/db"); strings.Contains(got, "hunter2") {
		t.Errorf("RedactURL of an unparsable URL = %q, shows the password", got)
	}

	orig := errors.New("open postgres://u:hunter2@h/db: refused")
	red := redactErr(orig)
	if strings.Contains(red.Error(), "hunter2") || errors.Is(red, orig) {
		t.Errorf("redactErr = %q (wraps the original: %v), want the text without the password and no chain", red, errors.Is(red, orig))
	}
	if clean := errors.New("no password here"); redactErr(clean) != clean {
		t.Errorf("redactErr changed an error without a password")
	}
}
