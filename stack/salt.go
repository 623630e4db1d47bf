package stack

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// A new stack's passphrase salt. The passphrase secrets provider keeps, per stack, a salt and a
// check value ("encryptionsalt: v1:<salt>:<check>" in Pulumi.<stack>.yaml and in the state);
// every CLI run that opens the stack derives the key from passphrase and salt (PBKDF2-SHA256,
// 1,000,000 iterations on one core; its cost is in docs/design/engine-host.md). A stack's first
// up derives it twice when the stack has no salt yet: once to make the salt, once more to read
// the state it just wrote (pkg/v3 secrets/passphrase: NewPassphraseSecretsManager does not fill
// the cache that the later GetPassphraseSecretsManager reads). `pulumi stack init` pays the
// first derivation in a CLI run of its own.
//
// So the Manager makes the salt itself, once per passphrase and process, and writes it into
// each new stack's Pulumi.<stack>.yaml before its first up (the engine host made the
// stack): that up derives once, like any later one. The stacks one operator process creates
// thus share a salt, and so a key; Pulumi's `stack init` gives each stack its own. They share
// the passphrase either way, which is what protects them: whoever has it has every key,
// whatever the salts. `pulumi stack change-secrets-provider passphrase` gives a stack a salt
// of its own.

// stackSalt is the Manager's salt for new stacks, made for one passphrase.
type stackSalt struct {
	mu     sync.Mutex
	phrase string // the passphrase state was made for
	state  string // "v1:<base64 salt>:<check value>"; "" before the first
}

// newSaltState makes a passphrase secrets provider state for phrase as pkg/v3
// secrets/passphrase NewPassphraseSecretsManager does (8 random bytes of salt; the check value
// is "pulumi" encrypted with the derived key), with the SDK's own key derivation and
// encryption. Written out here because that function is in pkg/v3, which the operator does
// not link (it adds resident memory the operator has no room for: docs/design/engine-host.md).
func newSaltState(phrase string) (string, error) {
	salt := make([]byte, 8)
	_, _ = rand.Read(salt) // crypto/rand.Read never fails (Go 1.24+)
	check, err := config.NewSymmetricCrypterFromPassphrase(phrase, salt).EncryptValue(context.Background(), "pulumi")
	if err != nil {
		return "", fmt.Errorf("make passphrase salt: %w", err)
	}
	return fmt.Sprintf("v1:%s:%s", base64.StdEncoding.EncodeToString(salt), check), nil
}

// passphrase is the passphrase the CLI reads in a run of this Manager in directory dir (a
// stack's workspace), by the CLI's own rule (pkg/v3 secrets/passphrase readPassphrase):
// PULUMI_CONFIG_PASSPHRASE when set, even empty; else the content of the file
// PULUMI_CONFIG_PASSPHRASE_FILE names (relative to dir), without leading and trailing white
// space. The CLI's environment is this process's with Config.Env over it. Errors:
// ErrNoPassphrase when neither is set; the file's read error.
func (m *Manager) passphrase(dir string) (string, error) {
	if p, ok := m.lookupEnv("PULUMI_CONFIG_PASSPHRASE"); ok {
		return p, nil
	}
	f, ok := m.lookupEnv("PULUMI_CONFIG_PASSPHRASE_FILE")
	if !ok || f == "" {
		return "", ErrNoPassphrase
	}
	if !filepath.IsAbs(f) {
		f = filepath.Join(dir, f)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("read PULUMI_CONFIG_PASSPHRASE_FILE: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// lookupEnv is k in the CLI's environment: Config.Env (and New's settings) over this process's.
func (m *Manager) lookupEnv(k string) (string, bool) {
	if v, ok := m.env[k]; ok {
		return v, true
	}
	return os.LookupEnv(k)
}

// newStackSalt returns the salt state for a new stack whose workspace is dir: the one made
// before when the passphrase is the same (a passphrase changed since, e.g. a rotated Secret,
// gets a new one). It derives a key only then; other callers wait for it meanwhile.
func (m *Manager) newStackSalt(dir string) (string, error) {
	phrase, err := m.passphrase(dir)
	if err != nil {
		return "", err
	}
	m.salt.mu.Lock()
	defer m.salt.mu.Unlock()
	if m.salt.state != "" && m.salt.phrase == phrase {
		return m.salt.state, nil
	}
	state, err := newSaltState(phrase)
	if err != nil {
		return "", err
	}
	m.salt.phrase, m.salt.state = phrase, state
	return state, nil
}

// writeSalt writes the new stack stackName's Pulumi.<stack>.yaml, holding only newStackSalt's
// salt, into its workspace directory (which must exist), replacing one a stack of the same
// name left there. It is for a stack the engine host has just made, which holds no
// state, so no salt of its own. A failure is logged and otherwise ignored: the first up then
// makes a salt itself (one key derivation more) or reports the passphrase problem in the CLI's
// words.
func (m *Manager) writeSalt(stackName string) {
	dir := filepath.Join(m.cfg.WorkRoot, stackName)
	salt, err := m.newStackSalt(dir)
	if err == nil {
		ps := &workspace.ProjectStack{EncryptionSalt: salt}
		err = ps.Save(filepath.Join(dir, "Pulumi."+stackName+".yaml"))
	}
	if err != nil {
		slog.Warn("could not write the new stack's passphrase salt; its first up makes one", "stack", stackName, "error", err)
	}
}
