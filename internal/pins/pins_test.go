// Package pins holds the test that the project's version pins agree. Each version is pinned in
// one place: the Go toolchain in go.mod's toolchain line (the Makefile, .ci/run and hack/lib
// export it as GOTOOLCHAIN), the pulumi CLI and engine host in agent/go.mod's pkg/v3 (the
// Makefile and the Dockerfile read it from there), the Kubernetes provider in go.mod's
// pulumi-kubernetes SDK, the Go language host in the Makefile's PULUMI_GO_LANGUAGE_VERSION. What
// must repeat a version (the other modules' go.mod files, the Dockerfile's build arguments, Go
// constants, README) is checked here against the pin, and so are the built binaries: bin/pulumi
// and bin/pulumi-operator must have been built by the pinned toolchain from the pinned modules.
// A version that moves in one place only fails here, naming both.
package pins

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// goMod is what `go mod edit -json` says of a go.mod file: the go command's own reading.
type goMod struct {
	Module struct{ Path string }
	Go     string
	// Toolchain is the toolchain line's name (go1.26.11), "" without one.
	Toolchain string
	Require   []struct{ Path, Version string }
}

// readGoMod reads the go.mod file at path (relative to the repository's top directory).
func readGoMod(t *testing.T, path string) goMod {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json", filepath.Join(testenv.RepoRoot(), path))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v\n%s", path, err, stderr.String())
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go mod edit -json %s: %v", path, err)
	}
	return m
}

// require returns the version of module in m's require lines, "" when it has none.
func (m goMod) require(module string) string {
	for _, r := range m.Require {
		if r.Path == module {
			return r.Version
		}
	}
	return ""
}

// toolchain returns m's toolchain line, "" without one.
func (m goMod) toolchain() string { return m.Toolchain }

// readFile returns the file at path (relative to the repository's top directory).
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// match returns the first submatch of re in s, "" when re does not match.
func match(re, s string) string {
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[1]
}

// The modules of the repository that ship or test the operator; each builds with the pinned
// toolchain and says so in its own toolchain line, so that `go build` in its directory with
// GOTOOLCHAIN=auto picks the same Go as the Makefile.
var modules = []string{"go.mod", "agent/go.mod", "agent/protocol/go.mod", "hack/bench/go.mod"}

const (
	pulumiPkg = "github.com/pulumi/pulumi/pkg/v3"
	pulumiSDK = "github.com/pulumi/pulumi/sdk/v3"
	k8sSDK    = "github.com/pulumi/pulumi-kubernetes/sdk/v4"
)

