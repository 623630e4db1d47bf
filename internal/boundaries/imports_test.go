// Package boundaries holds the tests that enforce the package boundaries the package
// comments state (STYLE.md "Layout shows the flow"). The directories are the layers, lowest
// first (TestNoUpwardImports):
//
//	version                      the release's version; imports no project package
//	api/v1                       the KindCustomHttp API and its defaults
//	internal/...                 leaf libraries (kubeclient, rollout, desired, fence, volume, ...)
//	infra, stack, ownership,     the domain: what the program declares, the stacks that hold
//	watcher                      it, whose objects are whose, the reconciler
//	., commands/..., cmd/...     the composition roots: main and the subcommands
//	test/..., hack/..., config   tests and tools (internal/testenv too), above everything
//
// A package imports only packages of its own layer or below; within a layer, the layers table
// says which (the data path main -> commands -> watcher -> stack -> infra keeps one direction).
// Three rules keep each concern in one place; the engine host's protocol (agent/protocol, a
// module of its own) imports the standard library, gRPC and protobuf only, and only stack imports
// it. A boundary
// written only in a comment decays; these tests read the real import graph (`go list -json`,
// the go command's own answer) of every non-test package, those of the benchmark's module
// (hack/bench/go.mod) included, so a new import that crosses a boundary fails here with the
// rule it breaks.
package boundaries

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the project's module path; packages are named relative to it below.
const module = "github.com/pulumi-operator/pulumi-operator"

// rule says which of the project's packages may import a package whose path starts with
// prefix. Test files are exempt: a test may use any SDK to build its fixtures.
type rule struct {
	prefix  string
	exact   bool     // the package prefix only, not the packages below it
	allowed []string // package paths relative to module
	why     string
}

// tools are packages that measure or test the operator from outside (the benchmark and the soak,
// in the module of benchModuleDir, and the test environment); they may reach into every layer the
// way a user's tool would.
var tools = []string{"hack/bench", "hack/bench/soak", "internal/testenv"}

// benchModuleDir is the directory, relative to this package, of the module of the benchmark and
// the soak (hack/bench/go.mod). Its module path is below the project's, so rel names its packages
// hack/bench and hack/bench/soak.
const benchModuleDir = "../../hack/bench"

var rules = []rule{
	{
		prefix:  "github.com/pulumi/pulumi/sdk/v3/go/auto",
		allowed: []string{"stack"},
		why:     "only stack drives Pulumi through the Automation API",
	},
	{
		prefix:  "github.com/pulumi/pulumi-kubernetes/sdk",
		allowed: []string{"infra"},
		why:     "only infra declares Kubernetes resources, through the SDK's typed constructors",
	},
	{
		prefix: "k8s.io/client-go/kubernetes", exact: true,
		allowed: tools,
		why: "the operator's typed client is internal/kubeclient, with only the API groups it calls; " +
			"client-go's whole clientset would add every API group's client to the operator's binary",
	},
	{
		prefix: "k8s.io/client-go/informers", exact: true,
		allowed: tools,
		why:     "informers.SharedInformerFactory needs the whole clientset (see k8s.io/client-go/kubernetes)",
	},
	{
		prefix:  "k8s.io/client-go/dynamic",
		allowed: append([]string{"watcher", "commands", "commands/program"}, tools...),
		why:     "only the watcher, the commands and the engine-mode program read KindCustomHttp objects from the API",
	},
}

// layers: a project package may import only the project packages listed for it, so the data
// path keeps one direction (nothing below imports what is above it).
var layers = map[string][]string{
	".":                   {"commands", "commands/program", "internal/initproc"}, // main only picks the mode (STYLE.md: main.go stays thin)
	"commands":            {"api/v1", "internal/desired", "infra", "stack", "watcher", "ownership", "internal/rollout", "version", "internal/kubeclient", "internal/fence", "internal/volume"},
	"api/v1":              {"version"},
	"infra":               {"api/v1", "version"},
	"stack":               {"api/v1", "infra", "version", "internal/fence", "agent/protocol", "agent/protocol/diyfile", "agent/protocol/enginepb"},
	"internal/desired":    {"api/v1", "internal/kubeclient"},
	"commands/program":    {"api/v1", "internal/desired", "infra", "stack", "internal/rollout", "internal/kubeclient"},
	"watcher":             {"api/v1", "internal/desired", "infra", "stack", "ownership", "internal/rollout", "version", "internal/kubeclient", "internal/fence", "internal/volume"},
	"internal/rollout":    {"internal/kubeclient"},
	"ownership":           {"api/v1", "infra", "internal/kubeclient"},
	"internal/kubeclient": {},
	"internal/volume":     {},
	"internal/fence":      {"agent/protocol"},
	"internal/httpserver": {"version"},
	"cmd/http-server":     {"internal/httpserver", "version"},
	"version":             {},
}

