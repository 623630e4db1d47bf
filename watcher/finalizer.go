package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
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
// first), then removes the finalizer, so a `kubectl delete` that returns has left nothing
// behind. A failed destroy keeps the finalizer (and the object) and is retried: removing it
// first could orphan the objects.
func (w *Watcher) reconcileDelete(ctx context.Context, o *object) error {
	u := o.u
	key := cache.MetaObjectToName(u)
	if !hasFinalizer(u) {
		return nil
	}
	if uid, ok := w.destroyed.Load(key); ok && uid == u.GetUID() {
		return nil // an informer copy from before our finalizer removal
	}
	stackName, err := w.stacks.StackName(u.GetNamespace(), u.GetName())
	if err != nil {
		// No stack can exist under an invalid name: nothing to destroy.
		w.log.Info("no valid stack name, removing finalizer", "object", objectRef(u), "err", err)
		return w.removeFinalizer(ctx, u)
	}
	if uid, ok := w.stackGone.Load(key); !ok || uid != u.GetUID() {
		if err := w.destroy(ctx, o, stackName); errors.Is(err, errStackMissing) {
			return nil // until the user acts (its status says how), or the next resync
		} else if err != nil {
			return err
		}
		w.stackGone.Store(key, u.GetUID())
	}
	if left := w.owned.terminating(u.GetNamespace(), u.GetName()); len(left) > 0 {
		// Their deletion queues the object again; the backoff is the fallback.
		return fmt.Errorf("%w: %v", errObjectsTerminating, left)
	}
	if err := w.removeFinalizer(ctx, u); err != nil {
		return err
	}
	w.stackGone.Delete(key)
	w.destroyed.Store(key, u.GetUID())
	return nil
}

// errObjectsTerminating is the result of a delete whose stack is destroyed while the objects it
// deleted are still going: the worker looks again with backoff, without a Pulumi run.
var errObjectsTerminating = errors.New("the destroyed objects are still being deleted")

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
