package commands

import (
	"os"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/internal/version"
	"github.com/pulumi-operator/pulumi-operator/stack"
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
		"pulumi CLI: v" + stack.PinnedCLIVersion + " at " + cli + "\n",
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
