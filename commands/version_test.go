package commands

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/version"
)

// runApp runs the app with args and returns what it wrote to stdout and its exit code.
func runApp(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errOut strings.Builder
	app := App()
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"pulumi-operator"}, args...))
	return out.String(), ExitCode(err)
}

// TestVersion: `version` names the operator's version, the real pinned CLI's own answer and
// the provider plugin's path in the Pulumi home the operator would use; `--version` prints the
// operator's version alone.
func TestVersion(t *testing.T) {
	cli := testenv.PulumiCLI(t)
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	plugin, err := stack.FindKubernetesPluginFor(cli)
	if err != nil {
		t.Fatal(err)
	}
	out, code := runApp(t, "--pulumi", cli, "version")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"pulumi-operator: v" + version.Version + " ",
		"pulumi CLI: v" + stack.PinnedCLIVersion + " at " + cli + " (--pulumi)\n",
		"Kubernetes provider plugin: v" + stack.KubernetesPluginVersion + " at " + plugin + " ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	if out, code := runApp(t, "--version"); code != 0 || out != "pulumi-operator version v"+version.Version+"\n" {
		t.Errorf("--version: exit %d, output %q", code, out)
	}
}

// TestVersionMissingParts: with no CLI at --pulumi and no plugin in the Pulumi home, `version`
// still answers (exit 0), and each missing part's line says why and what to do.
func TestVersionMissingParts(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PULUMI_HOME", dir)
	t.Setenv("PATH", dir) // no pulumi-resource-kubernetes on PATH either
	out, code := runApp(t, "--pulumi", dir+"/no-pulumi", "version")
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	for _, want := range []string{
		"pulumi-operator: v" + version.Version,
		"pulumi CLI: not found at " + dir + "/no-pulumi (",
		"make tools",
		"Kubernetes provider plugin: not found (",
		"make plugins",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}

	// A CLI that exists but fails is not reported as missing.
	broken := dir + "/broken-pulumi"
	if err := os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _ = runApp(t, "--pulumi", broken, "version")
	if want := "pulumi CLI: did not answer at " + broken; !strings.Contains(out, want) {
		t.Errorf("version output lacks %q:\n%s", want, out)
	}
}

// TestPulumiOnPath: with no --pulumi and no CLI next to the binary (the test binary's directory
// has none), the pulumi on PATH is used and `version` says so; one of another version is named
// as such by `version` and warned about when the stack manager starts; with none anywhere the
// stack manager's error says where a CLI was looked for and what to do.
func TestPulumiOnPath(t *testing.T) {
	real := testenv.PulumiCLI(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "pulumi")); err == nil {
		t.Fatalf("a pulumi next to the test binary %s: this test needs none there", exe)
	}
	t.Setenv("PULUMI_OPERATOR_PULUMI", "") // restored after the test
	os.Unsetenv("PULUMI_OPERATOR_PULUMI")  // --pulumi's variable: unset, not empty
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if err := os.Symlink(real, filepath.Join(dir, "pulumi")); err != nil {
		t.Fatal(err)
	}
	out, code := runApp(t, "version")
	if want := "pulumi CLI: v" + stack.PinnedCLIVersion + " at " + filepath.Join(dir, "pulumi") + " (on PATH; none next to this binary)\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("version with the pinned CLI on PATH: exit %d, output lacks %q:\n%s", code, want, out)
	}

	// Another version on PATH: the real CLI, but answering `pulumi version` with an older one
	// (no second CLI version can be had here).
	other := t.TempDir()
	script := "#!/bin/sh\nif [ \"$1\" = version ]; then echo v3.254.0; exit 0; fi\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(other, "pulumi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", other)
	out, _ = runApp(t, "version")
	if want := "pulumi CLI: v3.254.0, not the pinned v" + stack.PinnedCLIVersion + " at " + filepath.Join(other, "pulumi") + " (on PATH"; !strings.Contains(out, want) {
		t.Errorf("version with another CLI on PATH lacks %q:\n%s", want, out)
	}
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "x")
	cfg := &config{stateDir: t.TempDir(), clusterName: "c", projectFile: filepath.Join(t.TempDir(), "none.yaml"), keepHistory: 1}
	mgr, _, err := newStackManager(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("stack manager with another CLI version on PATH: %v", err)
	}
	mgr.Close()
	if !strings.Contains(logs.String(), "not the version this operator pins") || !strings.Contains(logs.String(), "version=3.254.0") {
		t.Errorf("no warning about the CLI's version in the log:\n%s", logs.String())
	}

	t.Setenv("PATH", t.TempDir())
	_, _, err = newStackManager(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "none on PATH") || !strings.Contains(err.Error(), "--pulumi") {
		t.Errorf("no CLI anywhere: %v; want an error saying where it looked and what to do", err)
	}
}
