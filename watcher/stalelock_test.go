package watcher

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// deadPid is the pid of a process of this host that has exited and been reaped.
func deadPid(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	return cmd.Process.Pid
}

// TestUnitStaleLock: an up that finds the stack locked removes the lock only when its owner
// can no longer write (a process of this host that no longer runs, an earlier leader of this
// installation while this process holds the Lease, or, opted in, any lock older than
// Options.StaleLockTimeout); otherwise it waits and reports who holds the lock. Either way the
// up is retried.
func TestUnitStaleLock(t *testing.T) {
	host, _ := os.Hostname()
	const cancel = "cancel-lock test.ns.web"
	for name, tc := range map[string]struct {
		locks     func(t *testing.T) []stack.Lock
		cancelErr error
		cancel    bool
		event     bool
		// noTimeout runs without Options.StaleLockTimeout (the default); leading and fenced
		// make this process the Lease's holder with fenced as the earlier holders.
		noTimeout bool
		leading   bool
		fenced    []string
	}{
		"old lock of another host, no --stale-lock-timeout: wait": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: "elsewhere", Pid: 1, Created: time.Now().Add(-48 * time.Hour)}}
			},
			noTimeout: true,
		},
		"earlier leader of this installation, this one leads: removed at once": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}}
			},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"},
			cancel: true, event: true,
		},
		"earlier leader, but this one does not lead (any more): wait": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: "operator-7d9f-old", Pid: 12, Created: time.Now()}}
			},
			noTimeout: true, fenced: []string{"operator-7d9f-old"},
		},
		"a host the Lease never named: wait": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: "laptop", Pid: 12, Created: time.Now()}}
			},
			noTimeout: true, leading: true, fenced: []string{"operator-7d9f-old"},
		},
		"owner process gone on this host": {
			locks: func(t *testing.T) []stack.Lock {
				return []stack.Lock{{Host: host, Pid: deadPid(t), Created: time.Now()}}
			},
			cancel: true, event: true,
		},
		"older than StaleLockTimeout, another host": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: "elsewhere", Pid: 1, Created: time.Now().Add(-2 * time.Hour)}}
			},
			cancel: true, event: true,
		},
		"older than StaleLockTimeout, owner alive on this host": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: host, Pid: os.Getpid(), Created: time.Now().Add(-2 * time.Hour)}}
			},
			cancel: true, event: true,
		},
		"recent lock of another host: wait": {
			locks: func(*testing.T) []stack.Lock { return []stack.Lock{{Host: "elsewhere", Pid: 1, Created: time.Now()}} },
		},
		"owner alive on this host: wait": {
			locks: func(*testing.T) []stack.Lock {
				return []stack.Lock{{Host: host, Pid: os.Getpid(), Created: time.Now()}}
			},
		},
		"two locks, one owner alive: wait": {
			locks: func(t *testing.T) []stack.Lock {
				return []stack.Lock{{Host: host, Pid: deadPid(t), Created: time.Now()}, {Host: host, Pid: os.Getpid(), Created: time.Now()}}
			},
		},
		"no lock details (Pulumi Cloud): wait": {
			locks: func(*testing.T) []stack.Lock { return nil },
		},
		"removing the lock fails: logged, no Event": {
			locks: func(t *testing.T) []stack.Lock {
				return []stack.Lock{{Host: host, Pid: deadPid(t), Created: time.Now()}}
			},
			cancelErr: errors.New("backend down"),
			cancel:    true,
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
			f.stacks.upErr = &stack.OperationError{Summary: "locked", Err: stack.ErrLocked, Locks: tc.locks(t)}
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
