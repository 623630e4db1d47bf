package watcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rl "k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// fencingLock is the leader election's resource lock (the Lease) seen through this replica's
// fence: client-go's LeaderElector calls it, and it
//   - grants the fence at each Create or Update that takes or renews the Lease for this replica,
//     from the time the request was sent (read before sending: the earliest moment another
//     replica can have seen the renewal);
//   - holds back a release (an Update that clears the holder, client-go's ReleaseOnCancel) until
//     nothing of this replica runs (quiesced), so that a follower that takes a released Lease at
//     once never meets a process of this one, and refuses it when the Lease is another's now;
//   - remembers when it first saw each record of another holder, so that a new leader knows
//     when the replica it replaced was fenced at the latest (earlierHolderGoneAt).
//
// client-go offers no hook for any of these (its LeaderElector keeps its observed times private),
// hence the wrapper around resourcelock.Interface, the one seam it has.
type fencingLock struct {
	rl.Interface
	fence    *fence.Fence
	quiesced <-chan struct{}
	// span is how long after its last renewal's send time a replica's processes may still run:
	// RenewDeadline + fence.KillAfter (every replica of an installation runs the same flags).
	span time.Duration

	mu sync.Mutex
	// seen is the last record of the Lease this replica read, and seenAt when it first read that
	// record (fence clock, ns); zero before the first read.
	seen   rl.LeaderElectionRecord
	seenAt int64
	// goneAt is, once this replica has acquired the Lease, when the replica it replaced is
	// fenced at the latest (fence clock, ns): seenAt of the last record read before + span.
	goneAt int64
}

// errNotOurs is the error of a release refused because the Lease's last record read names
// another holder (fencingLock.write).
var errNotOurs = errors.New("not releasing the Lease: this replica no longer holds it")

func newFencingLock(inner rl.Interface, f *fence.Fence, quiesced <-chan struct{}, span time.Duration) *fencingLock {
	return &fencingLock{Interface: inner, fence: f, quiesced: quiesced, span: span}
}

// Get reads the Lease and notes when each new record was first seen.
func (l *fencingLock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil && rec != nil {
		now := l.fence.Now()
		l.mu.Lock()
		if l.seenAt == 0 || rec.HolderIdentity != l.seen.HolderIdentity || !rec.RenewTime.Equal(&l.seen.RenewTime) {
			l.seen, l.seenAt = *rec, now
		}
		l.mu.Unlock()
	}
	return rec, raw, err
}

// Create creates the Lease for this replica (nobody held it before).
func (l *fencingLock) Create(ctx context.Context, rec rl.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Create)
}

// Update takes, renews or releases the Lease.
func (l *fencingLock) Update(ctx context.Context, rec rl.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Update)
}

// write sends rec with do and grants the fence when it takes or renews the Lease for this
// replica; a release waits for quiesced first.
func (l *fencingLock) write(ctx context.Context, rec rl.LeaderElectionRecord, do func(context.Context, rl.LeaderElectionRecord) error) error {
	if rec.HolderIdentity == "" {
		select {
		case <-l.quiesced:
		case <-ctx.Done():
			return ctx.Err()
		}
		// client-go releases after a failed renewal too, judging by the record it last observed:
		// this replica's own when it could not reach the API server. The Get it sends just before
		// (recorded in seen) may reach the server once a partition heals and find that another
		// replica took the Lease meanwhile; releasing then would clear that leader's holding while
		// it still writes, and a third replica could take the Lease at once. Only this replica's
		// own holding is released (the Update carries that Get's resourceVersion, so nothing
		// written after it is cleared either).
		l.mu.Lock()
		holder := l.seen.HolderIdentity
		l.mu.Unlock()
		if holder != l.Identity() {
			return fmt.Errorf("%w: the Lease is held by %q now", errNotOurs, holder)
		}
		return do(ctx, rec)
	}
	sent := l.fence.Now()
	if err := do(ctx, rec); err != nil {
		return err
	}
	l.mu.Lock()
	if l.goneAt == 0 {
		// This replica's first write as holder: it has just acquired the Lease. Whoever held it
		// before renewed it last no later than this replica first saw that renewal.
		l.goneAt = sent
		if l.seenAt != 0 && l.seen.HolderIdentity != rec.HolderIdentity {
			l.goneAt = max(sent, l.seenAt+int64(l.span))
		}
	}
	l.mu.Unlock()
	l.fence.Renewed(sent)
	return nil
}

// earlierHolderGoneAt is when (fence clock, ns) every process of the replica that held the Lease
// before this one is gone at the latest; 0 before this replica acquired it.
func (l *fencingLock) earlierHolderGoneAt() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.goneAt
}
