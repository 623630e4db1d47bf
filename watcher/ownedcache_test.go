package watcher

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// What the owned-object caches keep: an object named as a live KindCustomHttp's own whole (a
// ConfigMap's data as a digest only), anything else that merely carries the label as a stub of a
// few fields, whatever it held (1 MiB of data, 256 KiB of annotations).
func TestOwnedTransform(t *testing.T) {
	live := func(ns, name string) bool { return ns == "team-a" && name == "web" }
	tr := ownedTransform(live)
	big := strings.Repeat("x", 1<<20)
	labelled := func(name, instance string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "team-a", ResourceVersion: "7", UID: "u1",
			Labels:      map[string]string{infra.LabelManagedBy: infra.ManagedBy, infra.LabelInstance: instance, "extra": big[:100]},
			Annotations: map[string]string{"bulk": big[:200000]}}
	}
	for name, tc := range map[string]struct {
		obj        any
		stub       bool
		dataDigest bool
	}{
		"the live object's ConfigMap: data as a digest": {obj: &corev1.ConfigMap{ObjectMeta: labelled("web"+api.ConfigMapSuffix, "web"), Data: map[string]string{"k": big}}, dataDigest: true},
		"the live object's Deployment: whole":           {obj: &appsv1.Deployment{ObjectMeta: labelled("web", "web"), Spec: appsv1.DeploymentSpec{MinReadySeconds: 3}}},
		"a look-alike ConfigMap, no such object":        {obj: &corev1.ConfigMap{ObjectMeta: labelled("flood-1", "flood-1"), Data: map[string]string{"k": big}}, stub: true},
		"a look-alike naming the live object wrongly":   {obj: &corev1.ConfigMap{ObjectMeta: labelled("web-other", "web"), Data: map[string]string{"k": big}}, stub: true},
		"a look-alike Service":                          {obj: &corev1.Service{ObjectMeta: labelled("svc", "nobody")}, stub: true},
		"a look-alike in another namespace": {obj: func() any {
			m := labelled("web", "web")
			m.Namespace = "team-b"
			return &appsv1.Deployment{ObjectMeta: m}
		}(), stub: true},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := tr(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			m := out.(metav1.Object)
			if isStub(m) != tc.stub {
				t.Fatalf("stub %v, want %v", isStub(m), tc.stub)
			}
			if tc.stub {
				if len(m.GetAnnotations()) != 1 || len(m.GetLabels()) != 2 || m.GetResourceVersion() != "7" || m.GetUID() != "u1" {
					t.Errorf("stub keeps %d annotations, %d labels, rv %q, uid %q: want only its identity", len(m.GetAnnotations()), len(m.GetLabels()), m.GetResourceVersion(), m.GetUID())
				}
				if cm, ok := out.(*corev1.ConfigMap); ok && len(cm.Data) != 0 {
					t.Error("stub keeps the data")
				}
			}
			if cm, ok := out.(*corev1.ConfigMap); ok && tc.dataDigest {
				if cm.Data != nil || cm.Annotations[dataDigestAnnotation] != dataDigest(map[string]string{"k": big}, nil) {
					t.Errorf("cached ConfigMap: data %d keys, digest %q; want no data and the data's digest", len(cm.Data), cm.Annotations[dataDigestAnnotation])
				}
			}
		})
	}
}

// What the envFrom informers keep of anybody's ConfigMap or Secret: its namespace, name and
// resourceVersion, however much metadata it carries (labels and owner references have no size
// limit of their own).
func TestEnvSourceStub(t *testing.T) {
	labels := map[string]string{}
	for i := range 1000 {
		labels[fmt.Sprintf("l.example.com/k%04d", i)] = strings.Repeat("v", 63)
	}
	in := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "env", ResourceVersion: "42", UID: "u1", Generation: 3,
			Labels: labels, Annotations: map[string]string{"bulk": strings.Repeat("x", 200000)},
			OwnerReferences: make([]metav1.OwnerReference, 500), Finalizers: []string{"example.com/f"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
	}
	out, err := envSourceStub(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadata{TypeMeta: in.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "env", ResourceVersion: "42"}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("envSourceStub kept %+v, want only namespace, name and resourceVersion", out)
	}
	// Anything else (what a typed informer would pass) is left alone.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: labels}}
	if out, _ := envSourceStub(cm); out != any(cm) {
		t.Errorf("envSourceStub changed a %T", cm)
	}
}

// The drift check reads a cached ConfigMap's data from its digest: the declared data's digest
// is no difference; another digest is one (confirmed then by a live read).
func TestComparableConfigMap(t *testing.T) {
	want := map[string]string{"hostports": "a,1\n"}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{dataDigestAnnotation: dataDigest(want, nil)}}}
	if got := comparableConfigMap(cm, want); len(got.Data) != 1 || got.Data["hostports"] != "a,1\n" || cm.Data != nil {
		t.Errorf("same digest: %v (cached copy %v), want the declared data on a copy", got.Data, cm.Data)
	}
	if got := comparableConfigMap(cm, map[string]string{"hostports": "b,2\n"}); got.Data != nil {
		t.Errorf("other digest: %v, want no data (a difference)", got.Data)
	}
	plain := &corev1.ConfigMap{Data: want}
	if got := comparableConfigMap(plain, want); got != plain {
		t.Error("a ConfigMap without a digest changed")
	}
}
