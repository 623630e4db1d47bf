// Tests of the generated manifests: the CRD (config/crd, and the chart's crds/ that copies it)
// and the ClusterRoles (config/rbac) are exactly what controller-gen generates from the markers
// (`make manifests`); the chart's templates grant the same rules; every field of the CRD has a
// description for `kubectl explain`; and the schema keeps the contract of the original operator
// that users' manifests rely on. None of these needs a cluster.
package config_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// controllerGen returns the pinned controller-gen built by `make controller-gen` (also part of
// `make tools` and `make test`): bin/controller-gen.
func controllerGen(t *testing.T) string {
	t.Helper()
	p := root("bin", "controller-gen")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "no controller-gen at "+p+": run `make controller-gen`")
	}
	return p
}

// generator is one controller-gen run of the Makefile's manifests target: its arguments but
// the output directory, the output rule ("crd", "rbac" or "object"), the committed directory
// it writes into, and every file it writes there.
type generator struct {
	args  []string
	rule  string
	dir   string
	files []string
}

// generators are the runs of `make manifests`, in the Makefile's words (makeLine).
var generators = []generator{
	{[]string{"crd:headerFile=config/crd/header.txt", "paths=./api/v1"}, "crd", "config/crd", []string{crdFile}},
	{[]string{"rbac:roleName=pulumi-operator-manager,headerFile=config/rbac/header.txt", "paths=./watcher"},
		"rbac", "config/rbac", []string{"role.yaml"}},
	{[]string{"rbac:roleName=pulumi-operator-cluster-name,fileName=cluster_name_role.yaml,headerFile=config/rbac/header.txt", "paths=./commands"},
		"rbac", "config/rbac", []string{"cluster_name_role.yaml"}},
	{[]string{"object", "paths=./api/v1"}, "object", "api/v1", []string{"zz_generated.deepcopy.go"}},
}

// output is the output rule that writes into dir: the artifacts directory of the manifests,
// the directory itself for Go code (object's only rule that is not the package directory).
func (g generator) output(dir string) string {
	if g.rule == "object" {
		return "output:object:dir=" + dir
	}
	return "output:" + g.rule + ":artifacts:config=" + dir
}

// makeLine is the recipe line of the Makefile's manifests target that makes this run.
func (g generator) makeLine() string {
	return "$(BIN)/controller-gen " + strings.Join(g.args, " ") + " " + g.output(g.dir)
}

// firstDifference describes the first line where got and want differ, 1-based.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("line %d: committed %q, generated %q", i+1, gl, wl)
		}
	}
	return "identical"
}

