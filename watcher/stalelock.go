package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Which stack locks the watcher removes, and why that is safe (README.md "Failure modes"):
//
//   - A lock of this host whose process is gone (stack.Lock.OwnerGone): a killed pulumi process
//     of this operator, or of a laptop's command on the same machine. Nothing holds it.
//   - A lock of a host that led this installation before (the Lease's LockHoldersAnnotation),
//     while this process holds the Lease. A leader writes only while it holds the Lease; one
//     that loses it ends its pulumi processes within fenceAfter of noticing (run), which is
//     RenewDeadline after its last renewal, and nobody can take the Lease before LeaseDuration
//     after that renewal: with client-go's 15 s / 10 s that leaves 5 s, more than fenceAfter
//     and the kill take. A pod that was force-deleted, evicted or lost with its node never
//     renews again, so its locks are cleared as soon as the next leader finds them, whatever
//     its host name and pid. (A process that does not run at all, frozen for longer than the
//     lease, cannot fence itself: the Lease guards against pods that are cut off or gone, not
//     against a paused machine that later resumes.)
//   - With Options.StaleLockTimeout set (opt-in), any lock older than it.
//
// Every other lock (a laptop's `pulumi up`, a CI job, another installation) is waited out and
// reported: Ready False with reason UpdateConflict naming the owner, a StackLocked Event when
// the owner changes, pulumi_operator_stacks_locked and the PulumiOperatorStackLocked alert.

// clearStaleLock removes the lock that made an operation on stackName fail (err, an ErrLocked
// *stack.OperationError) when every lock it names may be removed by the rules above. It
// returns whether the lock may be removed, and CancelLock's error when removing it failed.
func (w *Watcher) clearStaleLock(ctx context.Context, u *unstructured.Unstructured, stackName string, err error) (bool, error) {
	var oe *stack.OperationError
	if !errors.As(err, &oe) || len(oe.Locks) == 0 {
		return false, nil // no lock details (Pulumi Cloud): a wait
	}
	var whys []string
	for _, l := range oe.Locks {
		why := w.lockRemovable(l)
		if why == "" {
			return false, nil
		}
		whys = append(whys, why)
	}
	if cerr := w.stacks.CancelLock(ctx, stackName); cerr != nil {
		w.log.Error("cancel stale lock failed", "object", objectRef(u), "stack", stackName, "err", cerr)
		return true, cerr
	}
	l := oe.Locks[0]
	w.log.Info("cancelled stale lock", "object", objectRef(u), "stack", stackName, "locks", fmt.Sprint(oe.Locks), "why", whys[0])
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonStaleLockCleared,
		"removed the lock of stack %s left by %s@%s (pid %d) at %s: %s",
		stackName, l.User, l.Host, l.Pid, l.Created.Format(time.RFC3339), strings.Join(whys, "; "))
	return true, nil
}

// lockRemovable says why l may be removed (see the rules above), "" when it may not.
func (w *Watcher) lockRemovable(l stack.Lock) string {
	switch {
	case l.OwnerGone():
		return "its process no longer runs on this host"
	case w.fencedHost(l.Host) && w.earlierLeaderGone():
		return "it was taken by an earlier operator pod of this installation, which can no longer write: this one holds the Lease"
	case w.opts.StaleLockTimeout > 0 && time.Since(l.Created) > w.opts.StaleLockTimeout:
		return fmt.Sprintf("it is older than --stale-lock-timeout %s", w.opts.StaleLockTimeout)
	}
	return ""
}

// fencedHost reports whether host led this installation before this process took the Lease,
// and this process leads now.
func (w *Watcher) fencedHost(host string) bool {
	if !w.leading.Load() {
		return false
	}
	hosts := w.fenced.Load()
	return hosts != nil && (*hosts)[host]
}

// earlierLeaderGone reports whether every process of the replica that led before this one is
// gone by now (RunLeaderElected's arithmetic: fencingLock.earlierHolderGoneAt), on this
// process's monotonic clock.
func (w *Watcher) earlierLeaderGone() bool {
	at := w.lockSafeAt.Load()
	return at != 0 && w.fence != nil && w.fence.Now() >= at
}

// lockWait is the status message of an operation that waits for a lock nobody may remove: who
// holds it since when, and what the watcher does.
func lockWait(stackName string, err error) string {
	var oe *stack.OperationError
	if !errors.As(err, &oe) || len(oe.Locks) == 0 {
		return fmt.Sprintf("stack %s is locked by another update; waiting for it (retried with backoff): %v", stackName, err)
	}
	l := oe.Locks[0]
	return fmt.Sprintf("stack %s is locked by %s@%s (pid %d) since %s: another update (a `pulumi up` from a laptop or CI, another operator) holds it; waiting for it to end (retried with backoff; such a lock is never removed by age unless --stale-lock-timeout is set)",
		stackName, l.User, l.Host, l.Pid, l.Created.Format(time.RFC3339))
}
