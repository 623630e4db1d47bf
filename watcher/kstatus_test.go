package watcher

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// TestKstatus: kstatus (sigs.k8s.io/cli-utils/pkg/kstatus), which kpt, Flux's and Config Sync's
// health checks and cli-utils' appliers use to wait for an object, reads this one's status
// through its life: InProgress while an up or a rollout runs and Current once it is done, at
// creation and after a change; Failed when the rollout gives up (the Deployment's progress
// deadline passes); Terminating while its delete destroys the stack, then gone. Each kstatus
// result of each version of the object is taken from a watch, so none is missed between polls.
// (The object's first version, before the operator has written any status, reads Current:
// kstatus takes an object without conditions or observedGeneration as done.) The Argo CD
// health check of docs/argocd.md, run on the same versions, goes Progressing, Healthy,
// Progressing, Healthy, Progressing, Degraded.
func TestKstatus(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	// A RetryWatcher: the apiserver may end a watch at any time; this one goes on from the last
	// version seen.
	byName := func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=web" }
	list, err := f.cr.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			byName(&o)
			return f.cr.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const gone = status.Status("(deleted)")
	var history []status.Status
	// The Argo CD health check (docs/argocd.md) on each version not being deleted (Argo CD
	// reports those as pending deletion itself), consecutive repeats folded.
	script := argoHealthScript(t)
	var health []string
	// expect reads the watch until it has seen want, in order, each once (other results may come
	// between them), failing with every result seen after 60 s.
	// expectOr is expect that, on failure, also says what state() reports.
	var expectOr func(what string, state func() string, want ...status.Status)
	expect := func(what string, want ...status.Status) { t.Helper(); expectOr(what, nil, want...) }
	expectOr = func(what string, state func() string, want ...status.Status) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for len(want) > 0 {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("%s: the watch ended; kstatus so far %v", what, history)
				}
				var s status.Status
				switch u, isU := ev.Object.(*unstructured.Unstructured); {
				case ev.Type == watch.Deleted:
					s = gone
				case isU:
					r, err := status.Compute(u)
					if err != nil {
						t.Fatalf("%s: kstatus: %v", what, err)
					}
					s = r.Status
					if u.GetDeletionTimestamp() == nil {
						if h, _ := argoHealth(t, script, u); len(health) == 0 || health[len(health)-1] != h {
							health = append(health, h)
						}
					}
				default:
					continue
				}
				if len(history) == 0 || history[len(history)-1] != s {
					history = append(history, s)
				}
				if s == want[0] {
					want = want[1:]
				}
			case <-timeout:
				more := ""
				if state != nil {
					more = "; " + state()
				}
				t.Fatalf("%s: kstatus never went through %v; it showed %v%s", what, want, history, more)
			}
		}
	}

	// settle reads the watch without recording until it has been quiet for 2 s with the object
	// Current: a change of the Deployment that the program does not declare may show a short
	// InProgress (the Deployment's new generation not yet observed), which is not part of the
	// life being checked.
	settle := func(what string) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		last := status.CurrentStatus
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("%s: the watch ended; kstatus so far %v", what, history)
				}
				if u, isU := ev.Object.(*unstructured.Unstructured); isU && ev.Type != watch.Deleted {
					r, err := status.Compute(u)
					if err != nil {
						t.Fatalf("%s: kstatus: %v", what, err)
					}
					last = r.Status
				}
			case <-time.After(2 * time.Second):
				if last == status.CurrentStatus {
					return
				}
			case <-timeout:
				t.Fatalf("%s: the object did not settle Current; it last read %v", what, last)
			}
		}
	}

	f.create(t, "web", "  replicaCount: 2\n  port: 80\n")
	expect("create", status.InProgressStatus, status.CurrentStatus)

	f.patch(t, "web", `{"spec":{"replicaCount":3}}`)
	expect("change", status.InProgressStatus, status.CurrentStatus)

	// A Deployment that gives up after 2 s without progress instead of the default 10 minutes
	// (the program declares no deadline, so this is no drift to repair), set and seen by the
	// Deployment controller before the rollout starts: the controller does not time out a
	// rollout whose Progressing condition still says NewReplicaSetAvailable (its own guard
	// against a cache that lags), and a spec write of ours racing its "Created new replica set"
	// status write could leave the condition there for good. Then an image whose pods cannot be
	// placed.
	if _, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"spec":{"progressDeadlineSeconds":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 60*time.Second, "the progress deadline observed", func() bool {
		d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds == 2
	})
	settle("the progress deadline set")
	f.patch(t, "web", `{"spec":{"image":"example.com/pending:1"}}`)
	expect("rollout started", status.InProgressStatus)
	pollFor(t, 60*time.Second, "the stuck image applied", func() bool {
		d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Spec.Template.Spec.NodeSelector != nil
	})
	ups := f.stacks.ups.Load()
	expectOr("rollout gave up", func() string {
		d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d ups since the stuck image was applied; the Deployment at generation %d (observed %d), progressDeadlineSeconds %v, conditions %+v",
			f.stacks.ups.Load()-ups, d.Generation, d.Status.ObservedGeneration, ptrValue(d.Spec.ProgressDeadlineSeconds), d.Status.Conditions)
	}, status.FailedStatus)
	if d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, "web", metav1.GetOptions{}); err != nil || !progressDeadlineExceeded(d) {
		t.Errorf("kstatus Failed, but the Deployment's rollout has not given up: %+v, %v", d.Status.Conditions, err)
	}

	if err := f.cr.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("delete", status.TerminatingStatus, gone)
	if slices.Contains(history[:len(history)-2], status.TerminatingStatus) {
		t.Errorf("kstatus Terminating before the delete: %v", history)
	}
	t.Logf("kstatus through the object's life: %v", history)
	t.Logf("Argo CD health through the object's life: %v", health)
	want := []string{"Progressing", "Healthy", "Progressing", "Healthy", "Progressing", "Degraded"}
	if !slices.Equal(health, want) {
		t.Errorf("Argo CD health through the object's life: %v, want %v", health, want)
	}
}

// progressDeadlineExceeded reports whether d's rollout gave up (Progressing False,
// ProgressDeadlineExceeded).
func progressDeadlineExceeded(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return true
		}
	}
	return false
}

// ptrValue is *p, or "nil".
func ptrValue[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}
