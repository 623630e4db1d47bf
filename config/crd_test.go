// The generated CRD on a real apiserver: the rules its markers declare reject what they should
// (watcher's TestCRDValidation covers port, replicaCount, serviceType, containerPort and the
// name; TestCRDBounds every bound at and one past its limit), and what the original,
// hand-written CRD admitted is admitted too, spec and status.
package config_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// kindCustomHttp builds a KindCustomHttp named name from YAML for its body below metadata
// (spec, status), indented by two spaces per level.
func kindCustomHttp(t *testing.T, name, body string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	doc := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %q}\n%s\n", api.GroupVersion, api.Kind, name, body)
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("test object %s: %v\n%s", name, err, doc)
	}
	return u
}

func TestCRDAdmission(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	crs := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	ctx := context.Background()

	seventeen := strings.Repeat("\n  - configMapRef: {name: c}", 17)
	rejected := map[string]struct{ spec, want string }{
		"envFrom with both refs": {"envFrom:\n  - {configMapRef: {name: c}, secretRef: {name: s}}",
			"set exactly one of configMapRef and secretRef"},
		"envFrom with neither ref":   {"envFrom:\n  - {prefix: P_}", "set exactly one of configMapRef and secretRef"},
		"envFrom ref without a name": {"envFrom:\n  - configMapRef: {}", "spec.envFrom[0].configMapRef.name"},
		"envFrom over 16":            {"envFrom:" + seventeen, "spec.envFrom"},
		"envFrom prefix too long":    {"envFrom:\n  - {prefix: " + strings.Repeat("P", 254) + ", secretRef: {name: s}}", "spec.envFrom[0].prefix"},
		"image with white space":     {"image: 'example.com/a b:1'", "spec.image"},
	}
	for name, tc := range rejected {
		t.Run(name, func(t *testing.T) {
			u := kindCustomHttp(t, "rejected", "spec:\n  replicaCount: 1\n  port: 80\n  "+strings.ReplaceAll(tc.spec, "\n", "\n  "))
			_, err := crs.Create(ctx, u, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create = %v, want Invalid naming %q", err, tc.want)
			}
		})
	}

	// Admitted, as by the hand-written CRD: no spec at all (the operator stalls it, naming the
	// missing fields), and every optional field set within its bounds.
	admitted := map[string]string{
		"no-spec": "",
		"all-fields": "spec:\n  replicaCount: 0\n  port: 65535\n  containerPort: 1\n  image: example.com/a:1\n" +
			"  serviceType: Headless\n  configMapData: {hostports: 'a,1'}\n  rolloutOnConfigChange: false\n  suspend: true\n" +
			"  envFrom:\n  - {prefix: P_, secretRef: {name: s}}" + strings.Repeat("\n  - configMapRef: {name: c}", 15),
	}
	for name, body := range admitted {
		if _, err := crs.Create(ctx, kindCustomHttp(t, name, body), metav1.CreateOptions{}); err != nil {
			t.Errorf("create %s: %v", name, err)
		}
	}

	// The status the operator writes, with the last update's fields the schema never required
	// left out, is admitted through the status subresource.
	u, err := crs.Get(ctx, "all-fields", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := kindCustomHttp(t, "all-fields", "status:\n  observedGeneration: 1\n  lastUpdate: {result: failed, message: boom}\n"+
		"  conditions:\n  - {type: Ready, status: 'False', reason: UpdateFailed, message: '', lastTransitionTime: '2025-01-02T03:04:05Z'}")
	u.Object["status"] = status.Object["status"]
	got, err := crs.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if r, _, _ := unstructured.NestedString(got.Object, "status", "lastUpdate", "result"); r != "failed" {
		t.Errorf("status after the update: %v", got.Object["status"])
	}
}

// boundKeys returns n configMapData keys of 8 characters, each with value v.
func boundKeys(n int, v string) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprintf("key-%04d", i)] = v
	}
	return m
}

// TestCRDBounds: every bound of the spec admits its limit and rejects one past it with the
// apiserver's message naming the field, the same limits as api/v1's TestValidateBounds, so that
// admission and `pulumi-operator up -f` refuse the same specs.
func TestCRDBounds(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	crs := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	ctx := context.Background()

	mib := api.MaxConfigMapDataBytes
	tests := map[string]struct {
		field              string
		atLimit, pastLimit any
		want               string // in the message past the limit, besides the field's path
	}{
		"replicacount-max": {"replicaCount", int64(5000), int64(5001),
			"should be less than or equal to 5000"},
		"replicacount-min": {"replicaCount", int64(0), int64(-1),
			"should be greater than or equal to 0"},
		"port-max": {"port", int64(65535), int64(65536),
			"should be less than or equal to 65535"},
		"port-min": {"port", int64(1), int64(0),
			"should be greater than or equal to 1"},
		"containerport-max": {"containerPort", int64(65535), int64(65536),
			"should be less than or equal to 65535"},
		"containerport-min": {"containerPort", int64(1), int64(0),
			"should be greater than or equal to 1"},
		"configmapdata-keys": {"configMapData", boundKeys(1024, "v"), boundKeys(1025, "v"),
			"must have at most 1024 items"},
		"configmapdata-size": {"configMapData",
			map[string]any{"big": strings.Repeat("x", mib)}, map[string]any{"big": strings.Repeat("x", mib+1)},
			"the values of configMapData may hold at most 1048576 characters (1 MiB) in all"},
		// The size is the values' sum, keys not counted (a ConfigMap's rule).
		"configmapdata-size-of-all-values": {"configMapData",
			boundKeys(1024, strings.Repeat("x", mib/1024)), boundKeys(1024, strings.Repeat("x", mib/1024+1)),
			"the values of configMapData may hold at most 1048576 characters (1 MiB) in all"},
		"image-length": {"image", strings.Repeat("a", 1024), strings.Repeat("a", 1025),
			"may not be more than 1024"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			object := func(name string, v any) *unstructured.Unstructured {
				spec := map[string]any{"replicaCount": int64(1), "port": int64(80), tc.field: v}
				return &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": api.GroupVersion.String(), "kind": api.Kind,
					"metadata": map[string]any{"name": name}, "spec": spec,
				}}
			}
			// Validate, which `pulumi-operator up -f` runs, agrees with admission.
			resolve := func(u *unstructured.Unstructured) error {
				u = u.DeepCopy()
				u.SetNamespace(ns)
				o, err := api.FromUnstructured(u)
				if err != nil {
					t.Fatal(err)
				}
				_, err = api.Resolve(o)
				return err
			}
			at, past := object(name+"-at", tc.atLimit), object(name+"-past", tc.pastLimit)
			if _, err := crs.Create(ctx, at, metav1.CreateOptions{}); err != nil {
				t.Errorf("at the limit: create = %v, want it admitted", err)
			}
			if err := resolve(at); err != nil {
				t.Errorf("at the limit: Resolve = %v, want it accepted as the apiserver does", err)
			}
			_, err := crs.Create(ctx, past, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec."+tc.field+":") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("past the limit: create = %.600v, want Invalid naming spec.%s with %q", err, tc.field, tc.want)
			}
			if err := resolve(past); err == nil || !strings.Contains(err.Error(), "spec."+tc.field) {
				t.Errorf("past the limit: Resolve = %.600v, want it refused naming spec.%s as the apiserver does", err, tc.field)
			}
		})
	}
}
