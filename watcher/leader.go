package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
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
func (w *Watcher) RunLeaderElected(ctx context.Context, kube kubernetes.Interface, le LeaderElection, workers int) error {
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

// Leading reports whether this process currently leads (always false without leader
// election, where Run is called directly).
func (w *Watcher) Leading() bool { return w.leading.Load() }
