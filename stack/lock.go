package stack

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// Lock is one lock on a stack as a DIY backend reports it: which lock file, who took it, where
// and when.
type Lock struct {
	// ID names the lock file (its name without ".json"): the random lock ID of the backend
	// instance that took it, so that CancelLock removes exactly this lock. "" when the report did
	// not name the file.
	ID string
	// User and Host name the process that took the lock; Pid is its process id on Host, in a PID
	// namespace the lock does not say.
	User string
	Host string
	Pid  int
	// Created is when the lock was taken, by the taker's wall clock.
	Created time.Time
}

// HolderGone says whether lock l of stackName was taken by a pulumi process this operator (this
// process, or an earlier one with the same workspace root) started and that has ended, proven
// by that process's holder record (holder.go), not by a host name, a pid or a clock: gone, with
// why for people. alive reports that the process that took it runs (the lock is live). Neither:
// the lock is not provably one of this operator's (a laptop's or CI's `pulumi up`, another pod).
func (m *Manager) HolderGone(l Lock, stackName string) (gone, alive bool, why string) {
	if m.procs.holders == nil {
		return false, false, ""
	}
	return m.procs.holders.judge(l, stackName)
}

// lockLine matches the DIY backend's report of one lock (pkg/v3/backend/diy/lock.go):
// "  <url>/<lock id>.json[?<query>]: created by <user>@<host> (pid <pid>) at <RFC 3339 time>"
// (a file:// URL keeps the backend's query, e.g. ?no_tmp_dir=true).
var lockLine = regexp.MustCompile(`(?:/([^/\s?]+)\.json(?:\?\S*)?)?: created by (\S*)@(\S+) \(pid (\d+)\) at (\S+)`)

// parseLocks reads every lock out of a CLI error message; an unparsable line is skipped.
func parseLocks(msg string) []Lock {
	var locks []Lock
	seen := map[string]bool{}
	for _, m := range lockLine.FindAllStringSubmatch(msg, -1) {
		if seen[m[0]] { // the CLI's message appears in both stdout and stderr
			continue
		}
		seen[m[0]] = true
		pid, err := strconv.Atoi(m[4])
		if err != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339, m[5])
		if err != nil {
			continue
		}
		locks = append(locks, Lock{ID: m[1], User: m[2], Host: m[3], Pid: pid, Created: t})
	}
	return locks
}

// CancelLock removes the locks of stackName that ids names (Lock.ID): exactly those, so that a
// lock taken since they were judged stays. Only call it for locks whose owners are known to be
// gone: an update still running would go on without a lock, and two updates at once can corrupt
// the state.
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
// removes every lock of the stack and needs the stack to exist, after the same repair of a
// file:// backend's sidecars: so it is refused unless the stack's locks are exactly ids (read
// from the CLI's own report of them, allLocks). Errors: an empty ids, that refusal, the engine
// host's or the CLI's, classified (classifyStack).
func (m *Manager) CancelLock(ctx context.Context, stackName string, ids []string, allLocks []Lock) error {
	if len(ids) == 0 || slices.Contains(ids, "") {
		return fmt.Errorf("cancel lock of stack %s: no lock named (a lock whose file is not known is never removed)", stackName)
	}
	if m.engineHost == nil {
		if len(allLocks) != len(ids) {
			return fmt.Errorf("cancel lock of stack %s: it holds %d locks and only %d may be removed, and `pulumi cancel` removes them all: "+
				"run the operator with its engine host (%s), which removes one lock, or remove the lock files by hand", stackName, len(allLocks), len(ids), EngineHost)
		}
		return m.cancelLockCLI(ctx, stackName)
	}
	r, err := m.hostRequest(ctx, protocol.Request{Op: protocol.OpUnlock, Stack: stackName, Locks: ids})
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

// LockIDs lists the IDs of every lock held now on a stack of the Manager's project, through the
// engine host (protocol.OpLocks); ok is false when there is none or it could not tell. A new
// leader takes this snapshot when it acquires the Lease: the locks of earlier leaders it may
// remove are among these, never one taken later.
func (m *Manager) LockIDs(ctx context.Context) (ids map[string]bool, ok bool) {
	if m.engineHost == nil {
		return nil, false
	}
	r, err := m.hostRequest(ctx, protocol.Request{Op: protocol.OpLocks})
	if err != nil || r.Code != 0 {
		return nil, false
	}
	ids = map[string]bool{}
	for _, l := range r.Locks {
		ids[l.ID] = true
	}
	return ids, true
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
		out = append(out, Lock{ID: l.ID, User: l.Username, Host: l.Hostname, Pid: l.Pid, Created: l.Timestamp})
	}
	return out
}
