package watcher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// A workload whose rollout cannot progress is reported with the Deployment's and its pods' own
// reason, without any Pulumi run and without holding the worker: the object is looked at again
// with backoff while the rollout goes on, Stalled once the Deployment gives up, and Ready again
// by itself when the cause goes.
func TestUnitRolloutReasons(t *testing.T) {
	f := newUnit(t, Options{})
	u := kch("web", nil, Finalizer)
	f.applied(u)
	dep, _, _ := owned(t, u)
	key := cache.ObjectName{Namespace: unitNS, Name: "web"}
	broken := func(mutate func(d *appsv1.Deployment)) {
		d := dep.DeepCopy()
		d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 0, 0, 0
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: infra.SelectorLabels(desiredOf(t, u))}
		mutate(d)
		f.putOwned(d)
	}
	check := func(wantReason string, wantErr error, stalled bool) {
		t.Helper()
		err := f.reconcileRaw("web")
		if !errors.Is(err, wantErr) && !(err == nil && wantErr == nil) {
			t.Fatalf("reconcile = %v, want %v", err, wantErr)
		}
		cr := f.storedCR("web")
		ready := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionReady)
		st := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionStalled)
		if ready == nil || ready.Reason != wantReason || (st.Status == metav1.ConditionTrue) != stalled {
			t.Fatalf("Ready %+v, Stalled %+v; want reason %s, stalled %v", ready, st, wantReason, stalled)
		}
		if len(f.stacks.ups) != 0 {
			t.Fatalf("%d ups for a rollout problem, want none", len(f.stacks.ups))
		}
		f.deliver("web")
	}

	broken(func(d *appsv1.Deployment) {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue,
			Reason: "FailedCreate", Message: `pods "web-x" is forbidden: exceeded quota: no-pods`}}
	})
	check("FailedCreate", errRolloutInProgress, false)
	if msg := meta.FindStatusCondition(f.storedCR("web").Status.Conditions, api.ConditionReady).Message; !strings.Contains(msg, "exceeded quota") {
		t.Errorf("Ready message %q does not carry the Deployment's", msg)
	}

	broken(func(*appsv1.Deployment) {})
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: "web-abc", Labels: infra.Labels(desiredOf(t, u))},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "http-server", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nope:1"`}}}}}}
	if _, err := f.kube.CoreV1().Pods(unitNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("ImagePullBackOff", errRolloutInProgress, false)

	// The worker looks again with backoff, and counts no failure.
	f.w.queue.Add(key)
	ctx := context.Background()
	f.w.processNext(ctx, ctx)
	if n := f.w.queue.NumRequeues(key); n != 1 {
		t.Errorf("requeues after a reconcile of a rollout under way: %d, want 1 (backoff)", n)
	}
	if got := gauge(t, f.registry, "pulumi_operator_stacks_failing"); got != 0 {
		t.Errorf("stacks_failing %v for a rollout under way, want 0", got)
	}
	f.deliver("web")

	broken(func(d *appsv1.Deployment) {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
			Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "web-1" has timed out progressing.`}}
	})
	check("ProgressDeadlineExceeded", nil, true)

	// The cause goes: the Deployment's change queues the object, which is Ready by itself.
	f.putOwned(dep)
	check(api.ReasonSucceeded, nil, false)
}

// An up or destroy that runs past Options.OperationTimeout is cancelled: the object says so
// (Ready False, TimedOut, naming the flag) and is retried with backoff; the worker is free.
func TestUnitOperationTimeout(t *testing.T) {
	for _, op := range []string{"up", "destroy"} {
		t.Run(op, func(t *testing.T) {
			f := newUnit(t, Options{OperationTimeout: 300 * time.Millisecond})
			f.applied(kch("web", nil, Finalizer))
			f.stacks.hang = true
			if op == "up" {
				f.change("web", false, func(u *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicaCount")
				})
			} else {
				f.markDeleted("web")
			}
			start := time.Now()
			err := f.reconcile("web")
			if !errors.Is(err, errTimedOut) || !strings.Contains(err.Error(), "--operation-timeout") {
				t.Fatalf("reconcile = %v, want a timeout naming --operation-timeout", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the worker was held %s, want about the 300ms timeout", d)
			}
			wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionFalse, api.ReasonTimedOut)
			wantCondition(t, f.storedCR("web"), api.ConditionReconciling, metav1.ConditionTrue, api.ReasonRetrying)
			if got := f.storedCR("web").Finalizers; len(got) != 1 {
				t.Errorf("finalizers %v after a timed-out %s, want ours kept", got, op)
			}
		})
	}
}

// Ready comes only from a Deployment at least as new as the one the last up left. After an up
// that changed the pod template, a reconcile queued by the Service's or the ConfigMap's event
// may find the informer cache still holding the old Deployment, rolled out in full: the
// Deployment is then read from the API server, and Ready waits for the new template's rollout.
// Once the cache has caught up it is trusted again: an idle reconcile makes no API request.
func TestUnitReadyNotFromAStaleDeployment(t *testing.T) {
	f := newUnit(t, Options{})
	u := kch("web", nil, Finalizer)
	f.applied(u)
	gvr, _ := f.ownedStore(&appsv1.Deployment{})
	// The up writes the new template (generation 2) to the API server; the Deployment
	// controller has not observed it yet, and the cache has not seen it.
	var next *appsv1.Deployment
	f.stacks.onUp = func() {
		next, _, _ = owned(t, f.stored("web"))
		next.Generation = 2
		next.Status.ObservedGeneration, next.Status.UpdatedReplicas = 1, 0
		f.newVersion(next)
		if err := f.kube.Tracker().Update(gvr, next, unitNS); err != nil {
			t.Error(err)
		}
	}
	f.change("web", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "example.com/web:2", "spec", "image")
	})
	if err := f.reconcileRaw("web"); !errors.Is(err, errRolloutInProgress) {
		t.Fatalf("the up's reconcile = %v, want the rollout in progress", err)
	}
	wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionFalse, api.ReasonReplicasUnavailable)

	// The Service's event queues the object; the cache still holds generation 1.
	f.deliver("web")
	if err := f.reconcileRaw("web"); !errors.Is(err, errRolloutInProgress) {
		t.Errorf("reconcile on a stale cache = %v, want the rollout in progress", err)
	}
	wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionFalse, api.ReasonReplicasUnavailable)

	// The rollout finishes and the cache catches up.
	done := next.DeepCopy()
	done.Status.ObservedGeneration, done.Status.UpdatedReplicas = 2, done.Status.Replicas
	f.putOwned(done)
	f.deliver("web")
	if err := f.reconcileRaw("web"); err != nil {
		t.Fatalf("reconcile after the rollout: %v", err)
	}
	wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionTrue, api.ReasonSucceeded)
	f.deliver("web")
	f.kube.ClearActions()
	if err := f.reconcileRaw("web"); err != nil {
		t.Fatal(err)
	}
	if a := f.kube.Actions(); len(a) != 0 {
		t.Errorf("an idle reconcile with the cache caught up made %d API requests: %v", len(a), a)
	}
}
