package stack

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestEngineHostCanServe: the engine host makes stacks (and runs ups) only where `pulumi stack
// init` would make the same: a DIY backend and the passphrase secrets provider.
func TestEngineHostCanServe(t *testing.T) {
	for name, tc := range map[string]struct {
		backend, secrets string
		want             bool
	}{
		"file":                       {"file:///var/lib/state", "passphrase", true},
		"PostgreSQL":                 {"postgres://u@127.0.0.1:5432/db", "passphrase", true},
		"S3":                         {"s3://bucket?endpoint=http://127.0.0.1:9000", "passphrase", true},
		"Pulumi Cloud":               {"https://api.pulumi.com", "passphrase", false},
		"a self-hosted Pulumi Cloud": {"http://127.0.0.1:8080", "passphrase", false},
		"a KMS secrets provider":     {"file:///var/lib/state", "awskms://alias/pulumi", false},
		"the backend's default":      {"file:///var/lib/state", "default", false},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := ParseBackend(tc.backend)
			if err != nil {
				t.Fatal(err)
			}
			if got := engineHostCanServe(b, tc.secrets); got != tc.want {
				t.Errorf("engineHostCanServe(%s, %s) = %v, want %v", tc.backend, tc.secrets, got, tc.want)
			}
		})
	}
}

// TestAdoptPendingEmptyStack: a stack the engine host made and no up has run on exports as
// deployment null (no resources, no pending operations); settlePending finds nothing to do.
func TestAdoptPendingEmptyStack(t *testing.T) {
	dep := apitype.UntypedDeployment{Version: 3, Deployment: json.RawMessage("null")}
	_, done, unread, err := adoptPending(dep)
	if err != nil || len(done) != 0 || unread {
		t.Fatalf("adoptPending(null) = %v, %v, %v; want nothing to do", done, unread, err)
	}
}

// TestStackInitWithoutEngineHost: without an engine host (--engine-host none) a new stack is made
// by the pinned CLI's `pulumi operator-request` (the engine host's code, no key derivation), and
// the up works; a pulumi CLI without that command (the previous release's, made before it
// existed) makes it with `pulumi stack init`. A failing engine host falls back the same way:
// TestEngineHostInitFallsBack.
func TestStackInitWithoutEngineHost(t *testing.T) {
	m, _, runs := countingManager(t)
	name, err := m.StackName("peerns", "fallback")
	if err != nil {
		t.Fatal(err)
	}
	up, err := m.Up(context.Background(), name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if got, want := runs(), []string{"operator-request", "up"}; !slices.Equal(got, want) {
		t.Fatalf("up of a new stack ran %q, want %q", got, want)
	}
	if up.Outputs["greeting"] != "hello" || up.Changes["create"] != 1 {
		t.Fatalf("up = %+v, want greeting hello, 1 create", up)
	}

	old, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + t.TempDir(), WorkRoot: t.TempDir(), PulumiPath: testenv.PreviousPulumiCLI(t),
		PulumiHome: DefaultPulumiHome(testenv.PulumiCLI(t)), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}})
	if err != nil {
		t.Fatal(err)
	}
	if up, err := old.Up(context.Background(), name, program("hello", 0), RunOptions{}); err != nil || up.Changes["create"] != 1 {
		t.Fatalf("up with a CLI without the request command = %+v, %v; want the stack made by `pulumi stack init`, 1 create", up, err)
	}
	if !cliOf(old).noOperatorRequests.Load() {
		t.Fatal("the CLI without the request command was not found out")
	}
}

