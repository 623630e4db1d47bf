package stack

import (
	"errors"
	"net/url"
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
		"S3 presigned URL": {in: "GET https://b.s3.amazonaws.com/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20261128%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261128T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=FwoGZXIvYXdz&X-Amz-Signature=3e9c0ffee returned 403",
			want: "GET https://b.s3.amazonaws.com/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=xxxxx&X-Amz-Date=20261128T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=xxxxx&X-Amz-Signature=xxxxx returned 403"},
		"lowercase x-amz names": {in: "s3://b/o?x-amz-signature=3e9c&x-amz-security-token=Fwo",
			want: "s3://b/o?x-amz-signature=xxxxx&x-amz-security-token=xxxxx"},
		"hyphenated names": {in: "s3://b?endpoint=minio:9000&access-key=AKID&secret-access-key=S3cret&ssl-password=k3y&client-secret=c",
			want: "s3://b?endpoint=minio:9000&access-key=xxxxx&secret-access-key=xxxxx&ssl-password=xxxxx&client-secret=xxxxx"},
		"percent-encoded names": {in: "postgres://u@db/p?sslmode=require&pass%77ord=hunter2&secret%5Fkey=S&X%2DAmz%2DSignature=3e9c",
			want: "postgres://u@db/p?sslmode=require&pass%77ord=xxxxx&secret%5Fkey=xxxxx&X%2DAmz%2DSignature=xxxxx"},
		"URL inside a query, encoded": {in: "https://sso/login?next=https%3A%2F%2Fapp%2Fcb%3Fstate%3D1%26token%3Dabc123%26x%3D2 failed",
			want: "https://sso/login?next=https%3A%2F%2Fapp%2Fcb%3Fstate%3D1%26token%3Dxxxxx%26x%3D2 failed"},
		"URL inside a query, secret first": {in: "https://sso/login?next=https%3A%2F%2Fapp%2Fcb%3Ftoken%3Dabc123%26x%3D2&y=3",
			want: "https://sso/login?next=https%3A%2F%2Fapp%2Fcb%3Ftoken%3Dxxxxx%26x%3D2&y=3"},
		"encoded separators inside a secret value": {in: "postgres://u@db/p?password=ab%3Fcd%26ef%3Dgh&sslmode=require",
			want: "postgres://u@db/p?password=xxxxx&sslmode=require"},
		"URL inside a query, encoded twice": {in: "https://sso/login?next=https%253A%252F%252Fapp%253Fpassword%253Dhunter2&x=1",
			want: "https://sso/login?next=https%253A%252F%252Fapp%253Fpassword%253Dxxxxx&x=1"},
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

// TestCredentialsInURL: a backend URL whose user part or query holds a credential is refused,
// also under an S3 presigned name, a hyphenated or a percent-encoded one; one without is not.
func TestCredentialsInURL(t *testing.T) {
	for raw, refused := range map[string]bool{
		"postgres://u:hunter2@db/p":                                         true,
		"postgres://u@db/p?sslmode=require&sslpassword=k":                   true,
		"s3://b?region=us-east-1&X-Amz-Security-Token=Fwo":                  true,
		"s3://b?endpoint=minio:9000&secret-access-key=S":                    true,
		"azblob://c?s%69g=abc":                                              true,
		"postgres://u@db/p?sslmode=require&table=state":                     false,
		"s3://b?region=us-east-1&endpoint=minio:9000&s3ForcePathStyle=true": false,
		"file:///var/lib/pulumi-operator/state":                             false,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := credentialsInURL(u); errors.Is(err, ErrCredentialsInURL) != refused {
			t.Errorf("credentialsInURL(%s) = %v, want refused %v", RedactURL(raw), err, refused)
		}
	}
}
