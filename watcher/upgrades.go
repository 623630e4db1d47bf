package watcher

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/cache"
)

// ReasonProgramUpgraded: an up whose only cause is a new program version (infra.ProgramVersion)
// of the operator, run at the program-upgrade pace (Options.ProgramUpgradesPerMinute) (Normal).
const ReasonProgramUpgraded = "ProgramUpgraded"

// maxUpgradeDefer bounds how long a program upgrade whose turn has come waits for the queue to
// be empty: the creates, changes, deletes and drift repairs in it go first, but a queue that is
// never empty (a resync of many objects) does not hold the upgrades back for ever.
const maxUpgradeDefer = 2 * time.Second

// programUpgrades paces the ups whose only cause is a new program version, so that an operator
// upgrade that changes the program does not run one up per stack at once: those objects wait
// in a FIFO of their own, outside the workqueue, and are queued one at a time at the pace of a
// token bucket (golang.org/x/time/rate), each once the workqueue is empty or maxUpgradeDefer has
// passed, and only while fewer than maxRunning of them run: one worker of two or more is always
// left to creates, changes, deletes and drift repairs, which an upgrade would otherwise make
// wait for a whole up (docs/benchmarks.md, "A program upgrade"). A queued key carries a grant
// that lets its next reconcile run the up. Safe for concurrent use.
type programUpgrades struct {
	// limiter is the pace; nil runs every upgrade at once (unpaced).
	limiter *rate.Limiter
	// maxRunning bounds the upgrades that run at once (admitted, not yet done); running counts
	// them.
	maxRunning, running int
	mu                  sync.Mutex
	waiting             []cache.ObjectName // FIFO, each key once
	queued              map[cache.ObjectName]bool
	// granted holds when each queued key got its turn.
	granted map[cache.ObjectName]time.Time
	// wake is signalled when a key starts to wait.
	wake chan struct{}
}

// newProgramUpgrades paces program upgrades at perMinute ups a minute (a burst of one), one at
// a time until setWorkers says how many workers run; 0 or less does not pace them.
func newProgramUpgrades(perMinute int) *programUpgrades {
	u := &programUpgrades{queued: map[cache.ObjectName]bool{}, granted: map[cache.ObjectName]time.Time{}, wake: make(chan struct{}, 1),
		maxRunning: 1}
	if perMinute > 0 {
		u.limiter = rate.NewLimiter(rate.Limit(float64(perMinute)/60), 1)
	}
	return u
}

// admit reports whether key's program upgrade may run now, using up its grant; the caller
// calls done once that reconcile ends. Otherwise key waits for its turn (once, in arrival
// order) and run queues it then.
func (u *programUpgrades) admit(key cache.ObjectName) bool {
	if u.limiter == nil {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.granted[key]; ok {
		delete(u.granted, key)
		u.running++
		return true
	}
	if !u.queued[key] {
		u.queued[key] = true
		u.waiting = append(u.waiting, key)
		select {
		case u.wake <- struct{}{}:
		default:
		}
	}
	return false
}

// setWorkers lets at most workers-1 upgrades run at once (1 with one worker).
func (u *programUpgrades) setWorkers(workers int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.maxRunning = max(workers-1, 1)
}

// done ends an upgrade admit let run (paced upgrades only).
func (u *programUpgrades) done() {
	if u.limiter == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.running = max(u.running-1, 0)
}

// grantHeld is how long a grant not yet taken counts as a running upgrade: a key whose reconcile
// ends before it asks (its envFrom source missing, say) must not hold the others back.
const grantHeld = 30 * time.Second

// roomToRun reports whether fewer than maxRunning upgrades run, counting those granted within
// grantHeld and not yet admitted.
func (u *programUpgrades) roomToRun() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.running
	for _, at := range u.granted {
		if time.Since(at) < grantHeld {
			n++
		}
	}
	return n < u.maxRunning
}

// forget drops key's wait and grant (the object is gone).
func (u *programUpgrades) forget(key cache.ObjectName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.granted, key)
	delete(u.queued, key) // its place in waiting is skipped by next
}

// pending is the number of objects waiting for their turn.
func (u *programUpgrades) pending() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queued)
}

// next takes the oldest waiting key; ok is false when none waits.
func (u *programUpgrades) next() (key cache.ObjectName, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for len(u.waiting) > 0 {
		key, u.waiting = u.waiting[0], u.waiting[1:]
		if u.queued[key] {
			delete(u.queued, key)
			u.granted[key] = time.Now()
			return key, true
		}
	}
	u.waiting = nil // let the backing array go
	return cache.ObjectName{}, false
}

// run grants the waiting keys their turn at the limiter's pace until ctx ends: for each, it
// waits for idle (the workqueue empty; polled) for at most maxUpgradeDefer, then for room
// (roomToRun: an upgrade ends in an up's time), then for a token, then hands the key to add. It
// returns at once when the upgrades are unpaced.
func (u *programUpgrades) run(ctx context.Context, idle func() bool, add func(cache.ObjectName)) {
	if u.limiter == nil {
		return
	}
	for {
		if u.pending() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-u.wake:
				continue
			}
		}
		deadline := time.Now().Add(maxUpgradeDefer)
		for !idle() && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		for !u.roomToRun() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		// The token last, so that none saved up during the waits makes a burst.
		if err := u.limiter.Wait(ctx); err != nil {
			return // ctx ended
		}
		if key, ok := u.next(); ok {
			add(key)
		}
	}
}
