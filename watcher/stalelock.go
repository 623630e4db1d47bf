package watcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// clearStaleLock cancels the lock that made an up fail when its owner is gone: a process of
// this host that no longer runs, or any lock older than Options.StaleLockTimeout (the owner
// is then presumed dead: no up takes that long). Otherwise the wait goes on.
func (w *Watcher) clearStaleLock(ctx context.Context, u *unstructured.Unstructured, stackName string, err error) {
	var oe *stack.OperationError
	if !errors.As(err, &oe) || len(oe.Locks) == 0 {
		return
	}
	for _, l := range oe.Locks {
		if !l.OwnerGone() && time.Since(l.Created) < w.opts.StaleLockTimeout {
			return
		}
	}
	if cerr := w.stacks.CancelLock(ctx, stackName); cerr != nil {
		w.log.Error("cancel stale lock failed", "object", objectRef(u), "stack", stackName, "err", cerr)
		return
	}
	w.log.Info("cancelled stale lock", "object", objectRef(u), "stack", stackName, "locks", fmt.Sprint(oe.Locks))
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonStaleLockCleared,
		"removed the lock of stack %s left by %s@%s (pid %d), whose process is gone or which is older than %s",
		stackName, oe.Locks[0].User, oe.Locks[0].Host, oe.Locks[0].Pid, w.opts.StaleLockTimeout)
}
