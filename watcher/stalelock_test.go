package watcher

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestUnitStaleLock: an up that finds the stack locked removes the lock only when its owner
// provably can no longer write: a pulumi process of this operator whose holder record says it
// has ended; a lock of an earlier leader of this installation while this process holds the
// Lease, once that leader's processes are gone by the fence's arithmetic, and only if the lock
// was held when this process acquired the Lease; or, opted in, a lock this process has seen for
// longer than Options.StaleLockTimeout (its own clock, never the lock's). Otherwise it waits
// and reports who holds the lock. Either way the up is retried; what is removed is exactly the
// judged lock, by its ID.
func TestUnitStaleLock(t *testing.T) {
	host, _ := os.Hostname()
	const cancel = "cancel-lock test.ns.web [l1]"
	old := time.Now().Add(-48 * time.Hour)
	for name, tc := range map[string]struct {
		locks     []stack.Lock
		cancelErr error
		cancel    bool
		event     bool
		// noTimeout runs without Options.StaleLockTimeout (the default); leading and fenced
		// make this process the Lease's holder with fenced as the earlier holders; atAcquisition
		// lists the locks held when it acquired it; notYet puts the earlier leader's end in the
		// future; seen is how long ago this process first saw lock l1.
		noTimeout     bool
		leading       bool
		fenced        []string
		atAcquisition []string
		notYet        bool
		seen          time.Duration
		gone, alive   []int
	}{
		"old lock of another host, no --stale-lock-timeout: wait": {
			locks:     []stack.Lock{{ID: "l1", Host: "elsewhere", Pid: 1, Created: old}},
			noTimeout: true,
		},
		"earlier leader, held at acquisition, its processes gone: removed": {
			locks:     []stack.Lock{{ID: "l1", Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"}, atAcquisition: []string{"l1"},
			cancel: true, event: true,
		},
		"earlier leader's host, lock taken after acquisition (an exec on a follower pod): wait": {
			locks:     []stack.Lock{{ID: "l1", Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"}, atAcquisition: []string{"other"},
		},
		"earlier leader, no lock listing at acquisition: wait": {
			locks:     []stack.Lock{{ID: "l1", Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"},
		},
		"earlier leader whose processes may still run: wait": {
			locks:     []stack.Lock{{ID: "l1", Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"}, atAcquisition: []string{"l1"}, notYet: true,
		},
		"earlier leader, but this one does not lead (any more): wait": {
			locks:     []stack.Lock{{ID: "l1", Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}},
			noTimeout: true, fenced: []string{"operator-7d9f-old"}, atAcquisition: []string{"l1"},
		},
		"a host the Lease never named: wait": {
			locks:     []stack.Lock{{ID: "l1", Host: "laptop", Pid: 12, Created: time.Now()}},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"}, atAcquisition: []string{"l1"},
		},
		"its holder record proves its process ended: removed": {
			locks:     []stack.Lock{{ID: "l1", Host: host, Pid: 77, Created: time.Now()}},
			noTimeout: true, gone: []int{77}, cancel: true, event: true,
		},
		"this host, a pid that does not run here, no holder record (another PID namespace): wait": {
			locks:     []stack.Lock{{ID: "l1", Host: host, Pid: 999999, Created: time.Now()}},
			noTimeout: true,
		},
		"seen for longer than StaleLockTimeout, another host: removed": {
			locks: []stack.Lock{{ID: "l1", Host: "elsewhere", Pid: 1, Created: time.Now()}},
			seen:  2 * time.Hour, cancel: true, event: true,
		},
		"old by its taker's clock, first seen now, StaleLockTimeout set: wait": {
			locks: []stack.Lock{{ID: "l1", Host: "elsewhere", Pid: 1, Created: old}},
		},
		"seen for longer than StaleLockTimeout, but a process of this operator holds it: wait": {
			locks: []stack.Lock{{ID: "l1", Host: host, Pid: 78, Created: old}},
			seen:  2 * time.Hour, alive: []int{78},
		},
		"two locks, one holder alive: wait": {
			locks: []stack.Lock{{ID: "l1", Host: host, Pid: 77, Created: time.Now()}, {ID: "l2", Host: host, Pid: 78, Created: time.Now()}},
			gone:  []int{77}, alive: []int{78},
		},
		"a lock without an ID: wait": {
			locks:     []stack.Lock{{Host: host, Pid: 77, Created: time.Now()}},
			noTimeout: true, gone: []int{77},
		},
		"no lock details (Pulumi Cloud): wait": {},
		"removing the lock fails: logged, no Event": {
			locks:     []stack.Lock{{ID: "l1", Host: host, Pid: 77, Created: time.Now()}},
			noTimeout: true, gone: []int{77}, cancelErr: errors.New("backend down"), cancel: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts := Options{StaleLockTimeout: time.Hour}
			if tc.noTimeout {
				opts.StaleLockTimeout = 0
			}
			f := newUnit(t, opts)
			f.w.leading.Store(tc.leading)
			fenced := map[string]bool{}
			for _, h := range tc.fenced {
				fenced[h] = true
			}
			f.w.fenced.Store(&fenced)
			f.w.fence = fence.New(time.Minute)
			f.w.fence.Renewed(f.w.fence.Now())
			f.w.lockSafeAt.Store(f.w.fence.Now() - 1)
			if tc.notYet {
				f.w.lockSafeAt.Store(f.w.fence.Now() + int64(time.Minute))
			}
			if tc.atAcquisition != nil {
				held := map[string]stack.Lock{}
				for _, id := range tc.atAcquisition {
					held[id] = stack.Lock{ID: id}
				}
				f.w.leaseLocks.Store(&held)
			}
			if tc.seen > 0 {
				f.w.lockSeen.Store("l1", time.Now().Add(-tc.seen))
			}
			f.stacks.holderGone, f.stacks.holderAlive = map[int]bool{}, map[int]bool{}
			for _, p := range tc.gone {
				f.stacks.holderGone[p] = true
			}
			for _, p := range tc.alive {
				f.stacks.holderAlive[p] = true
			}
			f.stacks.upErr = &stack.OperationError{Summary: "locked", Err: stack.ErrLocked, Locks: tc.locks}
			f.stacks.cancelErr = tc.cancelErr
			f.create(kch("web", nil, Finalizer))
			if n := f.process("web"); n != 1 {
				t.Errorf("a locked stack requeued %d times, want 1", n)
			}
			journal := []string{statusProgressing, "up refresh=false"}
			if tc.cancel {
				journal = append(journal, cancel)
			}
			journal = append(journal, "status Ready=False/UpdateConflict Reconciling=True/Retrying")
			if got := f.journal.take(); !slices.Equal(got, journal) {
				t.Errorf("journal\n got %q\nwant %q", got, journal)
			}
			events := []string{"Warning " + ReasonStackLocked}
			if tc.event {
				events = []string{"Warning " + ReasonStaleLockCleared}
			} else if tc.cancel {
				events = nil // removing failed: logged; the next retry reports again
			}
			if got := f.events(); !slices.Equal(got, events) {
				t.Errorf("events %q, want %q", got, events)
			}
		})
	}
}

// TestUnitResumeInterrupted: an object whose status says it is up to date, but whose stack held a
// lock of the replica that led before when this one took the Lease (that replica's operation on
// it, a drift repair say, was cut short), gets an up with refresh (Resumed): the up meets the
// lock, the Lease rule clears it, the retry runs; once that up has succeeded the object is left
// alone again. A lock of a host that never led, or none, starts no up.
func TestUnitResumeInterrupted(t *testing.T) {
	for name, tc := range map[string]struct {
		host   string
		resume bool
	}{
		"an earlier leader's lock": {host: "operator-7d9f-old", resume: true},
		"a laptop's lock":          {host: "laptop"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			f.applied(kch("web", nil, Finalizer))
			f.w.leading.Store(true)
			fenced := map[string]bool{"operator-7d9f-old": true}
			f.w.fenced.Store(&fenced)
			f.w.fence = fence.New(time.Minute)
			f.w.fence.Renewed(f.w.fence.Now())
			f.w.lockSafeAt.Store(f.w.fence.Now() - 1)
			lock := stack.Lock{ID: "l1", Host: tc.host, Pid: 12, Created: time.Now(), Stack: "test.ns.web"}
			f.w.leaseLocks.Store(&map[string]stack.Lock{"l1": lock})

			f.stacks.upErr = &stack.OperationError{Summary: "locked", Err: stack.ErrLocked, Locks: []stack.Lock{lock}}
			err := f.reconcile("web")
			got := f.journal.take()
			if !tc.resume {
				if err != nil || len(got) != 0 {
					t.Fatalf("reconcile = %v, journal %q; want nothing done", err, got)
				}
				return
			}
			if err == nil || !slices.Equal(got, []string{statusProgressing, "up refresh=true", "cancel-lock test.ns.web [l1]", "status Ready=False/UpdateConflict Reconciling=True/Retrying"}) {
				t.Fatalf("first reconcile = %v, journal %q; want the up with refresh meeting the lock, which is cancelled", err, got)
			}
			f.stacks.upErr = nil
			if err := f.reconcile("web"); err != nil {
				t.Fatal(err)
			}
			if got := f.journal.take(); !slices.Contains(got, "up refresh=true") {
				t.Fatalf("the retry: journal %q, want the up with refresh", got)
			}
			if ev := f.events(); !slices.Contains(ev, "Normal "+ReasonResumed) {
				t.Errorf("events %q, want Normal %s", ev, ReasonResumed)
			}
			f.deliver("web")
			if err := f.reconcile("web"); err != nil {
				t.Fatal(err)
			}
			if got := f.journal.take(); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "up ") }) {
				t.Fatalf("after the resumed up: journal %q, want no more ups", got)
			}
		})
	}
}
