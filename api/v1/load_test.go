package v1

import (
	"path/filepath"
	"strings"
	"testing"
)

func td(name string) string { return filepath.Join("testdata", "load", name) }

func TestLoadDocuments(t *testing.T) {
	docs, err := LoadDocuments([]string{td("two.yaml")}, LoadOptions{Namespace: "fallback"})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2 (the trailing empty one skipped)", len(docs))
	}
	if d := docs[0]; d.Desired.Namespace != "team-a" || d.Desired.Name != "web" || d.Index != 1 || d.Line != 1 {
		t.Errorf("first = %+v at %s", d.Desired, d.Where())
	}
	if d := docs[1]; d.Desired.Namespace != "fallback" || d.Desired.ConfigMapData["hostports"] != "web,80" || d.Index != 2 || d.Line != 7 {
		t.Errorf("second = %+v at %s", d.Desired, d.Where())
	}
}

func TestLoadDocumentsRejects(t *testing.T) {
	tests := map[string]struct {
		paths []string
		opts  LoadOptions
		want  []string
	}{
		"YAML that does not parse": {[]string{td("bad-yaml.yaml")}, LoadOptions{},
			[]string{"bad-yaml.yaml: document 2 (line 6)", "YAML does not parse", "line 9:"}},
		"another kind and group": {[]string{td("other-kind.yaml")}, LoadOptions{},
			[]string{"other-kind.yaml: document 1 (line 1)", `kind "Namespace"`, "other-kind.yaml: document 2 (line 5)", `"groupsp.example.com/v1"`}},
		"missing required field": {[]string{td("missing-field.yaml")}, LoadOptions{},
			[]string{"missing-field.yaml: document 1 (line 1)", "spec.port: Required"}},
		"value out of range": {[]string{td("out-of-range.yaml")}, LoadOptions{},
			[]string{"out-of-range.yaml: document 1", "spec.port", "between 1 and 65535"}},
		"same object twice": {[]string{td("two.yaml"), td("duplicate.yaml")}, LoadOptions{},
			[]string{"duplicate.yaml: document 1 (line 1): KindCustomHttp team-a/web is also defined at", "two.yaml: document 1"}},
		"missing file":     {[]string{td("nope.yaml")}, LoadOptions{}, []string{"nope.yaml", "no such file"}},
		"no files":         {nil, LoadOptions{}, []string{"pass -f"}},
		"only other kinds": {[]string{td("other-kind.yaml")}, LoadOptions{IgnoreOtherKinds: true}, []string{"no KindCustomHttp found"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			docs, err := LoadDocuments(tc.paths, tc.opts)
			if err == nil {
				t.Fatalf("loaded %d documents, want an error", len(docs))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A directory is read file by file in name order; with IgnoreOtherKinds a mixed manifest
// directory (the samples: a Namespace and a KindCustomHttp) loads.
func TestLoadDirectory(t *testing.T) {
	docs, err := LoadDocuments([]string{"../../config/samples"}, LoadOptions{IgnoreOtherKinds: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || docs[0].Desired.Name != "kindcustomhttp-sample" || docs[0].Desired.Namespace != "peerns" {
		t.Fatalf("docs = %+v", docs)
	}
	// The error lists every problem at once.
	_, err = LoadDocuments([]string{td("missing-field.yaml"), td("out-of-range.yaml")}, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "missing-field.yaml") || !strings.Contains(err.Error(), "out-of-range.yaml") {
		t.Fatalf("error = %v, want both files named", err)
	}
}
