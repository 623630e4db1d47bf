package infra

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// normalized is v as JSON values (map[string]any, []any, string, float64, bool), without nulls
// and empty objects, lists and strings: what "declares nothing" looks like in either form.
func normalized(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	var prune func(any) any
	prune = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if e = prune(e); e == nil {
					delete(x, k)
				} else {
					x[k] = e
				}
			}
			if len(x) == 0 {
				return nil
			}
		case []any:
			for i := range x {
				x[i] = prune(x[i])
			}
			if len(x) == 0 {
				return nil
			}
		case string:
			if x == "" {
				return nil
			}
		}
		return v
	}
	return prune(out)
}

// checkBuild requires Build(d) to be, field for field, what Declare declared for d (inputs: each
// resource's inputs by type token, from Pulumi's mocks), but for the type's apiVersion and kind,
// which the SDK adds.
func checkBuild(t *testing.T, d api.Desired, inputs map[string]map[string]any) {
	t.Helper()
	b := Build(d)
	for typ, built := range map[string]any{
		"kubernetes:core/v1:ConfigMap":  b.ConfigMap,
		"kubernetes:apps/v1:Deployment": b.Deployment,
		"kubernetes:core/v1:Service":    b.Service,
	} {
		declared := map[string]any{}
		for k, v := range inputs[typ] {
			if k != "apiVersion" && k != "kind" {
				declared[k] = v
			}
		}
		if got, want := normalized(t, built), normalized(t, declared); !reflect.DeepEqual(got, want) {
			gb, _ := json.MarshalIndent(got, "", " ")
			wb, _ := json.MarshalIndent(want, "", " ")
			t.Errorf("Build's %s differs from what Declare declares:\nBuild:   %s\nDeclare: %s", typ, gb, wb)
		}
	}
}

// declareBase and declareCases are Desired states that reach every branch of Declare: each case
// changes declareBase.
var declareBase = api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 2, Port: 8080, ContainerPort: 8080,
	Image: api.DefaultImage, ServiceType: api.ServiceTypeClusterIP, RolloutOnConfigChange: true}

var declareCases = map[string]func(*api.Desired){
	"defaults":     func(*api.Desired) {},
	"owner":        func(d *api.Desired) { d.OwnerUID = "0f1e-uid" },
	"headless":     func(d *api.Desired) { d.ServiceType = api.ServiceTypeHeadless },
	"NodePort":     func(d *api.Desired) { d.ServiceType = api.ServiceTypeNodePort },
	"LoadBalancer": func(d *api.Desired) { d.ServiceType = api.ServiceTypeLoadBalancer },
	"no replicas":  func(d *api.Desired) { d.ReplicaCount = 0 },
	"own image":    func(d *api.Desired) { d.Image, d.ContainerPort, d.Port = "registry.example/app:2", 9090, 80 },
	"data, no roll": func(d *api.Desired) {
		d.ConfigMapData, d.RolloutOnConfigChange = map[string]string{"hostports": "a,1\n", "empty": ""}, false
	},
	"env sources": func(d *api.Desired) {
		d.EnvFrom = []api.EnvRef{{Kind: api.EnvKindSecret, Name: "s", Prefix: "S_"}, {Kind: api.EnvKindConfigMap, Name: "c"}}
		d.EnvDigest = "abc"
	},
}

// TestBuildIsDeclare: for specs that reach every branch of Declare, Build returns exactly the
// objects Declare declares (FuzzProgram checks the same for every spec it makes).
func TestBuildIsDeclare(t *testing.T) {
	for name, change := range declareCases {
		t.Run(name, func(t *testing.T) {
			d := declareBase
			change(&d)
			m := &mocks{resources: map[string]map[string]any{}, names: map[string]string{}}
			if err := pulumi.RunErr(Program(d), pulumi.WithMocks("kindcustomhttp", "test", m)); err != nil {
				t.Fatal(err)
			}
			checkBuild(t, d, m.resources)
		})
	}
}

// BenchmarkBuild: one Build, which the controller pays per drift check.
func BenchmarkBuild(b *testing.B) {
	d := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 3, Port: 8080, ContainerPort: 8080, Image: "img:1",
		ServiceType: api.ServiceTypeClusterIP, ConfigMapData: map[string]string{"k": "v"}, RolloutOnConfigChange: true}
	b.ReportAllocs()
	for b.Loop() {
		_ = Build(d)
	}
}
