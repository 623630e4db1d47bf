package watcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestUnitWorkerPluginRequeue: an up that failed for a missing provider plugin is queued
// again, backoff reset, as soon as FindPlugin finds the plugin, and not before.
func TestUnitWorkerPluginRequeue(t *testing.T) {
	found := false
	f := newUnit(t, Options{FindPlugin: func() (string, error) {
		if !found {
			return "", errors.New("not installed")
		}
		return "/plugins/pulumi-resource-kubernetes", nil
	}})
	f.stacks.upErr = &stack.OperationError{Summary: "plugin missing", Err: stack.ErrPluginMissing}
	f.create(kch("web", nil, Finalizer))
	key := cache.ObjectName{Namespace: unitNS, Name: "web"}
	if n := f.process("web"); n != 1 {
		t.Fatalf("requeues %d, want 1", n)
	}
	if f.w.pluginWait.len() != 1 {
		t.Fatalf("%d objects wait for the plugin, want 1", f.w.pluginWait.len())
	}
	f.w.requeueIfPluginAppeared(context.Background())
	if f.w.queue.Len() != 0 || f.w.pluginWait.len() != 1 {
		t.Errorf("plugin still absent: queue %d, waiting %d; want 0, 1", f.w.queue.Len(), f.w.pluginWait.len())
	}
	found = true
	f.w.requeueIfPluginAppeared(context.Background())
	if f.w.queue.Len() != 1 || f.w.queue.NumRequeues(key) != 0 || f.w.pluginWait.len() != 0 {
		t.Errorf("plugin found: queue %d, requeues %d, waiting %d; want 1, 0, 0",
			f.w.queue.Len(), f.w.queue.NumRequeues(key), f.w.pluginWait.len())
	}
}

// TestUnitWorkerNoWorkAfterShutdown: once work has ended (shutdown, lost lease) a queued key
// starts nothing.
func TestUnitWorkerNoWorkAfterShutdown(t *testing.T) {
	f := newUnit(t, Options{})
	f.create(kch("web", nil))
	f.w.queue.Add(cache.ObjectName{Namespace: unitNS, Name: "web"})
	work, stop := context.WithCancel(context.Background())
	stop()
	if f.w.processNext(work, context.Background()) {
		t.Error("processNext went on after work ended")
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("after shutdown: %q, want nothing", got)
	}
}

// TestUnitRun: Run over the fake clients lists and watches through real informers, syncs the
// caches, reconciles a new object to Ready with one up, and returns nil once its context ends.
func TestUnitRun(t *testing.T) {
	f := newUnit(t, Options{})
	u := kch("web", nil)
	dep, svc, cm := owned(t, u)
	for _, o := range []runtime.Object{dep, svc, cm} {
		if err := f.kube.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.dyn.Tracker().Add(u); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx, 2) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c := meta.FindStatusCondition(f.storedCR("web").Status.Conditions, api.ConditionReady)
		if c != nil && c.Status == metav1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not Ready within 5 s: %+v (journal %q)", c, f.journal.take())
		}
	}
	if !f.w.HasSynced() {
		t.Error("HasSynced false while workers run")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := len(f.stacks.ups); n != 1 {
		t.Errorf("%d ups, want 1", n)
	}
	if o := f.storedCR("web"); len(o.Finalizers) != 1 {
		t.Errorf("finalizers %v", o.Finalizers)
	}
}
