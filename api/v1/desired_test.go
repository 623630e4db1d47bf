package v1

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func i32(v int32) *int32 { return &v }

func valid() *KindCustomHttp {
	o := &KindCustomHttp{Spec: KindCustomHttpSpec{ReplicaCount: i32(2), Port: i32(80)}}
	o.Name, o.Namespace = "web", "team-a"
	return o
}

func TestResolveDefaults(t *testing.T) {
	tests := map[string]struct {
		mutate func(*KindCustomHttp)
		want   Desired
	}{
		"required fields only": {
			mutate: func(*KindCustomHttp) {},
			want: Desired{Namespace: "team-a", Name: "web", ReplicaCount: 2, Port: 80,
				ContainerPort: 8080, Image: DefaultImage, ServiceType: ServiceTypeClusterIP},
		},
		"every optional field set": {
			mutate: func(o *KindCustomHttp) {
				o.Spec.Image = "example.com/srv:v2"
				o.Spec.ContainerPort = i32(9000)
				o.Spec.ServiceType = ServiceTypeHeadless
				o.Spec.ConfigMapData = map[string]string{"hostports": "a,1\n"}
				o.Spec.ReplicaCount = i32(0)
			},
			want: Desired{Namespace: "team-a", Name: "web", ReplicaCount: 0, Port: 80, ContainerPort: 9000,
				Image: "example.com/srv:v2", ServiceType: ServiceTypeHeadless,
				ConfigMapData: map[string]string{"hostports": "a,1\n"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.mutate(o)
			got, err := Resolve(o)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got.Namespace != tc.want.Namespace || got.Name != tc.want.Name || got.ReplicaCount != tc.want.ReplicaCount ||
				got.Port != tc.want.Port || got.ContainerPort != tc.want.ContainerPort || got.Image != tc.want.Image ||
				got.ServiceType != tc.want.ServiceType || len(got.ConfigMapData) != len(tc.want.ConfigMapData) {
				t.Fatalf("Resolve = %+v, want %+v", got, tc.want)
			}
			for k, v := range tc.want.ConfigMapData {
				if got.ConfigMapData[k] != v {
					t.Errorf("ConfigMapData[%q] = %q, want %q", k, got.ConfigMapData[k], v)
				}
			}
			if got.ConfigMapName() != "web-configmap" {
				t.Errorf("ConfigMapName = %q", got.ConfigMapName())
			}
		})
	}
}

func TestResolveCopiesConfigMapData(t *testing.T) {
	o := valid()
	o.Spec.ConfigMapData = map[string]string{"a": "1"}
	d, err := Resolve(o)
	if err != nil {
		t.Fatal(err)
	}
	o.Spec.ConfigMapData["a"] = "changed"
	if d.ConfigMapData["a"] != "1" {
		t.Fatal("Desired shares the spec's map; a later change of the object would change what was resolved")
	}
}

func TestValidateRejects(t *testing.T) {
	tests := map[string]struct {
		mutate  func(*KindCustomHttp)
		field   string
		message string
	}{
		"missing replicaCount":     {func(o *KindCustomHttp) { o.Spec.ReplicaCount = nil }, "spec.replicaCount", "Required"},
		"negative replicaCount":    {func(o *KindCustomHttp) { o.Spec.ReplicaCount = i32(-1) }, "spec.replicaCount", "between 0 and 5000"},
		"missing port":             {func(o *KindCustomHttp) { o.Spec.Port = nil }, "spec.port", "Required"},
		"port zero":                {func(o *KindCustomHttp) { o.Spec.Port = i32(0) }, "spec.port", "between 1 and 65535"},
		"port too high":            {func(o *KindCustomHttp) { o.Spec.Port = i32(70000) }, "spec.port", "between 1 and 65535"},
		"containerPort too high":   {func(o *KindCustomHttp) { o.Spec.ContainerPort = i32(65536) }, "spec.containerPort", "between 1 and 65535"},
		"unknown serviceType":      {func(o *KindCustomHttp) { o.Spec.ServiceType = "External" }, "spec.serviceType", "supported values"},
		"image with space":         {func(o *KindCustomHttp) { o.Spec.Image = "nginx latest" }, "spec.image", "white space"},
		"configMapData key slash":  {func(o *KindCustomHttp) { o.Spec.ConfigMapData = map[string]string{"a/b": "x"} }, "spec.configMapData[a/b]", "file name"},
		"configMapData key dotdot": {func(o *KindCustomHttp) { o.Spec.ConfigMapData = map[string]string{"..": "x"} }, "spec.configMapData[..]", "file name"},
		"name with dot":            {func(o *KindCustomHttp) { o.Name = "web.v2" }, "metadata.name", "Service's name"},
		"name too long":            {func(o *KindCustomHttp) { o.Name = strings.Repeat("a", 64) }, "metadata.name", "63"},
		"name starting digit":      {func(o *KindCustomHttp) { o.Name = "1web" }, "metadata.name", "alphabetic"},
		"no namespace":             {func(o *KindCustomHttp) { o.Namespace = "" }, "metadata.namespace", "namespaced"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.mutate(o)
			_, err := Resolve(o)
			var ise *InvalidSpecError
			if !errors.As(err, &ise) {
				t.Fatalf("Resolve error = %v, want *InvalidSpecError", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.message) {
				t.Fatalf("error %q does not name field %q with %q", msg, tc.field, tc.message)
			}
		})
	}
}

// keys returns n configMapData keys of the given length, each with value v.
func keys(n, length int, v string) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		m[k+strings.Repeat("x", length-len(k))] = v
	}
	return m
}

