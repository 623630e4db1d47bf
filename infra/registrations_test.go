package infra

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

var updateRegistrations = flag.Bool("update", false, "rewrite testdata/registrations/*.json with what Declare registers now")

// TestRegistrationsGolden: for specs that reach every branch of Declare (declareCases), the
// engine receives exactly the registrations in testdata/registrations, in a preview and in an
// up: every RegisterResource request (type token, inputs, provider version, aliases,
// dependencies, deleteBeforeReplace, ...) and the stack outputs. Those files were written from
// the program every existing stack was made by, so a change here is a plan change for every
// stack: regenerate them (-update) only with a new ProgramVersion.
func TestRegistrationsGolden(t *testing.T) {
	for name, change := range declareCases {
		t.Run(name, func(t *testing.T) {
			d := declareBase
			change(&d)
			var doc bytes.Buffer
			for _, preview := range []bool{true, false} {
				rpcs, outputs, err := registrations(d, preview, Declare)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&doc, "# preview %v: outputs\n%s\n", preview, canonical(t, outputs))
				for _, token := range slices.Sorted(maps.Keys(rpcs)) {
					b, err := protojson.Marshal(rpcs[token])
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&doc, "# preview %v: %s\n%s\n", preview, token, canonical(t, json.RawMessage(b)))
				}
			}
			file := filepath.Join("testdata", "registrations", strings.NewReplacer(" ", "-", ",", "").Replace(name)+".json")
			if *updateRegistrations {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, doc.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if !bytes.Equal(doc.Bytes(), want) {
				t.Errorf("Declare's registrations for %q differ from %s: every existing stack would plan a change\ngot:\n%s", name, file, doc.String())
			}
		})
	}
}

// canonical is v as indented JSON with sorted keys: protojson's own output varies its
// whitespace on purpose, so it is parsed and written again.
func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
