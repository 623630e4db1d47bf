package v1

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// FuzzConvertAndValidate feeds arbitrary YAML through the path every object takes (unstructured
// -> FromUnstructured -> Validate/Resolve): it must never panic, and Resolve must either fail
// with an *InvalidSpecError or return a Desired that passes its own invariants. The corpus is
// in testdata/fuzz/FuzzConvertAndValidate; run more with
// `go test -fuzz=FuzzConvertAndValidate ./api/v1/`.
func FuzzConvertAndValidate(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: a, namespace: b}\nspec: {replicaCount: 2, port: 80}\n",
		"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: a, namespace: b}\nspec: {replicaCount: -1, port: 0, containerPort: 99999, serviceType: X, configMapData: {\"../x\": y}}\n",
		"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: a}\nspec: {replicaCount: 1.5, port: \"80\"}\n",
		"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: A.b, namespace: b}\nspec: null\nstatus: {conditions: [1, 2]}\n",
		"apiVersion: v1\nkind: ConfigMap\n",
		"[]",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil || u.Object == nil {
			return
		}
		obj, err := FromUnstructured(u)
		if err != nil {
			return
		}
		_ = Validate(obj)
		d, err := Resolve(obj)
		if err != nil {
			var ise *InvalidSpecError
			if !errors.As(err, &ise) || len(ise.Errors) == 0 {
				t.Fatalf("Resolve error %v is not an InvalidSpecError with problems", err)
			}
			return
		}
		if d.Port < 1 || d.Port > MaxPort || d.ContainerPort < 1 || d.ContainerPort > MaxPort || d.ReplicaCount < 0 ||
			d.ReplicaCount > MaxReplicaCount || len(d.ConfigMapData) > MaxConfigMapDataKeys ||
			d.Image == "" || len([]rune(d.Image)) > MaxImageLength || d.ServiceType == "" || d.Name == "" || d.Namespace == "" {
			t.Fatalf("Resolve accepted an invalid spec: %+v", d)
		}
	})
}
