package stack

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// RedactURL hides a password in a URL, and the values of its secret query parameters
// (secretName), so it can appear in errors and logs.
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

// querySep matches what starts a URL's query parameter: "?" or "&", or their percent-encoded
// forms ("%3F", "%26"; "%253F", "%2526" and so on) in a URL inside another's query. queryEq
// matches what ends its name: "=" or its encoded forms.
var (
	querySep = regexp.MustCompile(`(?i)[?&]|%(?:25)*(?:3f|26)`)
	queryEq  = regexp.MustCompile(`(?i)=|%(?:25)*3d`)
)

// secretWords are what a query parameter's name holds, once decoded, lowercased and rid of
// everything but letters and digits (secretName), when its value is a credential: the backends'
// drivers take some in the URL (PostgreSQL's password and sslpassword, an Azure SAS sig, S3's
// and others' secret or session keys, tokens), and a presigned URL carries its signature and
// credential (S3's X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token; GCS's
// X-Goog-Signature). A name holding one as a part ("sslpassword", "access-key") counts too;
// that also hides a few values that are no secret ("X-Amz-SignedHeaders").
var secretWords = []string{"password", "passwd", "pwd", "passphrase", "secret", "token", "sig", "credential", "key"}

// secretName reports whether a query parameter named name (as it appears in the URL, maybe
// percent-encoded, once or more) holds a credential (secretWords).
func secretName(name string) bool {
	for range 3 { // a URL inside another's query is encoded once more
		d, err := url.QueryUnescape(name)
		if err != nil || d == name {
			break
		}
		name = d
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	n := b.String()
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// hasSecretQuery reports whether the query rawQuery (a URL's, without "?") has a parameter
// with a value whose name says it holds a credential (secretName).
func hasSecretQuery(rawQuery string) bool {
	q := "?" + rawQuery
	return redactQuery(q) != q
}

// redactQuery replaces the value of every query parameter in s whose name says it holds a
// credential (secretName) with "xxxxx". A parameter is what follows a separator (querySep) up
// to the next one, "#" or white space, split at its first queryEq; its name may be encoded.
// The hidden value runs on past any separator encoded more deeply than the parameter's own
// (sepLevel), as its value's own are: a password holding an encoded "?" or "&" is hidden
// whole, and a URL inside a query keeps its parameters after a hidden one.
func redactQuery(s string) string {
	seps := querySep.FindAllStringIndex(s, -1)
	var b strings.Builder
	last := 0 // s[:last] is in b, or (with b empty) needs no change
	for i, sep := range seps {
		start := sep[1]
		if start < last {
			continue // inside a value already hidden
		}
		end := len(s)
		if i+1 < len(seps) {
			end = seps[i+1][0]
		}
		if j := strings.IndexFunc(s[start:end], endsValue); j >= 0 {
			end = start + j
		}
		eq := queryEq.FindStringIndex(s[start:end])
		if eq == nil || !secretName(s[start:start+eq[0]]) {
			continue
		}
		from, to := start+eq[1], len(s)
		if j := strings.IndexFunc(s[from:], endsValue); j >= 0 {
			to = from + j
		}
		level := sepLevel(s[sep[0]:sep[1]])
		for _, next := range seps[i+1:] {
			if next[0] >= to {
				break
			}
			if l := sepLevel(s[next[0]:next[1]]); next[0] >= from && l <= level && s[next[0]] != '?' {
				to = next[0]
				break
			}
		}
		if to == from {
			continue
		}
		b.WriteString(s[last:from])
		b.WriteString("xxxxx")
		last = to
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// sepLevel is how many times the separator sep (a querySep match) is percent-encoded: 0 for
// "?" and "&", 1 for "%3F" and "%26", 2 for "%253F" and "%2526", and so on.
func sepLevel(sep string) int {
	if sep[0] != '%' {
		return 0
	}
	return 1 + strings.Count(sep, "25")
}

// endsValue reports whether r ends a query parameter's value in a text: "#" (the fragment) or
// white space (the end of the URL).
func endsValue(r rune) bool { return r == '#' || unicode.IsSpace(r) }

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
	s = redactQuery(s)
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
