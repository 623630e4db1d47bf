package stack

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// RedactURL hides a password in a URL, and the values of its secret query parameters
// (secretQuery), so it can appear in errors and logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return redactPasswords(u.Redacted())
}

// urlPassword matches the password of a URL's userinfo: the ":secret@" of
// postgres://user:secret@host/db. The CLI prints a backend URL it cannot open as it is,
// password and all ("error: unable to open bucket postgres://user:secret@...", pkg/backend/diy).
var urlPassword = regexp.MustCompile(`(://[^/\s:@]*):[^/\s@]*@`)

// secretQuery matches a query parameter of a URL whose name says it holds a credential, up to
// the end of its value: the backends' drivers take some in the URL (PostgreSQL's password and
// sslpassword, an Azure SAS sig, S3's and others' secret or session keys, tokens).
var secretQuery = regexp.MustCompile(`(?i)([?&][a-z_]*(?:password|passwd|secret|token|sig|signature|credential|key)[a-z_]*=)[^&\s#]*`)

// credentialVars are the environment variables whose values are credentials of a backend, the
// passphrase or Pulumi Cloud: a value of one of them found in a text is hidden too (an error
// that quotes a connection string, a CLI that echoes its environment).
var credentialVars = []string{
	"PULUMI_CONFIG_PASSPHRASE", "PULUMI_ACCESS_TOKEN", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "GOOGLE_CREDENTIALS",
}

// minCredentialLen is the shortest credential value redactCredentials hides: a shorter one would
// hide common words of unrelated text, and is no secret worth the name.
const minCredentialLen = 6

// redactPasswords replaces every URL password and secret query value in s, and the value of
// every credentialVars variable of this process, with "xxxxx".
func redactPasswords(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}:xxxxx@")
	s = secretQuery.ReplaceAllString(s, "${1}xxxxx")
	for _, name := range credentialVars {
		if v := os.Getenv(name); len(v) >= minCredentialLen {
			s = strings.ReplaceAll(s, v, "xxxxx")
		}
	}
	redactions.Lock()
	defer redactions.Unlock()
	for _, v := range redactions.values {
		s = strings.ReplaceAll(s, v, "xxxxx")
	}
	return s
}

// redactions are credentials redactPasswords hides besides those of the environment: ones a
// Manager took out of its children's environment (moveCredentials).
var redactions struct {
	sync.Mutex
	values []string
}

// addRedaction has redactPasswords hide v from now on (when it is at least minCredentialLen
// long).
func addRedaction(v string) {
	if len(v) < minCredentialLen {
		return
	}
	redactions.Lock()
	defer redactions.Unlock()
	if !slices.Contains(redactions.values, v) {
		redactions.values = append(redactions.values, v)
	}
}

// RedactText is s (any text: an error, a log line) with the password and secret query values of
// every URL in it, and any credential of this process's environment, replaced by "xxxxx".
// RedactURL is for one URL.
func RedactText(s string) string { return redactPasswords(s) }

// redactedError is an error whose text showed a URL password. It keeps no reference to the
// original, so that nothing that walks an error chain can find the password.
type redactedError struct{ msg string }

func (e redactedError) Error() string { return e.msg }

// redactErr returns err, or a copy of its text without URL passwords when it has any.
func redactErr(err error) error {
	msg := err.Error()
	if r := redactPasswords(msg); r != msg {
		return redactedError{msg: r}
	}
	return err
}
