package stack

import (
	"errors"
	"strings"
	"testing"
)

// TestRedact: the password and the secret query values of every URL in a text, and the values
// of the credential variables of the environment, are hidden; the rest is kept; a redacted
// error keeps no reference to the original.
func TestRedact(t *testing.T) {
	t.Setenv("PGPASSWORD", "planted-pg-password")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "planted-aws-secret")
	t.Setenv("AWS_SESSION_TOKEN", "short") // under minCredentialLen: too short to hide
	tests := map[string]struct{ in, want string }{
		"postgres URL": {in: "error: unable to open bucket postgres://user:hunter2@db:5432/pulumi?sslmode=disable: refused",
			want: "error: unable to open bucket postgres://user:xxxxx@db:5432/pulumi?sslmode=disable: refused"},
		"two URLs, two lines": {in: "s3://id:s3cret@host/b\nhttps://u:p4ss@example.com/x",
			want: "s3://id:xxxxx@host/b\nhttps://u:xxxxx@example.com/x"},
		"user without password": {in: "postgres://user@db/pulumi", want: "postgres://user@db/pulumi"},
		"no URL":                {in: "error: boom: a:b@c", want: "error: boom: a:b@c"},
		"secret query parameters": {in: "postgres://u@db/p?sslmode=require&password=hunter2&sslpassword=k3y\nazblob://c?sig=abc%2Fdef&sv=2020&secret_key=S",
			want: "postgres://u@db/p?sslmode=require&password=xxxxx&sslpassword=xxxxx\nazblob://c?sig=xxxxx&sv=2020&secret_key=xxxxx"},
		"credential variables": {in: "open: pq: password \"planted-pg-password\" rejected; key planted-aws-secret",
			want: "open: pq: password \"xxxxx\" rejected; key xxxxx"},
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
