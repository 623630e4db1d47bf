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
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
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

// rpcMocks answers like mocks and records the whole RegisterResource request of every object,
// by type token: what the engine receives (inputs, provider version, aliases, dependencies,
// deleteBeforeReplace, ...), with the program's source position and stack trace cleared.
type rpcMocks struct {
	mocks
	rpcMu sync.Mutex
	rpcs  map[string]*pulumirpc.RegisterResourceRequest
}

func (m *rpcMocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	req := proto.Clone(args.RegisterRPC).(*pulumirpc.RegisterResourceRequest)
	req.SourcePosition, req.StackTrace, req.ParentStackTraceHandle = nil, nil, ""
	m.rpcMu.Lock()
	m.rpcs[args.TypeToken] = req
	m.rpcMu.Unlock()
	return m.mocks.NewResource(args)
}

// registrations runs declare for d against rpcMocks, as a preview or an up, and returns the
// requests it sent and the stack outputs and Deployment name it declared, resolved.
func registrations(d api.Desired, preview bool,
	declare func(*pulumi.Context, api.Desired) (Declared, error),
) (map[string]*pulumirpc.RegisterResourceRequest, map[string]string, error) {
	m := &rpcMocks{mocks: mocks{resources: map[string]map[string]any{}, names: map[string]string{}},
		rpcs: map[string]*pulumirpc.RegisterResourceRequest{}}
	resolved := make(chan map[string]string, 1)
	opts := []pulumi.RunOption{pulumi.WithMocks("kindcustomhttp", "test", m)}
	if preview {
		opts = append(opts, dryRun)
	}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		decl, err := declare(ctx, d)
		if err != nil {
			return err
		}
		pulumi.All(decl.Deployment, decl.Outputs).ApplyT(func(v []any) error {
			out := maps.Clone(v[1].(map[string]string))
			out["Declared.Deployment"] = v[0].(string)
			resolved <- out
			return nil
		})
		return nil
	}, opts...)
	if err != nil {
		return nil, nil, err
	}
	select {
	case out := <-resolved:
		return m.rpcs, out, nil
	case <-time.After(10 * time.Second):
		return nil, nil, fmt.Errorf("the outputs of %s/%s did not resolve within 10 s", d.Namespace, d.Name)
	}
}
