package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"

	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// LeaderElection configures RunLeaderElected. Durations follow client-go's (and
// kube-controller-manager's) defaults: 15 s lease, 10 s renew deadline, 2 s retry; they must pass
// fence.Validate.
type LeaderElection struct {
	// Namespace and Name of the coordination.k8s.io Lease.
	Namespace, Name string
	// Identity of this candidate; default hostname plus a random suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod; zero takes the defaults above.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Fence is this replica's write permission, shared with the stack manager (stack.Config.Fence)
	// so that its pulumi processes run under it: RunLeaderElected grants it at each successful
	// renewal of the Lease (fencingLock). Nil: RunLeaderElected makes one, which then fences only
	// the watcher's own writes.
	Fence *fence.Fence
}

// ErrLeadershipLost is returned by RunLeaderElected when this process stopped being the leader
// while ctx was still alive; the process should exit so it restarts as a follower.
var ErrLeadershipLost = errors.New("lost leader election lease")

// RunLeaderElected campaigns for the Lease through kube (a client of the election's own: see
// below) and runs the watcher (Run with workers) only while it leads. Followers wait, with their
// caches unstarted. Leading reports whether this process leads now.
//
// While it leads, this process may write (status, Events aside, and every Pulumi operation) only
// under its fence (package fence): until its last successful renewal's send time +
// RenewDeadline, on its own monotonic clock. It never waits on the API server to learn that it
// lost the Lease: when that deadline passes without a renewal (the API server unreachable or
// slow, the Lease taken), running operations are cancelled at once and every pulumi process is
// killed KillAfter later (and kills itself then, through its lease), which fence.Validate keeps
// before the earliest moment another replica may lead (last renewal + LeaseDuration).
// RunLeaderElected then returns ErrLeadershipLost without waiting for client-go's elector, whose
// release of the Lease may hang on the same API server. The Lease stays watched during a SIGTERM
// grace: a deadline that passes then fences the same way.
//
// On SIGTERM (ctx cancelled) the leader keeps renewing while running operations finish within
// Options.ShutdownGrace, and releases the Lease only once nothing of it runs any more
// (fencingLock holds the release until then), so no other replica starts on a stack this one is
// still changing.
//
// kube should be a client of the election's own, with a request timeout and a connection of its
// own (commands electionConfig): renewals must not queue behind the watcher's requests.
func (w *Watcher) RunLeaderElected(ctx context.Context, kube kubeclient.Interface, le LeaderElection, workers int) error {
	if le.Identity == "" {
		host, _ := os.Hostname()
		le.Identity = host + "_" + string(uuid.NewUUID())
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = 15 * time.Second
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = 10 * time.Second
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = 2 * time.Second
	}
	if err := fence.Validate(le.LeaseDuration, le.RenewDeadline, le.RetryPeriod); err != nil {
		return err
	}
	if le.Fence == nil {
		le.Fence = fence.New(le.RenewDeadline)
	}
	w.fence = le.Fence
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return fmt.Errorf("create leader election lock: %w", err)
	}
	quiesced := make(chan struct{}) // closed once nothing of this replica runs (run returned)
	lock := newFencingLock(inner, le.Fence, quiesced, le.RenewDeadline+fence.KillAfter)
	// The election outlives ctx: after a SIGTERM the leader keeps the Lease until its
	// operations are done (electing is cancelled then), a follower stops campaigning at once.
	electing, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var started, fencedWhileLeading atomic.Bool
	runErr := make(chan error, 1)
	go func() {
		<-ctx.Done()
		if !started.Load() {
			stopElecting()
		}
	}()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				started.Store(true)
				w.leading.Store(true)
				w.log.Info("became leader", "identity", le.Identity, "lease", le.Namespace+"/"+le.Name)
				// client-go learns of a loss late (RenewDeadline after its first failed retry,
				// then a release that may hang); the fence has usually expired by then, and a
				// loss it reports (the Lease taken) ends the permission at once.
				go func() {
					<-leading.Done()
					le.Fence.Revoke()
				}()
				w.lockSafeAt.Store(lock.earlierHolderGoneAt())
				w.snapshotLocks(leading)
				if err := w.recordLeader(leading, kube, le); err != nil {
					// Not fatal: locks of earlier pods are then waited out instead of cleared.
					w.log.Warn("could not record this pod in the Lease's lock holders: locks left by earlier operator pods will not be cleared", "err", err)
				}
				// The fence's expiry ends the work; ctx (SIGTERM) ends it with a grace.
				err := w.run(ctx, le.Fence.Expired(), workers)
				close(quiesced)
				// Whether the fence had expired when the work ended, read before the release
				// below: releasing ends leading, whose goroutine above revokes the fence, and a
				// SIGTERM's clean stop must not then read as a lost Lease.
				select {
				case <-le.Fence.Expired():
					fencedWhileLeading.Store(true)
				default:
				}
				runErr <- err
				stopElecting() // release the Lease: nothing of ours runs any more
			},
			OnStoppedLeading: func() {
				w.leading.Store(false)
				w.log.Info("stopped leading", "identity", le.Identity)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configure leader election: %w", err)
	}
	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		elector.Run(electing)
	}()
	select {
	case <-electorDone:
		// A follower stopped by ctx, or a leader whose election ended (its release done).
		if started.Load() {
			if err := <-runErr; err != nil {
				return err
			}
		}
	case err := <-runErr:
		// The watcher stopped: a SIGTERM's grace is over (the elector releases the Lease now, and
		// is waited for so that the release is sent before the process exits), or the fence
		// expired (the elector is not waited for: its release may hang on an API server this
		// replica cannot reach, and the Lease expires by itself).
		if err != nil {
			return err
		}
		if fencedWhileLeading.Load() {
			w.log.Warn("stopped leading: the Lease could not be renewed within the renew deadline; every pulumi process of this replica has ended",
				"identity", le.Identity, "sinceRenewal", le.Fence.SinceRenewal().Round(time.Millisecond).String())
			return ErrLeadershipLost
		}
		<-electorDone
	}
	if ctx.Err() == nil {
		return ErrLeadershipLost
	}
	return nil
}

