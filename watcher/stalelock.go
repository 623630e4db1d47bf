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

// Which stack locks the watcher removes, and why that is safe (README.md "Failure modes";
// docs/design/fencing.md has the arithmetic):
//
//   - A lock taken by a pulumi process this operator started that has ended, proven by that
//     process's holder record (Stacks.HolderGone: a flock(2) the kernel released when the process
//     ended), in this process's life or an earlier one's on the same workspace root (a restarted
//     container). Not a host name and a pid: those say nothing about a process of another PID
//     namespace (a host-network pod, a pod of the same name in another cluster).
//   - A lock of a host that led this installation before (the Lease's LockHoldersAnnotation),
//     while this process holds the Lease, once every process of the replica that led before is
//     gone by the fence's arithmetic (earlierLeaderGone), and only when the lock was held already
//     when this process acquired the Lease (leaseLocks): a leader writes only under its fence,
//     which ends every pulumi process of its by the time another replica may lead, so such a
//     lock is dead. A lock that host takes later (`kubectl exec ... pulumi-operator up` on a
//     follower pod) is not one of a leader's, and is waited out.
//   - With Options.StaleLockTimeout set (opt-in), any lock this process has seen for longer than
//     that, on its own clock.
//
// Every other lock (a laptop's `pulumi up`, a CI job, another installation) is waited out and
// reported: Ready False with reason UpdateConflict naming the owner, a StackLocked Event when
// the owner changes, pulumi_operator_stacks_locked and the PulumiOperatorStackLocked alert. The
// lock removed is exactly the one judged (by its ID), never another taken since.

// clearStaleLock removes the lock that made an operation on stackName fail (err, an ErrLocked
// *stack.OperationError) when every lock it names may be removed by the rules above. It
// returns whether the lock may be removed, and CancelLock's error when removing it failed.
func (w *Watcher) clearStaleLock(ctx context.Context, u *unstructured.Unstructured, stackName string, err error) (bool, error) {
	var oe *stack.OperationError
	if !errors.As(err, &oe) || len(oe.Locks) == 0 {
		return false, nil // no lock details (Pulumi Cloud): a wait
	}
	var whys, ids []string
	for _, l := range oe.Locks {
		why := w.lockRemovable(l, stackName)
		if why == "" || l.ID == "" {
			return false, nil
		}
		whys = append(whys, why)
		ids = append(ids, l.ID)
	}
	if cerr := w.stacks.CancelLock(ctx, stackName, ids, oe.Locks); cerr != nil {
		w.log.Error("cancel stale lock failed", "object", objectRef(u), "stack", stackName, "err", cerr)
		return true, cerr
	}
	for _, id := range ids {
		w.lockSeen.Delete(id)
	}
	l := oe.Locks[0]
	w.log.Info("cancelled stale lock", "object", objectRef(u), "stack", stackName, "locks", fmt.Sprint(oe.Locks), "why", whys[0])
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonStaleLockCleared,
		"removed the lock of stack %s left by %s@%s (pid %d) at %s: %s",
		stackName, l.User, l.Host, l.Pid, l.Created.Format(time.RFC3339), strings.Join(whys, "; "))
	return true, nil
}

// lockRemovable says why lock l of stackName may be removed (see the rules above), "" when it
// may not.
func (w *Watcher) lockRemovable(l stack.Lock, stackName string) string {
	gone, alive, why := w.stacks.HolderGone(l, stackName)
	switch {
	case gone:
		return why
	case alive:
		return "" // a process of this operator holds it: wait for it
	case w.fencedHost(l.Host) && w.earlierLeaderGone() && w.heldAtAcquisition(l.ID):
		return "it was taken by an earlier operator pod of this installation, which can no longer write: this one holds the Lease"
	case w.opts.StaleLockTimeout > 0 && w.seenFor(l.ID) > w.opts.StaleLockTimeout:
		return fmt.Sprintf("this operator has seen it for longer than --stale-lock-timeout %s", w.opts.StaleLockTimeout)
	}
	return ""
}

// seenFor is how long this process has seen lock id (0 the first time, which starts the count).
func (w *Watcher) seenFor(id string) time.Duration {
	if id == "" {
		return 0
	}
	first, _ := w.lockSeen.LoadOrStore(id, time.Now())
	return time.Since(first.(time.Time))
}

// heldAtAcquisition reports whether lock id was held when this process acquired the Lease.
func (w *Watcher) heldAtAcquisition(id string) bool {
	held := w.leaseLocks.Load()
	if held == nil || id == "" {
		return false
	}
	_, ok := (*held)[id]
	return ok
}

// interrupted reports whether stackName's last operation was cut short by the change of leader:
// a replica that led before held a lock on it when this one acquired the Lease, and no up of this
// process has run on it since. Such a stack gets an up with refresh even when its object's status
// says it is up to date (plan: ReasonResumed): the operation may have been a drift repair or a
// refresh that status does not record, and only an up meets, and so clears, the lock it left.
func (w *Watcher) interrupted(stackName string) bool {
	held := w.leaseLocks.Load()
	if held == nil {
		return false
	}
	if _, done := w.resumed.Load(stackName); done {
		return false
	}
	for _, l := range *held {
		if l.Stack == stackName && w.fencedHost(l.Host) {
			return true
		}
	}
	return false
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