// level is the layer of a project package (relative path), lowest 0; ok is false for a package
// the table does not place. agent/protocol is a module of its own that imports nothing of the
// project's, so it sits below everything.
func level(path string) (n int, ok bool) {
	under := func(dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }
	switch {
	case under("agent/protocol"):
		return 0, true
	case path == "version":
		return 1, true
	case path == "api/v1":
		return 2, true
	case under("internal"):
		return 3, true
	case path == "infra", path == "stack", path == "ownership", path == "watcher":
		return 4, true
	case path == ".", under("commands"), under("cmd"):
		return 5, true
	case under("test"), under("hack"), path == "config":
		return 6, true // tests and tools, which no product package imports
	}
	return 0, false
}

// TestNoUpwardImports: no package imports one of a higher layer (the package comment's table),
// and every package of the data path has a layer.
func TestNoUpwardImports(t *testing.T) {
	for _, p := range listPackages(t, "", module, 5) {
		from := rel(p.ImportPath)
		if slices.Contains(tools, from) || from == "internal/boundaries" {
			continue
		}
		lf, ok := level(from)
		if !ok {
			t.Errorf("package %s has no layer: place it in level()", from)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := rel(imp)
			if lt, ok := level(to); !ok || lt > lf {
				t.Errorf("%s (layer %d) imports %s (layer %d): an import back up the layers", from, lf, to, lt)
			}
		}
	}
}

// protocolModuleDir is the directory, relative to this package, of the engine host's protocol
// module (agent/protocol/go.mod), which both the operator and the agent module import.
const protocolModuleDir = "../../agent/protocol"

// protocolImports are the modules, besides the standard library, that the protocol module may
// import: gRPC and protobuf, which its generated code (enginepb) needs and which both sides link
// already (the operator serves the program over gRPC, the engine host is the pulumi CLI).
var protocolImports = []string{"google.golang.org/grpc", "google.golang.org/protobuf"}

// TestProtocolImports: the protocol module imports the standard library, gRPC and protobuf only,
// so that importing it brings neither side's dependencies to the other (the agent module pins
// the CLI's, the operator its own).
func TestProtocolImports(t *testing.T) {
	for _, p := range listPackages(t, protocolModuleDir, module+"/agent/protocol", 1) {
		for _, imp := range p.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if !strings.Contains(first, ".") || strings.HasPrefix(imp, module+"/agent/protocol") {
				continue
			}
			if !slices.ContainsFunc(protocolImports, func(m string) bool { return imp == m || strings.HasPrefix(imp, m+"/") }) {
				t.Errorf("%s imports %s: the protocol may import the standard library, %s only", rel(p.ImportPath), imp, strings.Join(protocolImports, ", "))
			}
		}
	}
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// listPackages returns every non-test package of the module in dir ("" for the project's)
// whose path starts with path, with its direct imports: at least atLeast of them, or the test
// fails.
func listPackages(t *testing.T, dir, path string, atLeast int) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", path+"/...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < atLeast {
		t.Fatalf("go list in %q found %d packages; expected the whole module", dir, len(pkgs))
	}
	return pkgs
}

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

func TestImportRules(t *testing.T) {
	pkgs := append(listPackages(t, "", module, 5), listPackages(t, benchModuleDir, module+"/hack/bench", 2)...)
	for _, p := range pkgs {
		from := rel(p.ImportPath)
		for _, imp := range p.Imports {
			for _, r := range rules {
				match := strings.HasPrefix(imp, r.prefix)
				if r.exact {
					match = imp == r.prefix
				}
				if match && !slices.Contains(r.allowed, from) {
					t.Errorf("%s imports %s: %s (allowed: %s)", from, imp, r.why, strings.Join(r.allowed, ", "))
				}
			}
		}
	}
}

func TestLayers(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range listPackages(t, "", module, 5) {
		from := rel(p.ImportPath)
		allowed, ok := layers[from]
		if !ok {
			continue // tools and test-only packages sit outside the data path
		}
		seen[from] = true
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if to := rel(imp); !slices.Contains(allowed, to) {
				t.Errorf("%s imports %s; its layer may import only %v", from, to, allowed)
			}
		}
	}
	for from := range layers {
		if !seen[from] {
			t.Errorf("package %s named in layers does not exist: update the table", from)
		}
	}
}
