package stack

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// Passphrase rotation. A stack of the passphrase secrets provider keeps its salt and a check
// value in its state (secrets_providers.state.salt, "v1:<base64 salt>:<check>") and, for the CLI,
// in its workspace's Pulumi.<stack>.yaml (encryptionsalt); every secret value in the state is
// encrypted with the key derived from passphrase and salt. With Config.PreviousPassphraseFile set,
// every up, refresh and destroy first makes sure the stack opens with the current passphrase
// (reencrypt): a stack the previous one opens is re-encrypted under a new salt of the current
// one, and imported back, in one write of the backend. A crash before that write leaves the
// stack as it was, still opened by the previous passphrase, and the next operation does it
// again; after it, the stack is done. So the operator keeps serving while the Secret holds both
// passphrases, and `pulumi-operator rotate-passphrase` only asks it to look at every object
// (README "Security").
//
// Written here with the SDK's own crypter (config.NewSymmetricCrypterFromPassphrase) rather than
// with `pulumi stack change-secrets-provider passphrase`, which reads the old and the new
// passphrase from the same PULUMI_CONFIG_PASSPHRASE and so cannot change one for another.

// ErrIncorrectPassphrase means neither the passphrase nor the previous one opens the stack's
// secrets (the CLI's own error says "incorrect passphrase").
var ErrIncorrectPassphrase = errors.New("incorrect passphrase")

// secretSig is the key and value that mark a secret value in a deployment (sdk
// resource.SecretSig): {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
// "ciphertext": "..."}.
const (
	secretSigKey   = "4dabf18193072939515e22adb298388d"
	secretSigValue = "1b47061264138c4ac30d75fd1eb44270"
)

// PassphraseState says which passphrase opens a stack's secrets.
type PassphraseState string

// The states PassphraseOf reports.
const (
	// PassphraseCurrent: the passphrase (PULUMI_CONFIG_PASSPHRASE[_FILE]) opens it.
	PassphraseCurrent PassphraseState = "current"
	// PassphrasePrevious: only Config.PreviousPassphraseFile's opens it: not yet re-encrypted.
	PassphrasePrevious PassphraseState = "previous"
	// PassphraseNone: the stack's state names no passphrase salt (no state yet, or another
	// secrets provider): nothing to re-encrypt.
	PassphraseNone PassphraseState = "none"
)

// crypterFor returns the crypter of phrase for a passphrase salt state ("v1:<base64 salt>:<check>")
// as pkg/v3 secrets/passphrase does, or ErrIncorrectPassphrase when the check value does not
// decrypt to "pulumi" with it. Each call derives a key (PBKDF2, 1,000,000 iterations on one
// core).
func crypterFor(phrase, state string) (config.Crypter, error) {
	parts := strings.SplitN(state, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, fmt.Errorf("passphrase salt %q: want v1:<salt>:<check>", state)
	}
	salt, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("passphrase salt: %w", err)
	}
	c := config.NewSymmetricCrypterFromPassphrase(phrase, salt)
	if check, err := c.DecryptValue(context.Background(), parts[2]); err != nil || check != "pulumi" {
		return nil, ErrIncorrectPassphrase
	}
	return c, nil
}