// TestValidateBounds: each bound of the spec admits its limit and rejects one past it, with a
// message naming the field and the limit. config/crd_test.go checks the same limits against
// the CRD on a real apiserver.
func TestValidateBounds(t *testing.T) {
	mib := MaxConfigMapDataBytes
	tests := map[string]struct {
		atLimit, pastLimit func(*KindCustomHttp)
		field, message     string
	}{
		"replicaCount at most 5000": {
			func(o *KindCustomHttp) { o.Spec.ReplicaCount = i32(5000) },
			func(o *KindCustomHttp) { o.Spec.ReplicaCount = i32(5001) },
			"spec.replicaCount", "between 0 and 5000"},
		"replicaCount at least 0": {
			func(o *KindCustomHttp) { o.Spec.ReplicaCount = i32(0) },
			func(o *KindCustomHttp) { o.Spec.ReplicaCount = i32(-1) },
			"spec.replicaCount", "between 0 and 5000"},
		"port at most 65535": {
			func(o *KindCustomHttp) { o.Spec.Port = i32(65535) },
			func(o *KindCustomHttp) { o.Spec.Port = i32(65536) },
			"spec.port", "between 1 and 65535"},
		"port at least 1": {
			func(o *KindCustomHttp) { o.Spec.Port = i32(1) },
			func(o *KindCustomHttp) { o.Spec.Port = i32(0) },
			"spec.port", "between 1 and 65535"},
		"containerPort at most 65535": {
			func(o *KindCustomHttp) { o.Spec.ContainerPort = i32(65535) },
			func(o *KindCustomHttp) { o.Spec.ContainerPort = i32(65536) },
			"spec.containerPort", "between 1 and 65535"},
		"containerPort at least 1": {
			func(o *KindCustomHttp) { o.Spec.ContainerPort = i32(1) },
			func(o *KindCustomHttp) { o.Spec.ContainerPort = i32(0) },
			"spec.containerPort", "between 1 and 65535"},
		"configMapData at most 1024 keys": {
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = keys(1024, 8, "v") },
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = keys(1025, 8, "v") },
			"spec.configMapData", "at most 1024 keys"},
		"configMapData keys at most 253 characters": {
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = keys(1, 253, "v") },
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = keys(1, 254, "v") },
			"spec.configMapData[k0", "no more than 253 characters"},
		"configMapData values at most 1 MiB": {
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = map[string]string{"big": strings.Repeat("x", mib)} },
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = map[string]string{"big": strings.Repeat("x", mib+1)} },
			"spec.configMapData", "at most 1048576 bytes"},
		// Keys are not counted, as the apiserver does not count them for a ConfigMap.
		"configMapData values at most 1 MiB over 1024 keys": {
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = keys(1024, 253, strings.Repeat("x", mib/1024)) },
			func(o *KindCustomHttp) {
				o.Spec.ConfigMapData = keys(1024, 253, strings.Repeat("x", mib/1024))
				o.Spec.ConfigMapData["k0"+strings.Repeat("x", 251)] += "x"
			},
			"spec.configMapData", "at most 1048576 bytes"},
		// Bytes, not characters: "é" is two bytes in UTF-8.
		"configMapData values at most 1 MiB in bytes": {
			func(o *KindCustomHttp) { o.Spec.ConfigMapData = map[string]string{"big": strings.Repeat("é", mib/2)} },
			func(o *KindCustomHttp) {
				o.Spec.ConfigMapData = map[string]string{"big": strings.Repeat("é", mib/2) + "x"}
			},
			"spec.configMapData", "at most 1048576 bytes"},
		"image at most 1024 characters": {
			func(o *KindCustomHttp) { o.Spec.Image = strings.Repeat("a", 1024) },
			func(o *KindCustomHttp) { o.Spec.Image = strings.Repeat("a", 1025) },
			"spec.image", "not be more than 1024 characters"},
		// Characters, as the CRD's maxLength counts them.
		"image at most 1024 characters, not bytes": {
			func(o *KindCustomHttp) { o.Spec.Image = strings.Repeat("é", 1024) },
			func(o *KindCustomHttp) { o.Spec.Image = strings.Repeat("é", 1025) },
			"spec.image", "not be more than 1024 characters"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.atLimit(o)
			if _, err := Resolve(o); err != nil {
				t.Errorf("at the limit: Resolve = %v, want it accepted", err)
			}
			o = valid()
			tc.pastLimit(o)
			_, err := Resolve(o)
			var ise *InvalidSpecError
			if !errors.As(err, &ise) {
				t.Fatalf("past the limit: Resolve error = %v, want *InvalidSpecError", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.message) || len(msg) > 1024 {
				t.Fatalf("past the limit: error %.1100q does not name field %q with %q in a short message", msg, tc.field, tc.message)
			}
		})
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	o := valid()
	o.Spec.Port, o.Spec.ReplicaCount = nil, i32(-3)
	if errs := Validate(o); len(errs) != 2 {
		t.Fatalf("Validate found %d problems (%v), want 2", len(errs), errs)
	}
}