// TestManifestsAreGenerated runs controller-gen as `make manifests` does, into a temporary
// directory, and fails when a committed file is not what it generates: the CRD, its copy in the
// chart, and the ClusterRoles. Nobody edits them by hand; the markers are the source.
func TestManifestsAreGenerated(t *testing.T) {
	bin := controllerGen(t)
	makefile := readFile(t, "Makefile")
	generated := map[string][]byte{} // by path in the repository
	for _, g := range generators {
		if !strings.Contains(makefile, g.makeLine()) {
			t.Errorf("the Makefile's manifests target does not run\n\t%s\nkeep it and this test's generators in step", g.makeLine())
		}
		out := t.TempDir()
		if stdout, err := run(t, nil, bin, append(g.args, g.output(out))...); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		entries, err := os.ReadDir(out)
		if err != nil {
			t.Fatal(err)
		}
		var wrote []string
		for _, e := range entries {
			wrote = append(wrote, e.Name())
			b, err := os.ReadFile(filepath.Join(out, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			generated[filepath.Join(g.dir, e.Name())] = b
		}
		if !slices.Equal(wrote, g.files) {
			t.Errorf("controller-gen %s wrote %v into %s, this test knows %v: commit the new files (make manifests), "+
				"list them in the kustomization and here", strings.Join(g.args, " "), wrote, g.dir, g.files)
		}
	}
	// The chart's crds/ holds a copy of config/crd's file, not a symbolic link (helm warns about
	// one at install, and a chart must be whole without the repository).
	generated[filepath.Join(chartDir, "crds", crdFile)] = generated[filepath.Join("config", "crd", crdFile)]
	if fi, err := os.Lstat(root(filepath.Join(chartDir, "crds", crdFile))); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("%s is a symbolic link: run `make manifests`, which copies the CRD there", filepath.Join(chartDir, "crds", crdFile))
	}

	paths := make([]string, 0, len(generated))
	for p := range generated {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		committed, err := os.ReadFile(root(p))
		if err != nil {
			t.Errorf("%v: run `make manifests`", err)
			continue
		}
		if !bytes.Equal(committed, generated[p]) {
			t.Errorf("%s is not what controller-gen generates from the markers (%s): run `make manifests`",
				p, firstDifference(committed, generated[p]))
		}
	}
}

// jsonSchema is the part of an OpenAPI v3 schema these tests read. Written here because the
// complete type, k8s.io/apiextensions-apiserver's JSONSchemaProps, is no dependency of this
// module and would become one for these few fields.
type jsonSchema struct {
	Description  string                `json:"description"`
	Properties   map[string]jsonSchema `json:"properties"`
	Items        *jsonSchema           `json:"items"`
	Required     []string              `json:"required"`
	XValidations []struct {
		Rule string `json:"rule"`
	} `json:"x-kubernetes-validations"`
}

// crdDoc is the part of a CustomResourceDefinition these tests read (see jsonSchema).
type crdDoc struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind       string   `json:"kind"`
			ListKind   string   `json:"listKind"`
			Plural     string   `json:"plural"`
			Singular   string   `json:"singular"`
			ShortNames []string `json:"shortNames"`
		} `json:"names"`
		Versions []struct {
			Name         string `json:"name"`
			Served       bool   `json:"served"`
			Storage      bool   `json:"storage"`
			Subresources *struct {
				Status *struct{} `json:"status"`
			} `json:"subresources"`
			Schema *struct {
				OpenAPIV3Schema *jsonSchema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// readCRD reads the committed CRD.
func readCRD(t *testing.T) *crdDoc {
	t.Helper()
	crd := &crdDoc{}
	readYAML(t, root("config", "crd", crdFile), crd)
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil || crd.Spec.Versions[0].Schema.OpenAPIV3Schema == nil {
		t.Fatalf("config/crd/%s: want one version with a schema, got %+v", crdFile, crd.Spec.Versions)
	}
	return crd
}

// undocumented returns the path of every property under s (named path) that has no
// description, which `kubectl explain` would show without a word.
func undocumented(path string, s jsonSchema) []string {
	var out []string
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := s.Properties[n]
		// controller-gen never describes metadata: the apiserver publishes ObjectMeta's own
		// schema, documented, in its place.
		if p.Description == "" && !(path == "" && n == "metadata") {
			out = append(out, path+"."+n)
		}
		out = append(out, undocumented(path+"."+n, p)...)
	}
	if s.Items != nil {
		out = append(out, undocumented(path+"[]", *s.Items)...)
	}
	return out
}

// TestCRDDocumentsEveryField: every field, status included, has a description (from its Go
// doc comment), so `kubectl explain kindcustomhttp --recursive` documents them all.
func TestCRDDocumentsEveryField(t *testing.T) {
	s := *readCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema
	if s.Description == "" {
		t.Error("the kind has no description")
	}
	if missing := undocumented("", s); len(missing) > 0 {
		t.Errorf("fields without a description (add a doc comment in api/v1/types.go, then make manifests):\n\t%s",
			strings.Join(missing, "\n\t"))
	}
	// The walk above must have seen the fields users read most.
	for _, p := range []string{"spec", "status"} {
		if s.Properties[p].Description == "" || len(s.Properties[p].Properties) == 0 {
			t.Errorf("%s: no description or no fields: %+v", p, s.Properties[p])
		}
	}
}

// TestCRDKeepsTheOriginalContract pins what users' manifests and stored objects rely on, which
// regenerating from changed markers could otherwise change silently: the names of the API, the
// spec's fields and which of them are required (only replicaCount and port, as in the original
// operator; spec itself never was), the status subresource and the CEL rules.
func TestCRDKeepsTheOriginalContract(t *testing.T) {
	crd := readCRD(t)
	names := crd.Spec.Names
	if crd.Metadata.Name != "kindcustomhttps.groupsp.measutosh.dev" || crd.Spec.Group != "groupsp.measutosh.dev" ||
		names.Kind != "KindCustomHttp" || names.ListKind != "KindCustomHttpList" || names.Plural != "kindcustomhttps" ||
		names.Singular != "kindcustomhttp" || !slices.Equal(names.ShortNames, []string{"kch"}) || crd.Spec.Scope != "Namespaced" {
		t.Errorf("the API's names changed: %s %s %+v %s", crd.Metadata.Name, crd.Spec.Group, names, crd.Spec.Scope)
	}
	v := crd.Spec.Versions[0]
	if v.Name != "v1" || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("version %s served=%v storage=%v subresources=%+v, want v1 served and stored with a status subresource",
			v.Name, v.Served, v.Storage, v.Subresources)
	}
	root := v.Schema.OpenAPIV3Schema
	if len(root.Required) != 0 {
		t.Errorf("the object requires %v; it never required anything (not even spec)", root.Required)
	}
	spec := root.Properties["spec"]
	var fields []string
	for n := range spec.Properties {
		fields = append(fields, n)
	}
	slices.Sort(fields)
	want := []string{"configMapData", "containerPort", "envFrom", "image", "port", "replicaCount", "rolloutOnConfigChange", "serviceType", "suspend"}
	if !slices.Equal(fields, want) {
		t.Errorf("spec fields %v, want %v: a field renamed or removed breaks users' manifests", fields, want)
	}
	required := slices.Sorted(slices.Values(spec.Required))
	if !slices.Equal(required, []string{"port", "replicaCount"}) {
		t.Errorf("spec requires %v, want [port replicaCount]: requiring more rejects manifests that worked, "+
			"requiring less admits objects the operator cannot reconcile", required)
	}
	rules := func(s jsonSchema) []string {
		var out []string
		for _, r := range s.XValidations {
			out = append(out, r.Rule)
		}
		return out
	}
	if got := rules(*root); len(got) != 1 || !strings.Contains(got[0], "self.metadata.name") {
		t.Errorf("the object's CEL rules are %q, want the one on metadata.name", got)
	}
	envFrom := spec.Properties["envFrom"]
	if envFrom.Items == nil || !slices.Equal(rules(*envFrom.Items), []string{"has(self.configMapRef) != has(self.secretRef)"}) {
		t.Errorf("spec.envFrom items lost their CEL rule: %+v", envFrom.Items)
	}
	if got := rules(spec.Properties["configMapData"]); len(got) != 1 || !strings.HasSuffix(got[0], "<= 1048576") {
		t.Errorf("spec.configMapData's CEL rules are %q, want the one bounding its values to 1 MiB", got)
	}
}

