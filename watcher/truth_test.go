package watcher

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// A spec changed while an up runs makes the up's status write conflict. The write retried on
// the fresh object must still report the generation the up applied: reporting the new one
// would tell `kubectl wait` and kstatus that a spec nobody applied is done. The new generation
// is applied by the next reconcile.
func TestUnitObservedGenerationIsTheAppliedOne(t *testing.T) {
	f := newUnit(t, Options{})
	f.applied(kch("web", nil, Finalizer))
	f.change("web", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicaCount")
	})
	f.stacks.onUp = func() {
		f.stacks.onUp = nil
		f.change("web", false, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(4), "spec", "replicaCount")
		})
	}
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	cr := f.storedCR("web")
	if cr.Generation != 3 {
		t.Fatalf("generation %d, want 3 (two spec changes)", cr.Generation)
	}
	if cr.Status.ObservedGeneration != 2 {
		t.Errorf("status.observedGeneration %d after the up of generation 2, want 2", cr.Status.ObservedGeneration)
	}
	for _, c := range cr.Status.Conditions {
		if c.ObservedGeneration != 2 {
			t.Errorf("condition %s observedGeneration %d, want 2", c.Type, c.ObservedGeneration)
		}
	}
	f.deliver("web")
	f.stacks.ups = nil
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if len(f.stacks.ups) != 1 {
		t.Fatalf("ups for generation 3: %d, want 1", len(f.stacks.ups))
	}
	if got := f.storedCR("web").Status.ObservedGeneration; got != 3 {
		t.Errorf("status.observedGeneration %d after the up of generation 3, want 3", got)
	}
}

// Once an object is gone, nothing of it stays: the gauges count it no more (the worker's
// observeReconcile runs after the reconcile that found it gone), its condition series go, and
// this process's memory of it (objectStates, the plugin waits, the drift check) is empty.
func TestUnitForgetsDeletedObjects(t *testing.T) {
	f := newUnit(t, Options{FindPlugin: func() (string, error) { return "", errors.New("absent") }})
	f.applied(kch("web", nil, Finalizer))
	key := cache.ObjectName{Namespace: unitNS, Name: "web"}
	// An idle reconcile: it remembers the object's typed form and its drift check.
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if f.w.objects.get(key).converted.cr == nil {
		t.Fatal("no typed form remembered after a reconcile")
	}
	if _, ok := f.w.owned.inSync.Load(key); !ok {
		t.Fatal("no drift check remembered after an idle reconcile")
	}
	f.change("web", false, func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{api.ReconcileRequestAnnotation: "t1"})
	})
	f.stacks.upErr = &stack.OperationError{Summary: "no plugin", Err: stack.ErrPluginMissing}
	f.w.queue.Add(key)
	ctx := context.Background()
	f.w.processNext(ctx, ctx)
	if got := gauge(t, f.registry, "pulumi_operator_stacks_managed"); got != 1 {
		t.Fatalf("stacks_managed %v with the object there, want 1", got)
	}
	if got := gauge(t, f.registry, "pulumi_operator_stacks_failing"); got != 1 {
		t.Fatalf("stacks_failing %v after a failed up, want 1", got)
	}
	if f.w.pluginWait.len() != 1 {
		t.Fatalf("plugin waits %d, want 1", f.w.pluginWait.len())
	}
	f.w.objects.update(key, func(s *objectState) { s.handledRequest = "t1" })
	if err := f.dyn.Tracker().Delete(api.GroupVersionResource, unitNS, "web"); err != nil {
		t.Fatal(err)
	}
	if err := f.w.informer.GetIndexer().Delete(kch("web", nil)); err != nil {
		t.Fatal(err)
	}
	f.w.queue.Forget(key)
	f.w.queue.Add(key)
	f.w.processNext(ctx, ctx)
	for _, name := range []string{"pulumi_operator_stacks_managed", "pulumi_operator_stacks_failing"} {
		if got := gauge(t, f.registry, name); got != 0 {
			t.Errorf("%s %v after the delete, want 0", name, got)
		}
	}
	if n := countSeries(t, f.registry, "pulumi_operator_condition"); n != 0 {
		t.Errorf("%d condition series after the delete, want 0", n)
	}
	if n := len(f.w.objects.m); n != 0 {
		t.Errorf("%d object states after the delete, want 0: %+v", n, f.w.objects.get(key))
	}
	if f.w.pluginWait.len() != 0 {
		t.Error("pluginWait still holds the object")
	}
	if _, ok := f.w.owned.inSync.Load(key); ok {
		t.Error("the drift check of the object is still remembered")
	}
}

// A reconcile request whose up fails is echoed all the same, so that `reconcile --wait` learns
// the outcome from its own token.
func TestUnitRequestEchoedOnFailure(t *testing.T) {
	f := newUnit(t, Options{})
	f.applied(kch("web", nil, Finalizer))
	f.change("web", false, func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{api.ReconcileRequestAnnotation: "token-1"})
	})
	f.stacks.upErr = &stack.OperationError{Summary: "boom", Err: errors.New("boom")}
	if err := f.reconcile("web"); err == nil {
		t.Fatal("reconcile of a failing up returned nil")
	}
	cr := f.storedCR("web")
	if cr.Status.LastHandledReconcileAt != "token-1" {
		t.Errorf("lastHandledReconcileAt %q after a failed up, want token-1", cr.Status.LastHandledReconcileAt)
	}
	wantCondition(t, cr, api.ConditionReconciling, "True", api.ReasonRetrying)
}

// countSeries is how many series metric name has in reg.
func countSeries(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
