package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// Lock is one lock on a stack as a DIY backend reports it: which lock file, who took it, where
// and when.
type Lock struct {
	// ID names the lock file (its name without ".json"): the random lock ID of the backend
	// instance that took it, so that CancelLock removes exactly this lock.
	ID string
	// User and Host name the process that took the lock; Pid is its process id on Host, in a PID
	// namespace the lock does not say.
	User string
	Host string
	Pid  int
	// Created is when the lock was taken, by the taker's wall clock.
	Created time.Time
	// Stack is the stack it locks, in Manager.Locks' listing of every stack; empty otherwise.
	Stack string
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

// CancelLock removes the locks of stackName that ids names (Lock.ID): exactly those, so that a
// lock taken since they were judged stays. Only call it for locks whose owners are known to be
// gone: an update still running would go on without a lock, and two updates at once can corrupt
// the state.
//
// The engine host's code does it (protocol.OpUnlock through engine.request: the engine host, or without
// one a pinned CLI process), on any DIY backend, also for a stack that does not exist: a DIY
// backend's `stack init` and `stack rm` take the lock too (pkg/backend/diy CreateStack,
// RemoveStack), so a process killed inside either leaves the lock of a missing stack, which the
// CLI's `pulumi cancel` refuses. On a file:// backend it first removes the stack's torn metadata
// sidecars: the process that left the lock may have died while writing one, and then nothing can
// even read the stack ("failed to load checkpoint: EOF"). Each file removed is logged as a warning
// with slog's default logger.
//
// Where no request can be made (errNoRequests: Pulumi Cloud, or a pulumi CLI that is not this
// project's build) it is the CLI's `pulumi cancel`, which removes every lock of the stack and needs
// the stack to exist, after the same repair of a file:// backend's sidecars: so it is refused
// unless the stack's locks are exactly ids (allLocks: the locks an ErrLocked named). Errors: an
// empty ids, that refusal, the request's or the CLI's, classified (classifyStack).
func (m *Manager) CancelLock(ctx context.Context, stackName string, ids []string, allLocks []Lock) error {
	if len(ids) == 0 || slices.Contains(ids, "") {
		return fmt.Errorf("cancel lock of stack %s: no lock named (a lock whose file is not known is never removed)", stackName)
	}
	r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpUnlock, Stack: stackName, Locks: ids})
	if errors.Is(err, errNoRequests) {
		if len(allLocks) != len(ids) {
			return fmt.Errorf("cancel lock of stack %s: it holds %d locks and only %d may be removed, and `pulumi cancel` removes them all: "+
				"run the operator with the project's pulumi CLI (%s), which removes one lock, or remove the lock files by hand",
				stackName, len(allLocks), len(ids), PinnedCLIVersion)
		}
		return m.cancelLockCLI(ctx, stackName)
	}
	if err == nil && r.Code != 0 {
		err = newReplyError("cancel", r)
	}
	for _, f := range r.Repaired {
		slog.Warn("removed a torn metadata file of the stack, left by a killed pulumi process", "stack", stackName, "file", f)
	}
	if err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	return nil
}

// cancelLockCLI is CancelLock where no request can be made: `pulumi cancel` on the stack, after the
// stack's torn metadata sidecars on a file:// backend are removed (repairSidecars), as the
// engine host's unlock does: `pulumi cancel` must read the stack.
func (m *Manager) cancelLockCLI(ctx context.Context, stackName string) error {
	m.repairSidecars(stackName)
	st, err := m.open(ctx, stackName, false)
	if err != nil && auto.IsSelectStack404Error(err) {
		return fmt.Errorf("cancel lock of stack %s: the stack does not exist, and `pulumi cancel` refuses a missing stack: "+
			"run the operator with the project's pulumi CLI (%s) to remove it, or delete the stack's lock files from the backend", stackName, PinnedCLIVersion)
	}
	if err != nil {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	if err := st.Cancel(ctx); err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	return nil
}

// Locks lists every lock held now on a stack of the Manager's project, each with the stack it
// locks (Lock.Stack), read by the engine host's code (protocol.OpLocks through engine.request); ok
// is false when no request can be made or it could not tell. A new leader takes this snapshot when
// it acquires the Lease: the locks of earlier leaders it may remove are among these, never one
// taken later, and their stacks are those whose operation the change of leader cut short.
func (m *Manager) Locks(ctx context.Context) (locks []Lock, ok bool) {
	r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpLocks})
	if err != nil || r.Code != 0 {
		return nil, false
	}
	return fromProtocolLocks(r.Locks), true
}

// fromProtocolLocks converts the engine host's locks.
func fromProtocolLocks(in []protocol.Lock) []Lock {
	var out []Lock
	for _, l := range in {
		out = append(out, Lock{ID: l.ID, User: l.Username, Host: l.Hostname, Pid: l.Pid, Created: l.Timestamp, Stack: l.Stack})
	}
	return out
}