// TestEngineHostInitStack: a stack the engine host made holds its secrets like one of `pulumi
// stack init`: its first up takes the salt the Manager wrote (salt.go) and records it in the
// state, and another workspace (a laptop, a restarted pod without its workspace directory)
// reads the stack's secret output back and updates it; a wrong passphrase is refused there.
// A second new stack gets the same salt; after a passphrase change a new stack gets a new one,
// and its up works with the new passphrase.
func TestEngineHostInitStack(t *testing.T) {
	m, backend, runs := hostManager(t)
	ctx := context.Background()
	name, err := m.StackName("peerns", "secrets")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, name, secretProgram("hello"), RunOptions{}); err != nil {
		t.Fatalf("up: %v", err)
	}
	if got := runs(); len(got) != 0 {
		t.Fatalf("up of a new stack ran the CLI %q, want no CLI run (init and up in the engine host)", got)
	}
	state, err := os.ReadFile(filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	salt := m.salt.state
	if salt == "" || !strings.Contains(string(state), `"secrets_providers":{"type":"passphrase","state":{"salt":"`+salt+`"}}`) || strings.Contains(string(state), "s3cr3t") {
		t.Fatalf("state after the first up: want the Manager's salt %q recorded and the secret encrypted:\n%s", salt, state)
	}
	stackSalt := func(m *Manager, name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(m.cfg.WorkRoot, name, "Pulumi."+name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(strings.TrimPrefix(string(b), "encryptionsalt:"))
	}
	if got := stackSalt(m, name); got != salt {
		t.Fatalf("Pulumi.%s.yaml holds salt %q, want the Manager's %q", name, got, salt)
	}
	second, err := m.StackName("peerns", "second")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, second, secretProgram("hello"), RunOptions{}); err != nil {
		t.Fatalf("up of a second new stack: %v", err)
	}
	if got := stackSalt(m, second); got != salt {
		t.Fatalf("a second new stack got salt %q, want the first's %q", got, salt)
	}
	m.env["PULUMI_CONFIG_PASSPHRASE"] = "rotated-passphrase"
	third, err := m.StackName("peerns", "third")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, third, secretProgram("hello"), RunOptions{}); err != nil {
		t.Fatalf("up of a new stack after a passphrase change: %v", err)
	}
	if got := stackSalt(m, third); got == salt || got != m.salt.state {
		t.Fatalf("after a passphrase change a new stack got salt %q (old %q, Manager's %q), want a new one", got, salt, m.salt.state)
	}
	m.env["PULUMI_CONFIG_PASSPHRASE"] = "test-passphrase"
	runs()
	laptop, _ := newManager(t)
	laptop.backend = m.backend
	up, err := laptop.Up(ctx, name, secretProgram("bye"), RunOptions{})
	if err != nil {
		t.Fatalf("up from another workspace: %v", err)
	}
	if up.Outputs["greeting"] != "bye" || up.Outputs["token"] != "[secret]" {
		t.Fatalf("up from another workspace = %+v, want greeting bye, token [secret]", up)
	}
	wrong, _ := newManager(t)
	wrong.backend = m.backend
	wrong.env["PULUMI_CONFIG_PASSPHRASE"] = "not-the-passphrase"
	if _, err := wrong.Up(ctx, name, secretProgram("bye"), RunOptions{}); err == nil || !strings.Contains(err.Error(), "passphrase") {
		t.Fatalf("up with a wrong passphrase: err = %v, want one about the passphrase", err)
	}
}

// TestNewStackPassphraseFileMissing: a passphrase file that is not there (a Secret not
// mounted) fails a new stack's up with the CLI's message naming the variable and the file, and
// no salt is written for a passphrase nobody could read; once the file is there, the next up
// of the same object works.
func TestNewStackPassphraseFileMissing(t *testing.T) {
	m, _, _ := countingManager(t)
	unsetPassphraseEnv(t)
	phraseFile := filepath.Join(t.TempDir(), "passphrase")
	delete(m.env, "PULUMI_CONFIG_PASSPHRASE")
	m.env["PULUMI_CONFIG_PASSPHRASE_FILE"] = phraseFile
	ctx := context.Background()
	name, err := m.StackName("peerns", "nosecret")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Up(ctx, name, secretProgram("hello"), RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "PULUMI_CONFIG_PASSPHRASE_FILE") || !strings.Contains(err.Error(), phraseFile) {
		t.Fatalf("up without the passphrase file: err = %v, want one naming PULUMI_CONFIG_PASSPHRASE_FILE and %s", err, phraseFile)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.WorkRoot, name, "Pulumi."+name+".yaml")); err == nil {
		t.Fatal("a salt was written without a readable passphrase")
	}
	if err := os.WriteFile(phraseFile, []byte("mounted-later\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if up, err := m.Up(ctx, name, secretProgram("hello"), RunOptions{}); err != nil || up.Outputs["greeting"] != "hello" {
		t.Fatalf("up once the file is there = %+v, %v; want greeting hello", up, err)
	}
}
