package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Destroy deletes every resource of the stack (`pulumi destroy`) and then removes the stack
// from the backend with everything the backend keeps of it (removeStack: `pulumi destroy
// --remove` would leave its backups behind). The stack is removed only after the destroy
// succeeded, so a failed destroy leaves the state that records what still exists; a process
// killed between the two leaves an empty stack, which the next Destroy removes. A stack that does not exist is already destroyed: Destroy runs
// no destroy, only makes sure no lock of the stack is left behind (sweepRemoved), and returns
// a Result with StackMissing set, no changes and nil, or ErrLocked when a dead update's lock
// remains.
func (m *Manager) Destroy(ctx context.Context, stackName string, opts RunOptions) (Result, error) {
	res := Result{Operation: "destroy", Start: time.Now()}
	// A pending create left by a killed up is an object the destroy would not delete: ready
	// (in operate) adopts it first.
	_, found, err := m.operate(ctx, stackName, false, &res, func() (engineOutcome, error) {
		out, err := m.engine(ctx, stackName, "destroy", emptyProgram, []string{"--yes", "--skip-preview"}, opts)
		if err != nil {
			return out, err
		}
		return out, m.removeStack(ctx, stackName)
	})
	if err != nil {
		return res, err
	}
	if !found {
		err = m.sweepRemoved(ctx, stackName)
		res.End = time.Now()
		res.StackMissing = true
		return res, err
	}
	if err := m.forget(stackName); err != nil {
		return res, err
	}
	return res, nil
}

// sweepRemoved makes sure a stack that does not exist leaves no lock behind. A DIY backend's
// `stack rm` takes the stack's lock (pkg/backend/diy RemoveStack) and a process killed after
// the stack is gone but before the unlock leaves a lock that no later operation would meet,
// e.g. a destroy killed in its final `stack rm`. So the empty stack is created again and
// removed: the removal either takes and releases the lock, or fails with ErrLocked naming the
// dead owner, for the caller's stale-lock handling (CancelLock then finds the stack). Costs two
// CLI runs, only when a destroy finds no stack.
func (m *Manager) sweepRemoved(ctx context.Context, stackName string) error {
	if _, err := m.open(ctx, stackName, true); err != nil {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	if err := m.removeStack(ctx, stackName); err != nil {
		return fmt.Errorf("remove stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	return m.forget(stackName)
}

// forget drops what this Manager keeps of a stack removed from the backend: its settled
// record and its count of unpruned updates (a stack of the same name made later starts afresh)
// and its workspace directory.
func (m *Manager) forget(stackName string) error {
	m.recordPending(stackName)
	m.unprunedMu.Lock()
	delete(m.unpruned, stackName)
	m.unprunedMu.Unlock()
	if err := os.RemoveAll(filepath.Join(m.cfg.WorkRoot, stackName)); err != nil {
		return fmt.Errorf("remove workspace directory of stack %s: %w", stackName, err)
	}
	return nil
}