// previousPassphrase reads Config.PreviousPassphraseFile (trimmed, as the CLI reads a
// passphrase file); "" when none is set.
func (m *Manager) previousPassphrase() (string, error) {
	if m.cfg.PreviousPassphraseFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(m.cfg.PreviousPassphraseFile)
	if err != nil {
		return "", fmt.Errorf("read the previous passphrase: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// deploymentSalt returns the passphrase salt state of a deployment's secrets provider, "" when it
// has none of the passphrase provider.
func deploymentSalt(d map[string]any) string {
	sp, _ := d["secrets_providers"].(map[string]any)
	if sp == nil || sp["type"] != "passphrase" {
		return ""
	}
	st, _ := sp["state"].(map[string]any)
	salt, _ := st["salt"].(string)
	return salt
}

// reencryptDeployment re-encrypts every secret value of deployment d (the "deployment" of an
// untyped deployment, decoded with UseNumber) from old to new, in place, and records newSalt as
// its secrets provider's state. It returns how many values it re-encrypted. Errors: a value old
// cannot decrypt.
func reencryptDeployment(ctx context.Context, d map[string]any, old config.Decrypter, new config.Encrypter, newSalt string) (int, error) {
	n := 0
	var walk func(v any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			if v[secretSigKey] == secretSigValue {
				if ct, ok := v["ciphertext"].(string); ok {
					pt, err := old.DecryptValue(ctx, ct)
					if err != nil {
						return fmt.Errorf("decrypt a secret value: %w", err)
					}
					if v["ciphertext"], err = new.EncryptValue(ctx, pt); err != nil {
						return fmt.Errorf("encrypt a secret value: %w", err)
					}
					n++
					return nil
				}
			}
			for _, e := range v {
				if err := walk(e); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range v {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(d); err != nil {
		return n, err
	}
	d["secrets_providers"] = map[string]any{"type": "passphrase", "state": map[string]any{"salt": newSalt}}
	return n, nil
}

// exportDeployment returns stackName, opened, and its deployment, decoded (numbers kept as
// json.Number), and the deployment's version (exportOpened).
func (m *Manager) exportDeployment(ctx context.Context, stackName string) (auto.Stack, map[string]any, int, error) {
	st, err := m.open(ctx, stackName, false)
	if err != nil {
		return st, nil, 0, err
	}
	d, version, err := m.exportOpened(ctx, stackName)
	return st, d, version, err
}

// exportOpened is exportDeployment's export, for a stack opened already (its workspace exists):
// protocol.OpExport (engine.request), which reads the deployment as the backend holds it, secrets
// encrypted, without a passphrase, so that which passphrase opens it is decided from its salt
// alone (whichPassphrase). Where no request can be made (Pulumi Cloud, a CLI of another build) it
// is `pulumi stack export`, which opens the stack with a passphrase: the current one, and when
// that run fails the previous one; when both fail, the first failure is the error, classified.
func (m *Manager) exportOpened(ctx context.Context, stackName string) (map[string]any, int, error) {
	out, err := m.exportState(ctx, stackName)
	if err != nil {
		return nil, 0, fmt.Errorf("export stack %s: %w", stackName, err)
	}
	var ud apitype.UntypedDeployment
	if err := json.Unmarshal(out, &ud); err != nil {
		return nil, 0, fmt.Errorf("read the export of stack %s: %w", stackName, err)
	}
	var d map[string]any
	dec := json.NewDecoder(bytes.NewReader(ud.Deployment))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return nil, 0, fmt.Errorf("read the deployment of stack %s: %w", stackName, err)
	}
	return d, ud.Version, nil
}

// exportState is exportOpened's export: the JSON of an apitype.UntypedDeployment. Errors are
// classified (*OperationError).
func (m *Manager) exportState(ctx context.Context, stackName string) ([]byte, error) {
	r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpExport, Stack: stackName})
	switch {
	case err == nil && r.Code == 0:
		return r.Deployment, nil
	case err == nil:
		return nil, m.classifyStack(ctx, stackName, newReplyError("export", r))
	case !errors.Is(err, errNoRequests):
		return nil, m.classifyStack(ctx, stackName, err)
	}
	dir := filepath.Join(m.cfg.WorkRoot, stackName)
	current, err := m.passphrase(dir)
	if err != nil {
		return nil, err
	}
	previous, err := m.previousPassphrase()
	if err != nil {
		return nil, err
	}
	phrases := []string{current}
	if previous != "" {
		phrases = append(phrases, previous)
	}
	var first error
	for _, phrase := range phrases {
		env := []string{"PULUMI_CONFIG_PASSPHRASE=" + phrase, "PULUMI_CONFIG_PASSPHRASE_FILE="}
		for k, v := range m.cliEnv() {
			if k != "PULUMI_CONFIG_PASSPHRASE" && k != "PULUMI_CONFIG_PASSPHRASE_FILE" {
				env = append(env, k+"="+v)
			}
		}
		out, stderr, code, err := m.cmd.Run(ctx, dir, nil, nil, nil, env, "stack", "export", "--stack", stackName)
		if err == nil {
			return []byte(out), nil
		}
		if first == nil {
			first = &cliError{op: "stack export", code: code, stdout: out, stderr: stderr, err: err}
		}
	}
	return nil, m.classifyStack(ctx, stackName, first)
}

// PassphraseOf reports which passphrase opens stackName's secrets: PassphraseCurrent,
// PassphrasePrevious or PassphraseNone. It only reads (an export of the state). Errors:
// ErrIncorrectPassphrase when neither opens them; the export's.
func (m *Manager) PassphraseOf(ctx context.Context, stackName string) (PassphraseState, error) {
	_, d, _, err := m.exportDeployment(ctx, stackName)
	if err != nil {
		return "", err
	}
	salt := deploymentSalt(d)
	if salt == "" {
		return PassphraseNone, nil
	}
	state, _, err := m.whichPassphrase(salt)
	return state, err
}

// whichPassphrase returns which passphrase opens salt, and the crypter of the previous one when
// it is that one.
func (m *Manager) whichPassphrase(salt string) (PassphraseState, config.Crypter, error) {
	current, err := m.passphrase(m.cfg.WorkRoot)
	if err != nil {
		return "", nil, err
	}
	if _, err := crypterFor(current, salt); err == nil {
		return PassphraseCurrent, nil, nil
	}
	previous, err := m.previousPassphrase()
	if err != nil {
		return "", nil, err
	}
	if previous != "" {
		if c, err := crypterFor(previous, salt); err == nil {
			return PassphrasePrevious, c, nil
		}
	}
	return "", nil, ErrIncorrectPassphrase
}

// reencrypt makes sure stackName opens with the current passphrase, when a previous one is
// configured (see the top of this file): a stack the previous passphrase opens is re-encrypted
// under a new salt of the current one and imported, and its workspace's Pulumi.<stack>.yaml gets
// that salt. It returns whether it re-encrypted. Errors: ErrIncorrectPassphrase (neither opens
// it); the export's or import's.
func (m *Manager) reencrypt(ctx context.Context, stackName string) (bool, error) {
	if m.cfg.PreviousPassphraseFile == "" {
		return false, nil
	}
	st, d, version, err := m.exportDeployment(ctx, stackName)
	if err != nil {
		return false, err
	}
	salt := deploymentSalt(d)
	if salt == "" {
		return false, nil
	}
	state, old, err := m.whichPassphrase(salt)
	if err != nil {
		return false, fmt.Errorf("open the secrets of stack %s: %w: neither the passphrase nor the previous one (--previous-passphrase-file) opens them", stackName, err)
	}
	dir := filepath.Join(m.cfg.WorkRoot, stackName)
	if state == PassphraseCurrent {
		// Done earlier, maybe by another process: the workspace must name the same salt.
		return false, m.setWorkspaceSalt(dir, stackName, salt)
	}
	newSalt, err := m.newStackSalt(dir)
	if err != nil {
		return false, err
	}
	current, err := m.passphrase(dir)
	if err != nil {
		return false, err
	}
	enc, err := crypterFor(current, newSalt)
	if err != nil {
		return false, err
	}
	n, err := reencryptDeployment(ctx, d, old, enc, newSalt)
	if err != nil {
		return false, fmt.Errorf("re-encrypt stack %s: %w", stackName, err)
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	// The CLI's import reads the workspace's salt with the current passphrase: set it first.
	// Killed between the two, the state is still the previous passphrase's, and the next
	// reencrypt finds it so and does it again.
	if err := m.setWorkspaceSalt(dir, stackName, newSalt); err != nil {
		return false, err
	}
	if err := st.Import(ctx, apitype.UntypedDeployment{Version: version, Deployment: raw}); err != nil {
		return false, fmt.Errorf("import the re-encrypted stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	slog.Info("re-encrypted the stack's secrets with the current passphrase", "stack", stackName, "secrets", n)
	return true, nil
}

// Reencrypt is reencrypt for a caller outside an operation (`pulumi-operator rotate-passphrase
// --direct`): it makes sure stackName opens with the current passphrase and reports whether it
// re-encrypted. Nothing must update the stack meanwhile: the export and the import are two
// commands, and an update between them would be lost (the operator's own reencrypt runs inside
// the one reconcile of the stack's object, so it never races the operator's updates).
func (m *Manager) Reencrypt(ctx context.Context, stackName string) (bool, error) {
	if m.cfg.PreviousPassphraseFile == "" {
		return false, errors.New("re-encrypt: no previous passphrase (--previous-passphrase-file) to re-encrypt from")
	}
	return m.reencrypt(ctx, stackName)
}

// setWorkspaceSalt writes salt as the encryptionsalt of stackName's Pulumi.<stack>.yaml in dir,
// keeping the rest of the file.
func (m *Manager) setWorkspaceSalt(dir, stackName, salt string) error {
	path := filepath.Join(dir, "Pulumi."+stackName+".yaml")
	ps := &workspace.ProjectStack{}
	if _, err := os.Stat(path); err == nil {
		proj := &workspace.Project{Name: tokens.PackageName(m.cfg.Project)}
		if ps, err = workspace.LoadProjectStack(nil, proj, path); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	if ps.EncryptionSalt == salt {
		return nil
	}
	ps.EncryptionSalt = salt
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := ps.Save(path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
