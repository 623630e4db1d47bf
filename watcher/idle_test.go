package watcher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// idleCRs is how many unchanged objects must cost no Pulumi run (issue: "200 unchanged CRs
// through 3 resyncs and one operator restart count 0 Pulumi runs").
const idleCRs = 200

// TestNoRunsForUnchangedObjects: once every object is Ready, three resyncs and a restart of
// the watcher start no Pulumi process. Each of the 200 first ups is a real pulumi run.
func TestNoRunsForUnchangedObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: 200 real pulumi ups take minutes")
	}
	t.Setenv("TEST_WORKERS", "4")
	f := start(t)
	ctx := context.Background()

	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range idleCRs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f.create(t, fmt.Sprintf("idle-%03d", i), "  replicaCount: 1\n  port: 80\n")
		}()
	}
	wg.Wait()
	err := wait.PollUntilContextTimeout(ctx, time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := f.cr.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range l.Items {
			o, err := api.FromUnstructured(&l.Items[i])
			if err == nil && readyAt(1)(o) {
				ready++
			}
		}
		return ready == idleCRs, nil
	})
	if err != nil {
		t.Fatalf("not all %d objects became Ready: %v (ups so far %d)", idleCRs, err, f.stacks.ups.Load())
	}
	ups := f.stacks.ups.Load()
	if ups != idleCRs {
		t.Errorf("%d ups to create %d objects, want exactly one each", ups, idleCRs)
	}

	time.Sleep(3500 * time.Millisecond) // three resyncs at 1 s
	if n := f.stacks.ups.Load() - ups; n != 0 {
		t.Fatalf("%d Pulumi runs during resyncs of %d unchanged objects, want 0", n, idleCRs)
	}

	// Restart: a new watcher (empty memory) lists everything again.
	f.stop()
	f.stop = f.run(t, Options{Namespace: f.ns, Resync: time.Second, Logger: testLogger()})
	time.Sleep(3500 * time.Millisecond)
	if n := f.stacks.ups.Load() - ups; n != 0 {
		t.Fatalf("%d Pulumi runs after a restart with %d unchanged objects, want 0", n, idleCRs)
	}
	t.Logf("%d objects: %d ups to create, 0 through 3 resyncs and a restart", idleCRs, ups)

	// Clean up without 200 destroys: stop the watcher and let the objects go.
	f.stop()
	l, err := f.cr.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range l.Items {
		_, _ = f.cr.Patch(ctx, u.GetName(), types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	}
}
