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

	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// LeaderElection configures RunLeaderElected. Durations follow client-go's (and
// kube-controller-manager's) defaults: 15 s lease, 10 s renew deadline, 2 s retry.
type LeaderElection struct {
	// Namespace and Name of the coordination.k8s.io Lease.
	Namespace, Name string
	// Identity of this candidate; default hostname plus a random suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod; zero takes the defaults above.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ErrLeadershipLost is returned by RunLeaderElected when this process stopped being the leader
// while ctx was still alive; the process should exit so it restarts as a follower.
var ErrLeadershipLost = errors.New("lost leader election lease")

// RunLeaderElected campaigns for the Lease and runs the watcher (Run with workers) only while
// it leads. Followers wait, with their caches unstarted. Leading reports whether this process
// leads now.
//
// Two ways to stop, each safe for the stacks:
//   - ctx cancelled (SIGTERM): the leader keeps renewing the Lease while running operations
//     finish within Options.ShutdownGrace, and releases it only then, so no other replica
//     starts on a stack this one is still changing.
//   - the Lease lost (renewal failed for RenewDeadline): running operations are cancelled at
//     once, no grace, because another replica may take the Lease LeaseDuration after the last
//     renewal, that is LeaseDuration-RenewDeadline (5 s by default) after the loss is noticed;
//     RunLeaderElected then returns ErrLeadershipLost.
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
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return fmt.Errorf("create leader election lock: %w", err)
	}
	// The election outlives ctx: after a SIGTERM the leader keeps the Lease until its
	// operations are done (electing is cancelled then), a follower stops campaigning at once.
	electing, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var started atomic.Bool
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
				if err := w.recordLeader(leading, kube, le); err != nil {
					// Not fatal: locks of earlier pods are then waited out instead of cleared.
					w.log.Warn("could not record this pod in the Lease's lock holders: locks left by earlier operator pods will not be cleared", "err", err)
				}
				// leading ends when the Lease is lost (or after stopElecting, below).
				runErr <- w.run(ctx, leading.Done(), workers)
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
	elector.Run(electing)
	if started.Load() {
		// After a loss, run returns once its cancelled operations have stopped.
		if err := <-runErr; err != nil {
			return err
		}
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

// Leading reports whether this process currently leads (always false without leader
// election, where Run is called directly).
func (w *Watcher) Leading() bool { return w.leading.Load() }
