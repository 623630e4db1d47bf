package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// hasFinalizer reports whether u carries Finalizer.
func hasFinalizer(u *unstructured.Unstructured) bool {
	for _, f := range u.GetFinalizers() {
		if f == Finalizer {
			return true
		}
	}
	return false
}

// ensureFinalizer adds Finalizer before anything is created, so that a delete can never
// skip the destroy. It returns the object as stored (u itself when nothing changed).
//
// The write is a patch of metadata.finalizers alone (setFinalizers), never an update of u: u
// comes from the informer cache, which holds no kubectl last-applied annotation
// (stripMetadata), and writing it back would drop that annotation, after which `kubectl apply`
// can no longer remove a field it once set (spec.suspend: true, say).
func (w *Watcher) ensureFinalizer(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if hasFinalizer(u) {
		return u, nil
	}
	out, err := w.setFinalizers(ctx, u, append(u.GetFinalizers(), Finalizer))
	if err != nil {
		return nil, fmt.Errorf("add finalizer to %s: %w", objectRef(u), err)
	}
	return out, nil
}

// setFinalizers makes u's stored finalizers the list finalizers by a JSON merge patch that
// also names u's resourceVersion, so that the apiserver refuses it with a Conflict when the
// object changed since u was read (a finalizer somebody else added meanwhile is never
// dropped); nothing else of the object is written. It returns the object as stored.
func (w *Watcher) setFinalizers(ctx context.Context, u *unstructured.Unstructured, finalizers []string) (*unstructured.Unstructured, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": u.GetResourceVersion(), "finalizers": finalizers}})
	if err != nil {
		return nil, err
	}
	if err := w.fence.Check(); err != nil {
		return nil, err // no write once this replica may no longer lead
	}
	return w.client.Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager})
}

// removeFinalizer lets the apiserver finish deleting the object, by a patch of its
// finalizers (setFinalizers); a conflict is retried on the newest version, an object already
// gone is success.
func (w *Watcher) removeFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	c := w.client.Namespace(u.GetNamespace())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []string
		for _, f := range cur.GetFinalizers() {
			if f != Finalizer {
				keep = append(keep, f)
			}
		}
		if len(keep) == len(cur.GetFinalizers()) {
			return nil
		}
		_, err = w.setFinalizers(ctx, cur, keep)
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer from %s: %w", objectRef(u), err)
	}
	return nil
}

// reconcileDelete destroys the stack, waits until the objects it deleted are gone (no Pulumi
// run awaits a deletion: infra.SkipAwait; the garbage collector removes a Deployment's pods
// first; a wait that lasts is reported, waitTerminating), then removes the finalizer, so a
// `kubectl delete` that returns has left nothing behind. A failed destroy keeps the finalizer
// (and the object) and is retried: removing it first could orphan the objects.
func (w *Watcher) reconcileDelete(ctx context.Context, o *object) error {
	u := o.u
	key := cache.MetaObjectToName(u)
	if !hasFinalizer(u) {
		return nil
	}
	if w.objects.get(key).destroyed == u.GetUID() {
		return nil // an informer copy from before our finalizer removal
	}
	stackName, err := w.stacks.StackName(u.GetNamespace(), u.GetName())
	if err != nil {
		// No stack can exist under an invalid name: nothing to destroy.
		w.log.Info("no valid stack name, removing finalizer", "object", objectRef(u), "err", err)
		return w.removeFinalizer(ctx, u)
	}
	if w.objects.get(key).stackGone != u.GetUID() {
		err := w.destroy(ctx, o, stackName)
		if errors.Is(err, errStackRebuilt) {
			// Rebuilt from the live objects (on-missing-stack=adopt): destroyed as usual.
			err = w.destroy(ctx, o, stackName)
		}
		if errors.Is(err, errStackMissing) {
			return nil // until the user acts (its status says how), or the next resync
		} else if err != nil {
			return err
		}
		w.objects.update(key, func(s *objectState) { s.stackGone = u.GetUID() })
	}
	if left := w.owned.terminating(u.GetNamespace(), u.GetName()); len(left) > 0 {
		return w.waitTerminating(ctx, o, left)
	}
	w.objects.update(key, func(s *objectState) { s.terminatingSince = waitingSince{} })
	w.metrics.setDeleteBlocked(key, false)
	if err := w.removeFinalizer(ctx, u); err != nil {
		return err
	}
	w.objects.update(key, func(s *objectState) { s.stackGone, s.destroyed = "", u.GetUID() })
	return nil
}

// errObjectsTerminating is the result of a delete whose stack is destroyed while the objects it
// deleted are still going: the worker looks again with backoff, without a Pulumi run.
var errObjectsTerminating = errors.New("the destroyed objects are still being deleted")

// waitingSince is when this process first found the delete of the object of UID uid waiting
// for the objects its destroy deleted (monotonic clock).
type waitingSince struct {
	uid types.UID
	at  time.Time
}

