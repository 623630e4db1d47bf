package stack

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// newManager returns a Manager on the real pinned CLI with a fresh file backend.
func newManager(t *testing.T) (*Manager, string) {
	t.Helper()
	dir := t.TempDir()
	backend := filepath.Join(dir, "backend")
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  "file://" + backend,
		WorkRoot:    filepath.Join(dir, "workspaces"),
		PulumiPath:  testenv.PulumiCLI(t),
		ClusterName: "test",
		Env:         map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, backend
}

// program needs no provider plugin: it only exports its input.
func program(greeting string, sleep time.Duration) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		time.Sleep(sleep)
		ctx.Export("greeting", pulumi.String(greeting))
		return nil
	}
}

// secretProgram needs no provider plugin: it exports greeting and a secret output "token".
func secretProgram(greeting string) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		ctx.Export("greeting", pulumi.String(greeting))
		ctx.Export("token", pulumi.ToSecret(pulumi.String("s3cr3t")))
		return nil
	}
}

func stackFiles(t *testing.T, backend string) []string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", "*.json"))
	return matches
}

func TestTwoStacksAtOnce(t *testing.T) {
	m, backend := newManager(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]string, 2)
	for i, n := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, _ := m.StackName("ns", n)
			res, err := m.Up(context.Background(), name, program("from-"+n, 0), RunOptions{})
			errs[i], outs[i] = err, res.Outputs["greeting"]
		}()
	}
	wg.Wait()
	for i, n := range []string{"a", "b"} {
		if errs[i] != nil || outs[i] != "from-"+n {
			t.Fatalf("stack %s: %q, %v", n, outs[i], errs[i])
		}
	}
	if got := stackFiles(t, backend); len(got) != 2 {
		t.Fatalf("backend holds %v, want two stacks", got)
	}
}

// TestNewAcceptsKMSWithoutPassphrase: a KMS secrets provider needs no passphrase (nothing here
// reaches a KMS: New only checks and runs `pulumi version`).
func TestNewAcceptsKMSWithoutPassphrase(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for _, p := range []string{"awskms://alias/pulumi?region=eu-west-1", "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k", "hashivault://pulumi", "default"} {
		if _, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: testenv.PulumiCLI(t),
			ClusterName: "c", SecretsProvider: p}); err != nil {
			t.Errorf("New with secrets provider %s: %v", p, err)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	cli := testenv.PulumiCLI(t)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "a-file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: cli, ClusterName: "c",
		Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"}}
	tests := map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"no project":                             {func(c *Config) { c.Project = "" }, "project"},
		"bad project":                            {func(c *Config) { c.Project = "a b" }, "project name"},
		"no backend":                             {func(c *Config) { c.BackendURL = "" }, "backend URL"},
		"backend no URL":                         {func(c *Config) { c.BackendURL = "/just/a/dir" }, "want file:///dir"},
		"backend directory not creatable":        {func(c *Config) { c.BackendURL = "file://" + notDir + "/state" }, "create backend directory"},
		"password hidden":                        {func(c *Config) { c.BackendURL = "::postgres://u:hunter2@h/db" }, "backend URL"},
		"password in the backend URL":            {func(c *Config) { c.BackendURL = "postgres://u:hunter2@h/db" }, "remove it from the URL"},
		"no workroot":                            {func(c *Config) { c.WorkRoot = "" }, "workspace root"},
		"no CLI":                                 {func(c *Config) { c.PulumiPath = filepath.Join(dir, "nope") }, "make tools"},
		"bad cluster":                            {func(c *Config) { c.ClusterName = "Not_A_Label" }, "cluster name"},
		"bad secrets provider":                   {func(c *Config) { c.SecretsProvider = "kms://x" }, "want passphrase, default (Pulumi Cloud) or a KMS URL"},
		"passphrase provider without passphrase": {func(c *Config) { c.Env = nil }, "PULUMI_CONFIG_PASSPHRASE"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the backend password: %v", err)
			}
		})
	}
}

