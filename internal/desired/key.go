package desired

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeyFileEnv names the environment variable of --env-digest-key-file: a file holding the key
// of the digest of envFrom sources (LoadKey).
const KeyFileEnv = "PULUMI_OPERATOR_ENV_DIGEST_KEY_FILE"

// ErrNoKey means there is no key for the digest of envFrom sources: neither a key file nor a
// non-empty passphrase (LoadKey).
var ErrNoKey = errors.New("no key for the digest of envFrom sources: set --env-digest-key-file (" + KeyFileEnv +
	"), or the passphrase (PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE), the same as the operator's")

// keyLabel separates the digest key from any other use of the same secret (the passphrase
// also encrypts the stacks' secrets).
const keyLabel = "pulumi-operator env digest key v1"

// LoadKey returns this installation's key for Digest (Options.Key): derived (HMAC-SHA256 under
// keyLabel, 32 bytes) from the content of keyFile, without leading and trailing white space,
// when keyFile is set; else from the state passphrase as the pulumi CLI finds it in the
// environment lookup gives (PULUMI_CONFIG_PASSPHRASE, else the content of the file
// PULUMI_CONFIG_PASSPHRASE_FILE names). The operator's replicas read the same Secret, and the
// laptop commands are given the operator's passphrase, so all of them compute the same
// digest for the same data, across restarts; a user who may view a Deployment but not that
// Secret cannot recompute it to test a guess of a Secret's data.
//
// The key changes with its source: a new key file, or a rotated passphrase when there is no
// key file, rolls the pods of every object with envFrom sources once (their digest changes).
//
// Errors: ErrNoKey when neither is set or the one used is empty; a key file or passphrase file
// that cannot be read.
func LoadKey(keyFile string, lookup func(string) (string, bool)) ([]byte, error) {
	var secret string
	switch {
	case keyFile != "":
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("read --env-digest-key-file: %w", err)
		}
		if secret = strings.TrimSpace(string(b)); secret == "" {
			return nil, fmt.Errorf("%w: --env-digest-key-file %s is empty", ErrNoKey, keyFile)
		}
	default:
		if p, ok := lookup("PULUMI_CONFIG_PASSPHRASE"); ok {
			secret = p
		} else if f, _ := lookup("PULUMI_CONFIG_PASSPHRASE_FILE"); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read PULUMI_CONFIG_PASSPHRASE_FILE for the digest key: %w", err)
			}
			secret = strings.TrimSpace(string(b))
		}
		if secret == "" {
			return nil, ErrNoKey
		}
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(keyLabel))
	return mac.Sum(nil), nil
}
