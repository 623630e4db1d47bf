package infra

import (
	"maps"
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/proto"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// TestDeclareAdopting: each object Adopt names is registered with the import ID the Kubernetes
// provider reads ("<namespace>/<name>") and ignoreChanges ["*"]; the objects it does not name,
// and every object under the zero Adopt, are registered exactly as Declare registers them
// (TestRegistrationsGolden pins those).
func TestDeclareAdopting(t *testing.T) {
	d := declareBase
	plain, _, err := registrations(d, false, Declare)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{
		"kubernetes:core/v1:ConfigMap":  d.Namespace + "/" + d.ConfigMapName(),
		"kubernetes:apps/v1:Deployment": d.Namespace + "/" + d.Name,
		"kubernetes:core/v1:Service":    d.Namespace + "/" + d.Name,
	}
	for name, a := range map[string]Adopt{
		"none":       {},
		"deployment": {Deployment: true},
		"all":        {ConfigMap: true, Deployment: true, Service: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, _, err := registrations(d, false, func(ctx *pulumi.Context, d api.Desired) (Declared, error) {
				return DeclareAdopting(ctx, d, a)
			})
			if err != nil {
				t.Fatal(err)
			}
			named := map[string]bool{"kubernetes:core/v1:ConfigMap": a.ConfigMap,
				"kubernetes:apps/v1:Deployment": a.Deployment, "kubernetes:core/v1:Service": a.Service}
			for token, req := range got {
				want := proto.Clone(plain[token]).(*pulumirpc.RegisterResourceRequest)
				if named[token] {
					want.ImportId = ids[token]
					want.IgnoreChanges = []string{"*"}
				}
				if !proto.Equal(req, want) {
					t.Errorf("%s: import id %q ignoreChanges %q, want %q %q (and otherwise as Declare)",
						token, req.GetImportId(), req.GetIgnoreChanges(), want.GetImportId(), want.GetIgnoreChanges())
				}
			}
			if len(got) != 3 || !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(plain))) {
				t.Fatalf("registered %d resources, want Declare's 3", len(got))
			}
		})
	}
}
