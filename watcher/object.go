package watcher

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

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
func (w *Watcher) ensureFinalizer(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if hasFinalizer(u) {
		return u, nil
	}
	u.SetFinalizers(append(u.GetFinalizers(), Finalizer))
	out, err := w.client.Namespace(u.GetNamespace()).Update(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("add finalizer to %s: %w", klogRef(u), err)
	}
	return out, nil
}

// removeFinalizer lets the apiserver finish deleting the object; a conflict is retried on
// the newest version, an object already gone is success.
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
		cur.SetFinalizers(keep)
		_, err = c.Update(ctx, cur, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer from %s: %w", klogRef(u), err)
	}
	return nil
}

// statusWriteTimeout bounds one status write, its conflict retries included.
const statusWriteTimeout = 10 * time.Second

// FieldManager names the watcher in managedFields.
const FieldManager = "pulumi-operator"

// updateStatus applies mutate to the object's status and writes it through the status
// subresource, only if it changed. It starts from u and, on a conflict, from a fresh read, so
// a write never loses another writer's change; mutate must therefore be safe to run again.
// On success u holds the stored object, so later writes build on it.
//
// The write does not end with ctx: the status after a cancelled Pulumi operation (shutdown
// past its grace, a lost lease) is the one that most needs writing, and with a cancelled ctx
// the request failed and retry.RetryOnConflict returned nil for it, so nothing was written or
// logged. It is bounded by statusWriteTimeout instead.
func (w *Watcher) updateStatus(ctx context.Context, u *unstructured.Unstructured, mutate func(*api.KindCustomHttpStatus)) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusWriteTimeout)
	defer cancel()
	c := w.client.Namespace(u.GetNamespace())
	cur := u
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			fresh, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		first = false
		var st api.KindCustomHttpStatus
		if raw, ok := cur.Object["status"].(map[string]any); ok {
			// A status this version cannot read (written by something else) is replaced.
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		}
		before, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		st.ObservedGeneration = cur.GetGeneration()
		mutate(&st)
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(before, raw) {
			return nil
		}
		next := cur.DeepCopy()
		next.Object["status"] = raw
		out, err := c.UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			return err
		}
		cur = out
		return nil
	})
	if err != nil {
		return fmt.Errorf("write status of %s: %w", klogRef(u), err)
	}
	u.Object = cur.Object
	return nil
}
