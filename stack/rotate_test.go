package stack

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestCrypterFor: the passphrase that made a salt opens it; another, a malformed salt or an
// unknown version do not.
func TestCrypterFor(t *testing.T) {
	salt, err := newSaltState("right")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crypterFor("right", salt); err != nil {
		t.Errorf("the right passphrase: %v", err)
	}
	if _, err := crypterFor("wrong", salt); !errors.Is(err, ErrIncorrectPassphrase) {
		t.Errorf("a wrong passphrase: %v, want ErrIncorrectPassphrase", err)
	}
	for _, bad := range []string{"", "v1:only-two", "v2:AAAA:x", "v1:!!!:x"} {
		if _, err := crypterFor("right", bad); err == nil || errors.Is(err, ErrIncorrectPassphrase) {
			t.Errorf("salt %q: %v, want an error about the salt", bad, err)
		}
	}
}

// TestReencryptDeployment: every secret value, however deep, is re-encrypted from the old key
// to the new one (the new key decrypts the same plaintext, the old one no longer does), the
// salt is replaced, and nothing else changes (numbers keep their spelling).
func TestReencryptDeployment(t *testing.T) {
	ctx := context.Background()
	oldSalt, _ := newSaltState("old")
	newSalt, _ := newSaltState("new")
	oldC, _ := crypterFor("old", oldSalt)
	newC, _ := crypterFor("new", newSalt)
	enc := func(s string) string { c, _ := oldC.EncryptValue(ctx, s); return c }
	doc := `{"manifest":{"time":"t"},"secrets_providers":{"type":"passphrase","state":{"salt":"` + oldSalt + `"}},
	  "resources":[{"urn":"u","outputs":{"port":8080,"big":12345678901234567890,
	    "token":{"` + secretSigKey + `":"` + secretSigValue + `","ciphertext":"` + enc("s3cr3t") + `"},
	    "nested":[{"deep":{"` + secretSigKey + `":"` + secretSigValue + `","ciphertext":"` + enc("deeper") + `"}}],
	    "plain":{"` + secretSigKey + `":"` + secretSigValue + `","plaintext":"\"visible\""}}}]}`
	var d map[string]any
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	n, err := reencryptDeployment(ctx, d, oldC, newC, newSalt)
	if err != nil || n != 2 {
		t.Fatalf("reencryptDeployment = %d, %v; want 2 values", n, err)
	}
	if got := deploymentSalt(d); got != newSalt {
		t.Errorf("salt = %q, want the new one", got)
	}
	out := d["resources"].([]any)[0].(map[string]any)["outputs"].(map[string]any)
	for what, ct := range map[string]any{
		"s3cr3t": out["token"].(map[string]any)["ciphertext"],
		"deeper": out["nested"].([]any)[0].(map[string]any)["deep"].(map[string]any)["ciphertext"],
	} {
		if pt, err := newC.DecryptValue(ctx, ct.(string)); err != nil || pt != what {
			t.Errorf("the new key decrypts %q, %v; want %q", pt, err, what)
		}
		if _, err := oldC.DecryptValue(ctx, ct.(string)); err == nil {
			t.Errorf("the old key still decrypts the value of %q", what)
		}
	}
	b, _ := json.Marshal(out)
	for _, want := range []string{`"port":8080`, `"big":12345678901234567890`, `"plaintext":"\"visible\""`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("outputs %s lost %s", b, want)
		}
	}
	// A value the old key cannot open stops it, saying so.
	d2 := map[string]any{"x": map[string]any{secretSigKey: secretSigValue, "ciphertext": "v1:AAAA:AAAA"}}
	if _, err := reencryptDeployment(ctx, d2, oldC, newC, newSalt); err == nil || !strings.Contains(err.Error(), "decrypt a secret value") {
		t.Errorf("an undecryptable value: %v", err)
	}
	var _ config.Crypter = oldC
}

