package watcher

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestNeedsReconcile: which informer updates of a KindCustomHttp are queued. A status-only
// write must not be, or it jumps the object's retry backoff.
func TestNeedsReconcile(t *testing.T) {
	base := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
			"metadata": map[string]any{"name": "a", "namespace": "ns", "generation": int64(1), "resourceVersion": "10",
				"annotations": map[string]any{"x": "1"}, "labels": map[string]any{"shard": "a"}, "finalizers": []any{Finalizer}},
			"spec":   map[string]any{"replicaCount": int64(1)},
			"status": map[string]any{"observedGeneration": int64(1)},
		}}
	}
	for name, tc := range map[string]struct {
		change func(u *unstructured.Unstructured)
		want   bool
	}{
		"resync (same resourceVersion)": {change: func(u *unstructured.Unstructured) {}, want: true},
		"status only": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			u.Object["status"] = map[string]any{"observedGeneration": int64(1), "message": "x"}
		}, want: false},
		"status and managedFields": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"manager": "pulumi-operator"}}, "metadata", "managedFields")
		}, want: false},
		"spec (generation)": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			u.SetGeneration(2)
		}, want: true},
		"annotation (reconcile request)": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			u.SetAnnotations(map[string]string{"x": "1", "groupsp.measutosh.dev/reconcile-requested-at": "now"})
		}, want: true},
		"label": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			u.SetLabels(map[string]string{"shard": "b"})
		}, want: true},
		"finalizer removed": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			u.SetFinalizers(nil)
		}, want: true},
		"deletion timestamp": {change: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("11")
			_ = unstructured.SetNestedField(u.Object, "2026-11-22T10:00:00Z", "metadata", "deletionTimestamp")
		}, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			old, n := base(), base()
			tc.change(n)
			if got := needsReconcile(old, n); got != tc.want {
				t.Errorf("needsReconcile = %v, want %v", got, tc.want)
			}
		})
	}
	if !needsReconcile("not an object", base()) {
		t.Error("an update of an unexpected type must be queued (the reconcile decides)")
	}
}