// waitTerminating is a delete whose stack is destroyed while left, the objects it deleted, are
// still going. It returns errObjectsTerminating naming them: the worker looks again with
// backoff, and their deletion queues the object too. Once this process has seen the wait last
// Options.DeleteBlockedAfter, something holds them (a finalizer of another controller, a pod
// that does not stop) and the delete is reported instead of waited out in silence: Ready
// False with reason api.ReasonDeleteBlocked naming them (blockedObjects), a Warning Event when
// that message changes, and pulumi_operator_deletes_blocked. The time is this process's own,
// not the objects' deletionTimestamp, which the apiserver's clock wrote.
func (w *Watcher) waitTerminating(ctx context.Context, o *object, left []leftObject) error {
	u := o.u
	key := cache.MetaObjectToName(u)
	names := make([]string, len(left))
	for i, l := range left {
		names[i] = l.String()
	}
	result := fmt.Errorf("%w: %v", errObjectsTerminating, names)
	now := time.Now()
	var since waitingSince
	w.objects.update(key, func(s *objectState) {
		if s.terminatingSince.uid != u.GetUID() {
			s.terminatingSince = waitingSince{u.GetUID(), now}
		}
		since = s.terminatingSince
	})
	if waited := now.Sub(since.at); waited < w.opts.DeleteBlockedAfter {
		// Look again when the wait would count as blocked, whatever the backoff then is.
		w.queue.AddAfter(key, w.opts.DeleteBlockedAfter-waited)
		return result
	}
	msg := fmt.Sprintf("the stack is destroyed, but the delete has waited more than %s for %s to be deleted: whatever holds them (a finalizer of another controller, a pod that does not stop) must let them go before the finalizer %s is removed",
		w.opts.DeleteBlockedAfter, strings.Join(w.blockedObjects(ctx, left), ", "), Finalizer)
	if c := currentCondition(u, api.ConditionReady); c == nil || c.Reason != api.ReasonDeleteBlocked || c.Message != clipMessage(msg) {
		w.recorder.Event(u, corev1.EventTypeWarning, api.ReasonDeleteBlocked, msg)
		w.log.Warn("delete blocked by objects that are not going away", "object", objectRef(u), "objects", names)
	}
	w.metrics.setDeleteBlocked(key, true)
	o.setStatus(func(st *api.KindCustomHttpStatus) {
		setCondition(st, o.gen, api.ConditionReady, metav1.ConditionFalse, api.ReasonDeleteBlocked, msg)
		setCondition(st, o.gen, api.ConditionReconciling, metav1.ConditionTrue, api.ReasonDeleteBlocked, msg)
		setCondition(st, o.gen, api.ConditionStalled, metav1.ConditionFalse, api.ReasonDeleteBlocked, msg)
	})
	return result
}

// blockedObjects names left, the objects a delete waits for, each with its finalizers
// ("Deployment/web (finalizers: foregroundDeletion)"); a Deployment deleted in the foreground
// (finalizer foregroundDeletion) waits for its pods, so the pods of its selector that are being
// deleted are named too, sorted, with theirs ("Pod/web-7d4-x2 (finalizers: example.com/hold)").
// A pod list that fails only leaves the pods out.
func (w *Watcher) blockedObjects(ctx context.Context, left []leftObject) []string {
	described := func(kind, name string, finalizers []string) string {
		if len(finalizers) == 0 {
			return kind + "/" + name
		}
		return fmt.Sprintf("%s/%s (finalizers: %s)", kind, name, strings.Join(finalizers, ", "))
	}
	var out []string
	for _, l := range left {
		out = append(out, described(l.kind, l.name, l.meta.GetFinalizers()))
		dep, ok := l.meta.(*appsv1.Deployment)
		if !ok || !slices.Contains(dep.Finalizers, metav1.FinalizerDeleteDependents) {
			continue
		}
		pods, err := rollout.ListPods(ctx, w.kube, dep)
		if err != nil {
			continue
		}
		slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				out = append(out, described("Pod", p.Name, p.Finalizers))
			}
		}
	}
	return out
}

// destroy runs the destroy of o's stack stackName and reports it; nil means the finalizer may
// go once the objects are gone (the stack was destroyed, or it was missing and stackMissing
// allows it).
func (w *Watcher) destroy(ctx context.Context, o *object, stackName string) error {
	u := o.u
	key := cache.MetaObjectToName(u)
	w.log.Info("running destroy", "object", objectRef(u), "stack", stackName)
	opCtx, cancel := context.WithTimeout(ctx, w.opts.OperationTimeout)
	res, err := w.stacks.Destroy(opCtx, stackName, stack.RunOptions{})
	err = w.timedOut(ctx, opCtx, "destroy", stackName, err)
	cancel()
	w.reportRecovered(u, stackName, res)
	w.metrics.observeOperation("destroy", err, res)
	w.metrics.setLocked(key, false)
	if err != nil {
		reason, msg := w.failed(ctx, u, stackName, err, api.ReasonDestroyFailed)
		o.setStatus(func(st *api.KindCustomHttpStatus) {
			st.LastUpdate = lastUpdate(res, err)
			markFailed(st, o.gen, reason, msg)
		})
		return err
	}
	if res.StackMissing {
		// Nothing was destroyed: objects of this object may still exist, and removing the
		// finalizer would leave them behind (or to the garbage collector) without a word.
		if proceed, err := w.stackMissing(ctx, o, stackName); !proceed {
			if err == nil {
				err = errStackMissing
			}
			return err
		}
		return nil
	}
	w.recorder.Eventf(u, corev1.EventTypeNormal, ReasonDestroyed, "destroyed stack %s: %v", stackName, res.Changes)
	w.log.Info("stack destroyed", "object", objectRef(u), "stack", stackName, "changes", res.Changes)
	return nil
}

// errStackMissing stops a delete whose stack is missing until the user says what to do
// (stackMissing); reconcileDelete returns nil for it: nothing is retried by backoff.
var errStackMissing = errors.New("stack missing")