// A missing passphrase is a clear error before any CLI run, never a prompt or a hang.
func TestNoPassphrase(t *testing.T) {
	cli := testenv.PulumiCLI(t)
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE_FILE")
	dir := t.TempDir()
	_, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: cli, ClusterName: "c"})
	if !errors.Is(err, ErrNoPassphrase) {
		t.Fatalf("New without passphrase = %v, want ErrNoPassphrase", err)
	}
	// Another secrets provider needs no passphrase.
	if _, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: cli, ClusterName: "c",
		SecretsProvider: "awskms://alias/x"}); err != nil {
		t.Fatalf("New with a KMS secrets provider: %v", err)
	}
}

// TestChildGOGC: the CLI gets ChildGOGC unless the operator's environment sets GOGC (which the
// CLI then inherits as it is) or Config.Env does (which wins over both).
func TestChildGOGC(t *testing.T) {
	tests := map[string]struct {
		processEnv string // "" leaves GOGC unset
		configEnv  string
		want       string // "" means not in the Manager's env: the process's own is inherited
	}{
		"default":                 {want: ChildGOGC},
		"operator's own":          {processEnv: "50", want: ""},
		"Config.Env":              {configEnv: "off", want: "off"},
		"Config.Env over process": {processEnv: "50", configEnv: "200", want: "200"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.processEnv != "" {
				t.Setenv("GOGC", tc.processEnv)
			} else if old, ok := os.LookupEnv("GOGC"); ok {
				t.Setenv("GOGC", old) // restored after the test
				os.Unsetenv("GOGC")
			}
			env := map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"}
			if tc.configEnv != "" {
				env["GOGC"] = tc.configEnv
			}
			m, err := New(Config{Project: "p", BackendURL: "file://" + t.TempDir(), WorkRoot: t.TempDir(),
				PulumiPath: testenv.PulumiCLI(t), ClusterName: "c", Env: env})
			if err != nil {
				t.Fatal(err)
			}
			if got := m.env["GOGC"]; got != tc.want {
				t.Fatalf("GOGC in the CLI's added environment = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestQualifiedNamePastes: the name status shows for a stack of a DIY backend is one the pinned
// CLI's `pulumi stack select` takes in the repository (the old "<project>/<stack>" it refuses); on Pulumi Cloud without a reachable service the CLI cannot
// tell its default organization, and the name is the bare stack name, which it resolves in the
// project's directory.
func TestQualifiedNamePastes(t *testing.T) {
	m, backend := newManager(t)
	name, _ := m.StackName("ns", "paste")
	if _, err := m.Up(context.Background(), name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	q := m.QualifiedName(name)
	if want := "organization/kindcustomhttp/" + name; q != want {
		t.Fatalf("QualifiedName = %q, want %q", q, want)
	}
	// Where a user pastes it: the repository, whose Pulumi.yaml is the project's.
	project, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), project, 0o644); err != nil {
		t.Fatal(err)
	}
	selectStack := func(ref string) (string, error) {
		cmd := exec.Command(testenv.PulumiCLI(t), "stack", "select", ref)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL=file://"+backend, "PULUMI_HOME="+t.TempDir(),
			"PULUMI_SKIP_UPDATE_CHECK=true", "PULUMI_CONFIG_PASSPHRASE=test-passphrase")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := selectStack(q); err != nil {
		t.Fatalf("pulumi stack select %s: %v\n%q", q, err, out)
	}
	if out, err := selectStack("kindcustomhttp/" + name); err == nil || !strings.Contains(out, "organization name must be 'organization'") {
		t.Errorf("pulumi stack select kindcustomhttp/%s (the old status.stack) = %v, %s; want the CLI's refusal", name, err, out)
	}

	cloud, err := New(Config{Project: "kindcustomhttp", BackendURL: "https://127.0.0.1:1", WorkRoot: t.TempDir(),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test", Env: map[string]string{"PULUMI_ACCESS_TOKEN": "pul-none", "PULUMI_CONFIG_PASSPHRASE": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cloud.QualifiedName(name); got != name {
		t.Errorf("QualifiedName on an unreachable Pulumi Cloud = %q, want the bare %q", got, name)
	}
}
