package stack

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
)

// unsetPassphraseEnv clears both passphrase variables of this process for the test (the
// test runner's own environment may set them), restoring them after.
func unsetPassphraseEnv(t *testing.T) {
	for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"} {
		t.Setenv(k, "") // restores the old value after the test
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPassphraseRule: the Manager reads the passphrase as the CLI does (pkg/v3
// secrets/passphrase readPassphrase), or the salt it writes would not match the key the CLI
// derives.
func TestPassphraseRule(t *testing.T) {
	unsetPassphraseEnv(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "phrase"), []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(dir, "phrase")
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
		err  string
	}{
		"the variable":                        {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "p"}, want: "p"},
		"the variable, empty":                 {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": ""}, want: ""},
		"the variable wins over the file":     {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "p", "PULUMI_CONFIG_PASSPHRASE_FILE": abs}, want: "p"},
		"the file, white space trimmed":       {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": abs}, want: "from-file"},
		"a relative file, from the workspace": {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": "phrase"}, want: "from-file"},
		"a missing file":                      {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": filepath.Join(dir, "nope")}, err: "read PULUMI_CONFIG_PASSPHRASE_FILE"},
		"an empty file name":                  {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": ""}, err: ErrNoPassphrase.Error()},
		"neither":                             {env: map[string]string{}, err: ErrNoPassphrase.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			m := &Manager{env: tc.env}
			got, err := m.passphrase(dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("passphrase() = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("passphrase() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("the process environment under Config.Env", func(t *testing.T) {
		t.Setenv("PULUMI_CONFIG_PASSPHRASE", "from-process")
		if got, err := (&Manager{env: map[string]string{}}).passphrase(dir); err != nil || got != "from-process" {
			t.Fatalf("passphrase() = %q, %v; want the process's", got, err)
		}
		if got, err := (&Manager{env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "from-config"}}).passphrase(dir); err != nil || got != "from-config" {
			t.Fatalf("passphrase() = %q, %v; want Config.Env's", got, err)
		}
	})
}

// TestNewSaltState: the state has pkg/v3's shape, its check value opens with the passphrase's
// key and not with another's; a Manager makes one per passphrase.
func TestNewSaltState(t *testing.T) {
	state, err := newSaltState("right")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(state, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		t.Fatalf("state %q: want v1:<salt>:<check>", state)
	}
	salt, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil || len(salt) != 8 {
		t.Fatalf("salt %q: %v, want 8 bytes of base64", parts[1], err)
	}
	if got, err := config.NewSymmetricCrypterFromPassphrase("right", salt).DecryptValue(context.Background(), parts[2]); err != nil || got != "pulumi" {
		t.Fatalf("check value with the right passphrase = %q, %v; want pulumi", got, err)
	}
	if _, err := config.NewSymmetricCrypterFromPassphrase("wrong", salt).DecryptValue(context.Background(), parts[2]); err == nil {
		t.Fatal("the check value opened with a wrong passphrase")
	}

	unsetPassphraseEnv(t)
	m := &Manager{env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "one"}}
	first, err := m.newStackSalt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := m.newStackSalt(t.TempDir()); again != first {
		t.Errorf("a second new stack got salt %q, want the first's %q", again, first)
	}
	m.env["PULUMI_CONFIG_PASSPHRASE"] = "two"
	if rotated, _ := m.newStackSalt(t.TempDir()); rotated == first {
		t.Error("after a passphrase change a new stack got the old passphrase's salt")
	}
	delete(m.env, "PULUMI_CONFIG_PASSPHRASE")
	if _, err := m.newStackSalt(t.TempDir()); !errors.Is(err, ErrNoPassphrase) {
		t.Errorf("without a passphrase: err = %v, want ErrNoPassphrase", err)
	}
}