// grants lists what RBAC rules allow, one "verb group/resource[/name]" or "verb url" per
// permission, sorted: two rule lists grant the same when their lists are equal, however the
// rules are split, merged or ordered (controller-gen merges and sorts them).
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				out = append(out, v+" "+u)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					if len(r.ResourceNames) == 0 {
						out = append(out, v+" "+g+"/"+res)
					}
					for _, n := range r.ResourceNames {
						out = append(out, v+" "+g+"/"+res+"/"+n)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// without returns the elements of a that b lacks.
func without(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(x string) bool { return slices.Contains(b, x) })
}

var (
	templateComment = regexp.MustCompile(`(?s)\{\{-?\s*/\*.*?\*/\s*-?\}\}`)
	templateAction  = regexp.MustCompile(`\{\{[^}]*\}\}`)
	documentStart   = regexp.MustCompile(`(?m)^---\s*$`)
	clusterRoleKind = regexp.MustCompile(`(?m)^kind: ClusterRole\s*$`)
)

// templateClusterRoles reads the ClusterRoles of the chart's templates/rbac.yaml without helm,
// by the part of their names after the release's: "-manager", "-cluster-name". Their rules are
// plain YAML with no template action inside, so dropping the lines that hold only an action and
// putting a placeholder for the actions left within lines gives each document as helm renders
// it, but for its name and labels. bin/helm renders the whole chart in TestChartMatchesKustomize
// (which SKIPs where helm is not built); this check needs nothing.
func templateClusterRoles(t *testing.T) map[string]rbacv1.ClusterRole {
	t.Helper()
	src := templateComment.ReplaceAllString(readFile(t, chartDir, "templates", "rbac.yaml"), "")
	out := map[string]rbacv1.ClusterRole{}
	for _, doc := range documentStart.Split(src, -1) {
		if !clusterRoleKind.MatchString(doc) {
			continue
		}
		if _, rules, _ := strings.Cut(doc, "\nrules:"); templateAction.MatchString(rules) {
			t.Fatalf("%s/templates/rbac.yaml: a ClusterRole's rules hold a template action; "+
				"this check reads them as plain YAML and needs rewriting:\n%s", chartDir, doc)
		}
		var lines []string
		for _, l := range strings.Split(doc, "\n") {
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "{{") && strings.HasSuffix(s, "}}") {
				continue
			}
			lines = append(lines, templateAction.ReplaceAllString(l, "RELEASE"))
		}
		var cr rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(strings.Join(lines, "\n")), &cr); err != nil {
			t.Fatalf("%s/templates/rbac.yaml: a ClusterRole that is no longer plain YAML but for names: %v\n%s", chartDir, err, doc)
		}
		out[strings.TrimPrefix(cr.Name, "RELEASE")] = cr
	}
	return out
}