// TestRotatePassphrase, on the real CLI and a file backend: stacks made under passphrase "old"
// (one with a secret output), then a Manager whose passphrase is "new" with "old" as the previous
// one: PassphraseOf says previous; its up re-encrypts first (the secret output still reads
// back); PassphraseOf then says current, a Manager with "old" alone can no longer open the stack
// and one with "new" alone can; a stack re-encrypted by another Manager (its workspace holding
// the stale salt) is only synced; a CLI without the request command finds the previous passphrase
// by trying it. Neither passphrase: ErrIncorrectPassphrase, saying what to do.
func TestRotatePassphrase(t *testing.T) {
	dir := t.TempDir()
	backend := "file://" + filepath.Join(dir, "backend")
	mk := func(t *testing.T, phrase, previous, workRoot string) *Manager {
		t.Helper()
		cfg := Config{Project: "kindcustomhttp", BackendURL: backend, WorkRoot: filepath.Join(dir, workRoot),
			PulumiPath: testenv.PulumiCLI(t), ClusterName: "rot",
			Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": phrase}}
		if previous != "" {
			cfg.PreviousPassphraseFile = filepath.Join(dir, workRoot+"-previous")
			if err := os.WriteFile(cfg.PreviousPassphraseFile, []byte(previous+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ctx := context.Background()
	old := mk(t, "old", "", "ws-old")
	a, _ := old.StackName("ns", "a")
	b, _ := old.StackName("ns", "b")
	for _, s := range []string{a, b} {
		if _, err := old.Up(ctx, s, secretProgram("hi"), RunOptions{}); err != nil {
			t.Fatalf("up under the old passphrase: %v", err)
		}
	}

	rot := mk(t, "new", "old", "ws-rot")
	if got, err := rot.PassphraseOf(ctx, a); err != nil || got != PassphrasePrevious {
		t.Fatalf("PassphraseOf before = %q, %v; want previous", got, err)
	}
	res, err := rot.Up(ctx, a, secretProgram("hi again"), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "hi again" {
		t.Fatalf("up with the previous passphrase configured = %v, %v", res.Outputs, err)
	}
	if got, err := rot.PassphraseOf(ctx, a); err != nil || got != PassphraseCurrent {
		t.Fatalf("PassphraseOf after = %q, %v; want current", got, err)
	}
	if _, err := mk(t, "old", "", "ws-old2").Up(ctx, a, secretProgram("x"), RunOptions{}); err == nil {
		t.Error("the old passphrase alone still opens the re-encrypted stack")
	}
	res, err = mk(t, "new", "", "ws-new").Up(ctx, a, secretProgram("new only"), RunOptions{})
	if err != nil || !strings.Contains(res.Outputs["token"], "secret") {
		t.Fatalf("the new passphrase alone: %v, %v", res.Outputs, err)
	}

	// b, re-encrypted by another Manager: rot's workspace of b is stale; its up only syncs.
	other := mk(t, "new", "old", "ws-other")
	if did, err := other.reencrypt(ctx, b); err != nil || !did {
		t.Fatalf("reencrypt of b = %v, %v", did, err)
	}
	if _, err := rot.Up(ctx, b, secretProgram("b"), RunOptions{}); err != nil {
		t.Fatalf("up of b, re-encrypted elsewhere: %v", err)
	}

	// A CLI without the request command (the previous release's) exports with a passphrase: the
	// current one fails, the previous one opens the stack.
	c, _ := old.StackName("ns", "c")
	if _, err := old.Up(ctx, c, secretProgram("c"), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign := mk(t, "new", "old", "ws-foreign")
	foreign.cfg.PulumiPath = testenv.PreviousPulumiCLI(t)
	if foreign.cmd, err = pulumiCommand(foreign.cfg.PulumiPath, foreign.cfg.WorkRoot, foreign.procs); err != nil {
		t.Fatal(err)
	}
	if got, err := foreign.PassphraseOf(ctx, c); err != nil || got != PassphrasePrevious {
		t.Fatalf("PassphraseOf with a CLI without the request command = %q, %v; want previous", got, err)
	}
	if !cliOf(foreign).noOperatorRequests.Load() {
		t.Fatal("the export went through the request command of a CLI that has none")
	}

	neither := mk(t, "third", "fourth", "ws-neither")
	_, err = neither.Up(ctx, a, secretProgram("x"), RunOptions{})
	if !errors.Is(err, ErrIncorrectPassphrase) || !strings.Contains(err.Error(), "--previous-passphrase-file") {
		t.Fatalf("neither passphrase: %v, want ErrIncorrectPassphrase naming --previous-passphrase-file", err)
	}
}
