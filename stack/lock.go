package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// Lock is one lock on a stack as a DIY backend reports it: who took it, where and when.
type Lock struct {
	// User and Host name the process that took the lock; Pid is its process id on Host.
	User string
	Host string
	Pid  int
	// Created is when the lock was taken.
	Created time.Time
}

// OwnerGone reports whether l was taken by a process of this host that no longer runs: a
// pulumi CLI or engine host killed by SIGKILL (a crashed pod, kill -9, a fenced leader), or
// interrupted before it installed its own handler (the DIY backend locks the stack before the
// engine's cancellation scope exists: pkg/backend/diy Update, then apply). A process id that
// runs again, but in a process started after the lock was taken, is another process (pids are
// reused, and a restarted container counts them from 1 again), so that lock is gone too. Such a
// lock can be removed at once (CancelLock). A lock of another host is never gone by this rule:
// its process cannot be checked from here (the watcher's Lease rule covers the operator's own
// earlier pods).
func (l Lock) OwnerGone() bool {
	host, err := os.Hostname()
	if err != nil || l.Host != host {
		return false
	}
	if !processAlive(l.Pid) {
		return true
	}
	started, ok := processStart(l.Pid)
	// One second of slack: the lock's time and the start time come from two clocks' readings
	// (the start time is counted in clock ticks since boot).
	return ok && !l.Created.IsZero() && started.After(l.Created.Add(time.Second))
}

// processAlive reports whether pid runs on this host (signal 0 checks without signalling).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// lockLine matches the DIY backend's report of one lock (pkg/backend/diy/lock.go):
// "  <url>: created by <user>@<host> (pid <pid>) at <RFC 3339 time>".
var lockLine = regexp.MustCompile(`created by (\S*)@(\S+) \(pid (\d+)\) at (\S+)`)

// parseLocks reads every lock out of a CLI error message; an unparsable line is skipped.
func parseLocks(msg string) []Lock {
	var locks []Lock
	seen := map[string]bool{}
	for _, m := range lockLine.FindAllStringSubmatch(msg, -1) {
		if seen[m[0]] { // the CLI's message appears in both stdout and stderr
			continue
		}
		seen[m[0]] = true
		pid, err := strconv.Atoi(m[3])
		if err != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339, m[4])
		if err != nil {
			continue
		}
		locks = append(locks, Lock{User: m[1], Host: m[2], Pid: pid, Created: t})
	}
	return locks
}

// CancelLock removes the stack's locks (`pulumi cancel`). Only call it for a lock whose owner is
// known to be gone: an update still running would go on without a lock, and two updates at once
// can corrupt the state.
//
// With an engine host (Config.EngineHost) the host does it (protocol.OpUnlock), on any DIY
// backend, also for a stack that does not exist: a DIY backend's `stack init` and `stack rm`
// take the lock too (pkg/backend/diy CreateStack, RemoveStack), so a process killed inside
// either leaves the lock of a missing stack, which the CLI's `pulumi cancel` refuses. On a
// file:// backend the host first removes the stack's torn metadata sidecars: the process that
// left the lock may have died while writing one, and then nothing can even read the stack
// ("failed to load checkpoint: EOF"). Each file removed is logged as a warning with slog's
// default logger.
//
// Without one (Pulumi Cloud, or no engine host configured) it is the CLI's `pulumi cancel`, which
// needs the stack to exist, after the same repair of a file:// backend's sidecars. Errors: the
// engine host's or the CLI's, classified (classifyStack).
func (m *Manager) CancelLock(ctx context.Context, stackName string) error {
	if m.engineHost == nil {
		return m.cancelLockCLI(ctx, stackName)
	}
	r, err := m.hostRequest(ctx, protocol.Request{Op: protocol.OpUnlock, Stack: stackName})
	if err == nil && r.Code != 0 {
		err = newReplyError("cancel", r)
	}
	for _, f := range r.Repaired {
		slog.Warn("removed a torn metadata file of the stack, left by a killed pulumi process", "stack", stackName, "file", f)
	}
	if err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	return nil
}

// cancelLockCLI is CancelLock without an engine host: `pulumi cancel` on the stack, after the
// stack's torn metadata sidecars on a file:// backend are removed (repairSidecars), as the
// engine host's unlock does: `pulumi cancel` must read the stack.
func (m *Manager) cancelLockCLI(ctx context.Context, stackName string) error {
	m.repairSidecars(stackName)
	st, err := m.open(ctx, stackName, false)
	if err != nil && auto.IsSelectStack404Error(err) {
		return fmt.Errorf("cancel lock of stack %s: the stack does not exist, and `pulumi cancel` refuses a missing stack: "+
			"run the operator with its engine host (%s) to remove it, or delete the stack's lock files from the backend", stackName, EngineHost)
	}
	if err != nil {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if err := st.Cancel(ctx); err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	return nil
}

// heldLocks asks the engine host which locks are held on stackName (protocol.OpLocks): held is
// true when a lock file exists, locks are those that parse. ok is false when there is no engine
// host or it could not tell (then whether a lock is held is unknown). It waits at most
// lockLookupTimeout: it runs on an error path, which must not hang on a stuck host.
func (m *Manager) heldLocks(stackName string) (held bool, locks []Lock, ok bool) {
	if m.engineHost == nil {
		return false, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockLookupTimeout)
	defer cancel()
	r, err := m.hostRequest(ctx, protocol.Request{Op: protocol.OpLocks, Stack: stackName})
	if err != nil || r.Code != 0 {
		return false, nil, false
	}
	return r.Held, fromProtocolLocks(r.Locks), true
}

// lockLookupTimeout bounds heldLocks.
const lockLookupTimeout = 30 * time.Second

// fromProtocolLocks converts the engine host's locks.
func fromProtocolLocks(in []protocol.Lock) []Lock {
	var out []Lock
	for _, l := range in {
		out = append(out, Lock{User: l.Username, Host: l.Hostname, Pid: l.Pid, Created: l.Timestamp})
	}
	return out
}