// TestChartGrantsTheGeneratedRBAC: the chart's ClusterRoles grant exactly what the generated
// ones in config/rbac grant (TestManifestsAreGenerated ties those to the markers).
func TestChartGrantsTheGeneratedRBAC(t *testing.T) {
	chart := templateClusterRoles(t)
	// secret_reader_role.yaml is written by hand (it holds one rule and says how to bind it).
	generated := map[string]string{"-manager": "role.yaml", "-cluster-name": "cluster_name_role.yaml",
		"-secret-reader": "secret_reader_role.yaml"}
	for suffix, file := range generated {
		var want rbacv1.ClusterRole
		readYAML(t, root("config", "rbac", file), &want)
		if want.Name != "pulumi-operator"+suffix || len(want.Rules) == 0 {
			t.Errorf("config/rbac/%s: ClusterRole %q with %d rules, want pulumi-operator%s with rules", file, want.Name, len(want.Rules), suffix)
		}
		got, ok := chart[suffix]
		if !ok {
			t.Errorf("%s/templates/rbac.yaml has no ClusterRole <release>%s (config/rbac/%s)", chartDir, suffix, file)
			continue
		}
		if g, w := grants(got.Rules), grants(want.Rules); !slices.Equal(g, w) {
			t.Errorf("%s/templates/rbac.yaml ClusterRole <release>%s and config/rbac/%s (generated from the markers) differ; "+
				"copy the generated rules into the template.\nonly the chart grants: %v\nonly config/rbac grants: %v",
				chartDir, suffix, file, without(g, w), without(w, g))
		}
	}
	for suffix := range chart {
		if _, ok := generated[suffix]; !ok {
			t.Errorf("%s/templates/rbac.yaml has ClusterRole <release>%s, which config/rbac does not generate", chartDir, suffix)
		}
	}
}
