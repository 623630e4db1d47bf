package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestIsEngineHost pins the names this binary dispatches on: the engine host's name, as a path
// or bare, with or without ".exe"; any other name, and no name at all, is the CLI.
func TestIsEngineHost(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want bool
	}{
		"bare name with a project": {[]string{"pulumi-operator-engine", "kindcustomhttp"}, true},
		"path":                     {[]string{"/usr/local/bin/pulumi-operator-engine"}, true},
		".exe":                     {[]string{"pulumi-operator-engine.exe"}, true},
		"the CLI":                  {[]string{"/usr/local/bin/pulumi", "version"}, false},
		"the operator":             {[]string{"./pulumi-operator"}, false},
		"a longer name":            {[]string{"pulumi-operator-engine-old"}, false},
		"empty name":               {[]string{""}, false},
		"no arguments":             {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := isEngineHost(tc.args); got != tc.want {
				t.Errorf("isEngineHost(%q) = %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}

// TestCommandArgs: the operator's command is the first argument, after any --non-interactive;
// its own arguments follow. A CLI command, another word, the engine host, or the word anywhere
// else is not it.
func TestCommandArgs(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want []string
		ok   bool
	}{
		"bare":                      {[]string{"pulumi", "operator-request", "proj", "s", "1"}, []string{"proj", "s", "1"}, true},
		"after non-interactive":     {[]string{"/bin/pulumi", "--non-interactive", "operator-request", "p", "s", "2"}, []string{"p", "s", "2"}, true},
		"no arguments of its own":   {[]string{"pulumi", "operator-request"}, []string{}, true},
		"a CLI command":             {[]string{"pulumi", "--non-interactive", "up", "--yes"}, nil, false},
		"the word later":            {[]string{"pulumi", "stack", "operator-request"}, nil, false},
		"a longer word":             {[]string{"pulumi", "operator-requests", "proj"}, nil, false},
		"another global flag first": {[]string{"pulumi", "--color=never", "operator-request"}, nil, false},
		"program name only":         {[]string{"pulumi"}, nil, false},
		"nothing":                   {nil, nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := commandArgs(tc.args, "operator-request")
			if ok != tc.ok || (ok && !slices.Equal(got, tc.want)) {
				t.Errorf("commandArgs(%q, operator-request) = %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// overlayScript is hack/cli-overlay.sh, which writes the overlay this package is built with.
const overlayScript = "../../../hack/cli-overlay.sh"

// runOverlay runs script (a copy of hack/cli-overlay.sh or the file itself) with args and
// returns its exit code and standard error.
func runOverlay(t *testing.T, script string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{script}, args...)...)
	// A module without pkg/v3 must fail to load, not be fixed up by a download.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatalf("sh %s: %v", script, err)
		return 0, ""
	}
}

// TestOverlay: the overlay puts every Go file of the CLI's main package (from the module cache,
// at agent/go.mod's version) into this directory under a pulumi_ name, and nothing else; the
// CLI's main function is among them, so that the package links.
func TestOverlay(t *testing.T) {
	out := filepath.Join(t.TempDir(), "overlay.json")
	if code, stderr := runOverlay(t, overlayScript, out); code != 0 {
		t.Fatalf("cli-overlay.sh: exit %d: %s", code, stderr)
	}
	var o struct{ Replace map[string]string }
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	mainFunc := false
	for dst, src := range o.Replace {
		if filepath.Dir(dst) != here || !strings.HasPrefix(filepath.Base(dst), "pulumi_") || filepath.Base(dst) != "pulumi_"+filepath.Base(src) {
			t.Errorf("overlay %s -> %s: want %s/pulumi_%s", dst, src, here, filepath.Base(src))
		}
		if !strings.Contains(filepath.ToSlash(src), "github.com/pulumi/pulumi/pkg/v3@") || !strings.HasSuffix(filepath.Dir(filepath.ToSlash(src)), "/cmd/pulumi") {
			t.Errorf("overlay source %s is not the CLI's main package in the module cache", src)
		}
		code, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(code), "\npackage main\n") {
			t.Errorf("%s is not in package main", src)
		}
		mainFunc = mainFunc || strings.Contains(string(code), "\nfunc main() {")
	}
	if !mainFunc {
		t.Errorf("no file of the overlay %v has the CLI's func main", o.Replace)
	}
}

// TestOverlayErrors: a wrong command line, a file of this directory where the overlay would put
// one of the CLI's, and a module that cannot load the CLI's package each fail with a message
// that says what is wrong, and leave no overlay file behind.
func TestOverlayErrors(t *testing.T) {
	if code, stderr := runOverlay(t, overlayScript); code != 2 || !strings.Contains(stderr, "usage:") {
		t.Errorf("no argument: exit %d, %q; want 2 and the usage", code, stderr)
	}
	// A copy of the script beside a copy of the agent module's go.mod, go.sum (and the protocol
	// module its replace names), so that files can be put where the real directory has none.
	fake := func(t *testing.T, gomod string) (script, dest string) {
		root := t.TempDir()
		for _, f := range []struct{ from, to string }{
			{overlayScript, "hack/cli-overlay.sh"},
			{"../../go.sum", "agent/go.sum"},
			{"../../protocol/go.mod", "agent/protocol/go.mod"},
		} {
			b, err := os.ReadFile(f.from)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(root, f.to), string(b))
		}
		writeFile(t, filepath.Join(root, "agent/go.mod"), gomod)
		return filepath.Join(root, "hack/cli-overlay.sh"), filepath.Join(root, "agent/cmd/pulumi")
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}

	script, dest := fake(t, string(gomod))
	writeFile(t, filepath.Join(dest, "pulumi_main.go"), "package main\n")
	out := filepath.Join(t.TempDir(), "overlay.json")
	code, stderr := runOverlay(t, script, out)
	if code != 1 || !strings.Contains(stderr, "pulumi_main.go exists, where the overlay puts the CLI's main.go: rename it") {
		t.Errorf("a pulumi_main.go of our own: exit %d, %q; want 1 and the file named", code, stderr)
	}
	assertNoOverlay(t, out)

	script, _ = fake(t, "module github.com/pulumi-operator/pulumi-operator/agent\n\ngo 1.26\n")
	code, stderr = runOverlay(t, script, out)
	if code == 0 || !strings.Contains(stderr, "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi") {
		t.Errorf("a module without pkg/v3: exit %d, %q; want go list's error naming the package", code, stderr)
	}
	assertNoOverlay(t, out)
}

// assertNoOverlay fails t when out, or its temporary file, exists.
func assertNoOverlay(t *testing.T, out string) {
	t.Helper()
	for _, p := range []string{out, out + ".tmp"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is there after a failure (%v)", p, err)
		}
	}
}

// writeFile writes content to path, making its directory.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