// TestPinsAgree checks every copy of a pinned version against its pin.
func TestPinsAgree(t *testing.T) {
	root := readGoMod(t, "go.mod")
	agent := readGoMod(t, "agent/go.mod")
	bench := readGoMod(t, "hack/bench/go.mod")
	toolchain := root.toolchain()
	if !regexp.MustCompile(`^go1\.\d+\.\d+$`).MatchString(toolchain) {
		t.Fatalf("go.mod's toolchain line is %q, want a release such as go1.26.11: it pins the Go every target builds with", toolchain)
	}
	cli := agent.require(pulumiPkg)
	if cli == "" {
		t.Fatalf("agent/go.mod requires no %s: it pins the pulumi CLI", pulumiPkg)
	}
	dockerfile := readFile(t, "Dockerfile")
	makefile := readFile(t, "Makefile")
	readme := readFile(t, "README.md")
	goLanguage := match(`(?m)^PULUMI_GO_LANGUAGE_VERSION := (\S+)$`, makefile)

	checks := []struct{ what, got, want string }{
		{"Dockerfile ARG GO_VERSION vs go.mod toolchain", match(`(?m)^ARG GO_VERSION=(\S+)$`, dockerfile), strings.TrimPrefix(toolchain, "go")},
		{"README.md names the toolchain", match("`("+regexp.QuoteMeta(toolchain)+")`", readme), toolchain},
		{"agent/go.mod " + pulumiSDK + " vs its " + pulumiPkg, agent.require(pulumiSDK), cli},
		{"go.mod " + pulumiSDK + " vs agent/go.mod " + pulumiPkg, root.require(pulumiSDK), cli},
		{"hack/bench/go.mod " + pulumiSDK + " vs agent/go.mod " + pulumiPkg, bench.require(pulumiSDK), cli},
		{"stack.PinnedCLIVersion vs agent/go.mod " + pulumiPkg, "v" + stack.PinnedCLIVersion, cli},
		{"Dockerfile ARG KUBERNETES_PLUGIN_VERSION vs go.mod " + k8sSDK, match(`(?m)^ARG KUBERNETES_PLUGIN_VERSION=(\S+)$`, dockerfile), root.require(k8sSDK)},
		{"infra.ProviderVersion vs go.mod " + k8sSDK, "v" + infra.ProviderVersion, root.require(k8sSDK)},
		{"README.md's language host archive vs the Makefile's PULUMI_GO_LANGUAGE_VERSION", match(`pulumi-language-go-(v[0-9.]+)-linux-amd64\.tar\.gz`, readme), goLanguage},
	}
	for _, path := range modules[1:] {
		checks = append(checks, struct{ what, got, want string }{path + " toolchain vs go.mod's", readGoMod(t, path).toolchain(), toolchain})
	}
	for _, c := range checks {
		if c.got != c.want || c.want == "" {
			t.Errorf("%s: %q, want %q", c.what, c.got, c.want)
		}
	}
	if goLanguage == "" {
		t.Errorf("the Makefile has no PULUMI_GO_LANGUAGE_VERSION := vX.Y.Z line")
	}
	// Each module, tools modules included, must build with the pinned toolchain, which the
	// go command refuses for a module whose go line is newer.
	tools, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "hack", "tools", "*", "go.mod"))
	if err != nil || len(tools) == 0 {
		t.Fatalf("no tools modules under hack/tools: %v", err)
	}
	all := slices.Clone(modules)
	for _, path := range tools {
		rel, _ := filepath.Rel(testenv.RepoRoot(), path)
		all = append(all, rel)
	}
	for _, path := range all {
		if g := readGoMod(t, path).Go; version.Compare("go"+g, toolchain) > 0 {
			t.Errorf("%s: go %s is newer than the pinned toolchain %s, which cannot build it", path, g, toolchain)
		}
	}
	// The Makefile reads the CLI's version from agent/go.mod and exports the toolchain from
	// go.mod, rather than repeating them.
	for _, want := range []string{
		`GO_TOOLCHAIN := $(shell awk '$$1 == "toolchain" {print $$2}' go.mod)`,
		`export GOTOOLCHAIN := $(GO_TOOLCHAIN)`,
		`PULUMI_VERSION := $(shell awk '$$1 == "` + pulumiPkg + `" {print $$2}' agent/go.mod)`,
	} {
		if !strings.Contains(makefile, want) {
			t.Errorf("the Makefile lacks the line %s", want)
		}
	}
}

// TestBinariesBuiltFromPins reads the build information of the binaries `make build` wrote:
// the pinned CLI (bin/pulumi, $PULUMI_OPERATOR_PULUMI) and the operator beside it. Each must come
// from the pinned toolchain and Pulumi modules, and the CLI must report the pinned version (the
// Automation API reads it).
func TestBinariesBuiltFromPins(t *testing.T) {
	root := readGoMod(t, "go.mod")
	agent := readGoMod(t, "agent/go.mod")
	toolchain := root.toolchain()
	cli := testenv.PulumiCLI(t)
	operator := filepath.Join(filepath.Dir(cli), "pulumi-operator")
	for _, c := range []struct {
		path, module, version string
	}{
		{cli, pulumiPkg, agent.require(pulumiPkg)},
		{operator, pulumiSDK, root.require(pulumiSDK)},
	} {
		info, err := buildinfo.ReadFile(c.path)
		if err != nil {
			testenv.Missing(t, "no build information in "+c.path+" ("+err.Error()+"): run `make build`")
		}
		if info.GoVersion != toolchain {
			t.Errorf("%s: built by %s, want the pinned %s (`make build` exports GOTOOLCHAIN)", c.path, info.GoVersion, toolchain)
		}
		got := ""
		for _, d := range info.Deps {
			if d.Path == c.module {
				got = d.Version
			}
		}
		if got != c.version {
			t.Errorf("%s: built with %s %s, want %s: run `make build`", c.path, c.module, got, c.version)
		}
	}
	out, err := exec.Command(cli, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", cli, err)
	}
	if got := strings.TrimSpace(string(out)); got != agent.require(pulumiPkg) {
		t.Errorf("%s version = %q, want %q (the Makefile's -X of PULUMI_VERSION)", cli, got, agent.require(pulumiPkg))
	}
}
