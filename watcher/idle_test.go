package watcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// idleCRs is how many unchanged objects the property is shown on. "No Pulumi run for an
// unchanged object" does not depend on how many there are; the issue's 1000-object figure (CPU,
// memory, runs) is measured by `make bench` (hack/bench, phase idle), not by `make test`.
const idleCRs = 5

// TestNoRunsForUnchangedObjects: once every object is Ready, three resyncs and a restart of
// the watcher (empty memory, everything listed again, then three more resyncs) start no Pulumi
// process, while the reconcile counter shows that every object was looked at each time.
func TestNoRunsForUnchangedObjects(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	for i := range idleCRs {
		f.create(t, fmt.Sprintf("idle-%d", i), "  replicaCount: 1\n  port: 80\n")
	}
	for i := range idleCRs {
		f.waitFor(t, fmt.Sprintf("idle-%d", i), "Ready", readyAt(1))
	}
	ups := f.stacks.ups.Load()
	if ups != idleCRs {
		t.Errorf("%d ups to create %d objects, want exactly one each", ups, idleCRs)
	}

	f.noUpsThrough(t, 3*idleCRs, fmt.Sprintf("three resyncs of %d unchanged objects", idleCRs))

	// Restart: a new watcher (empty memory) lists everything again. Its own registry: the
	// metrics of one watcher are registered once.
	f.stop()
	f.registry = prometheus.NewRegistry()
	f.stop = f.run(t, Options{Namespace: f.ns, Resync: time.Second, Registry: f.registry, Logger: testLogger()})
	f.noUpsThrough(t, 4*idleCRs, fmt.Sprintf("a restart and three resyncs of %d unchanged objects", idleCRs))
	if n := f.stacks.ups.Load() - ups; n != 0 {
		t.Fatalf("%d Pulumi runs after the objects were Ready, want 0", n)
	}

	// Still Ready, at the same generation: the restart rewrote nothing that matters.
	l, err := f.cr.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		o, err := api.FromUnstructured(&l.Items[i])
		if err != nil || !readyAt(1)(o) {
			t.Errorf("%s after the restart: not Ready at generation 1 (%v)", l.Items[i].GetName(), err)
		}
	}

	// Clean up without a destroy each (not what this test is about): stop the watcher and let
	// the objects go.
	f.stop()
	for _, u := range l.Items {
		_, _ = f.cr.Patch(ctx, u.GetName(), types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	}
}

// BenchmarkIdleReconcile is the operator's own cost of one reconcile that finds nothing to do:
// an object whose stack is up to date and whose Deployment, Service and ConfigMap match it,
// which is what every resync does for every object. Fake clients stand in for the apiserver
// because such a reconcile makes no API request (the loop fails if it writes anything or runs
// an up); the idle CPU of an operator over N objects is about N times this per resync period
// (docs/benchmarks.md, "Scale", measures that on a real cluster).
func BenchmarkIdleReconcile(b *testing.B) {
	f := newUnit(b, Options{})
	f.applied(kch("web", nil))
	b.ReportAllocs()
	for b.Loop() {
		if err := f.reconcile("web"); err != nil {
			b.Fatalf("idle reconcile: %v", err)
		}
	}
	if j, ups := f.journal.take(), len(f.stacks.ups); len(j) > 0 || ups > 0 {
		b.Fatalf("an idle reconcile wrote %v and ran %d ups, want nothing", j, ups)
	}
}
