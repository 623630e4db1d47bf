package stack

import (
	"net/url"
	"regexp"
)

// RedactURL hides a password in a URL so it can appear in errors and logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// urlPassword matches the password of a URL's userinfo: the ":secret@" of
// postgres://user:secret@host/db. The CLI prints a backend URL it cannot open as it is,
// password and all ("error: unable to open bucket postgres://user:secret@...", pkg/backend/diy).
var urlPassword = regexp.MustCompile(`(://[^/\s:@]*):[^/\s@]*@`)

// redactPasswords replaces every URL password in s with "xxxxx", as url.URL.Redacted does.
func redactPasswords(s string) string { return urlPassword.ReplaceAllString(s, "${1}:xxxxx@") }

// RedactText is s (any text: an error, a log line) with the password of every URL in it
// replaced by "xxxxx". RedactURL is for one URL.
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