// LockHoldersAnnotation, on the leader election Lease, lists the host names of the operator
// pods that have led this installation, newest last, comma-separated, at most maxLockHolders:
// the hosts whose stack locks a later leader may remove (stalelock.go). Each leader adds its own
// host name before it starts any operation.
const LockHoldersAnnotation = "groupsp.measutosh.dev/lock-holders"

// maxLockHolders bounds LockHoldersAnnotation: a lock left by a pod more than this many leaders
// ago is no longer recognized (and is waited out, never removed by mistake).
const maxLockHolders = 32

// recordLeader adds this host to the Lease's LockHoldersAnnotation and keeps the hosts that
// led before (this one left out: its own locks are judged by process, stack.Lock.OwnerGone) as
// the ones whose locks may be removed. The Lease is read and updated with the optimistic
// concurrency the elector uses; its next renewal retries on the new version, as it does after
// any conflict.
func (w *Watcher) recordLeader(ctx context.Context, kube kubeclient.Interface, le LeaderElection) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("read host name: %w", err)
	}
	leases := kube.CoordinationV1().Leases(le.Namespace)
	var earlier []string
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, le.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		earlier = nil
		for _, h := range strings.Split(l.Annotations[LockHoldersAnnotation], ",") {
			if h = strings.TrimSpace(h); h != "" && h != host && !slices.Contains(earlier, h) {
				earlier = append(earlier, h)
			}
		}
		next := append(slices.Clone(earlier), host)
		if len(next) > maxLockHolders {
			next = next[len(next)-maxLockHolders:]
		}
		value := strings.Join(next, ",")
		if l.Annotations[LockHoldersAnnotation] == value {
			return nil
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[LockHoldersAnnotation] = value
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("update Lease %s/%s: %w", le.Namespace, le.Name, err)
	}
	fenced := make(map[string]bool, len(earlier))
	for _, h := range earlier {
		fenced[h] = true
	}
	w.fenced.Store(&fenced)
	w.log.Info("recorded this pod as a lock holder of the Lease", "host", host, "earlierHolders", len(earlier))
	return nil
}

// snapshotLocks records the locks held now, right after this process acquired the Lease: the
// Lease rule removes an earlier leader's lock only among them (stalelock.go). Without a snapshot
// (no engine host, a backend that does not answer within lockSnapshotTimeout) no lock is removed
// by that rule: they are waited out and reported instead.
func (w *Watcher) snapshotLocks(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, lockSnapshotTimeout)
	defer cancel()
	locks, ok := w.stacks.Locks(ctx)
	if !ok {
		w.leaseLocks.Store(nil)
		w.log.Warn("could not list the stacks' locks on becoming leader: locks left by earlier operator pods will be waited out, not removed")
		return
	}
	held := make(map[string]stack.Lock, len(locks))
	for _, l := range locks {
		held[l.ID] = l
	}
	w.leaseLocks.Store(&held)
	w.log.Info("listed the stacks' locks on becoming leader", "locks", len(locks))
}

// lockSnapshotTimeout bounds snapshotLocks: one listing of the backend's lock directory.
const lockSnapshotTimeout = 30 * time.Second

// Healthy reports an error while this process leads but may no longer write: its fence has
// expired (it could not renew the Lease within the renew deadline) and it is ending its
// operations before it exits. nil otherwise: a follower, or a process without leader election,
// is healthy while it answers.
func (w *Watcher) Healthy() error {
	if !w.leading.Load() {
		return nil
	}
	return w.fence.Check()
}

// Leading reports whether this process currently leads (always false without leader
// election, where Run is called directly).
func (w *Watcher) Leading() bool { return w.leading.Load() }