func TestSampleConvertsAndResolves(t *testing.T) {
	b, err := os.ReadFile("../../config/samples/groupsp_v1_kindcustomhttp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	o, err := FromUnstructured(u)
	if err != nil {
		t.Fatalf("the original operator's sample must convert: %v", err)
	}
	d, err := Resolve(o)
	if err != nil {
		t.Fatalf("the original operator's sample must be valid: %v", err)
	}
	if d.Namespace != "peerns" || d.Name != "kindcustomhttp-sample" || d.Port != 80 || d.ReplicaCount != 2 ||
		d.ConfigMapData["hostports"] != "localhost,8080\n" {
		t.Fatalf("sample resolved to %+v", d)
	}
}

func TestFromUnstructuredRejects(t *testing.T) {
	tests := map[string]struct {
		yaml string
		want string
	}{
		"other kind":       {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "is not groupsp.measutosh.dev/v1 KindCustomHttp"},
		"other version":    {"apiVersion: groupsp.measutosh.dev/v2\nkind: KindCustomHttp\nmetadata: {name: x}\n", "is not groupsp.measutosh.dev/v1"},
		"unknown field":    {"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: x}\nspec: {replicas: 2, port: 80}\n", "replicas"},
		"port as string":   {"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: x}\nspec: {replicaCount: 2, port: \"80\"}\n", "port"},
		"data not strings": {"apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: x}\nspec: {replicaCount: 2, port: 80, configMapData: {a: [1]}}\n", "configMapData"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(tc.yaml), &u.Object); err != nil {
				t.Fatal(err)
			}
			_, err := FromUnstructured(u)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FromUnstructured error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := FromUnstructured(nil); err == nil {
		t.Fatal("FromUnstructured(nil) must fail")
	}
}
