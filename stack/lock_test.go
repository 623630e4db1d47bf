package stack

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// holdLock holds the lock of the existing stack name with a blocked up (testenv.HoldLock).
func holdLock(t *testing.T, m *Manager, name string) (release func() error) {
	t.Helper()
	return testenv.HoldLock(t, func(ctx context.Context, prog pulumi.RunFunc) error {
		_, err := m.Up(ctx, name, prog, RunOptions{})
		return err
	})
}

// A second update of a stack that is being updated gets ErrLocked, naming the holder (its lock
// file included), not a generic failure and never success. A failure whose text names no cause
// (an empty checkpoint read: a torn read) is ErrLocked while the lock is held and a plain failure
// once it is released, alike without an engine host (the pinned CLI's diagnose command) and with
// one: the diagnosis reads the lock files, not the text.
func TestLockedStack(t *testing.T) {
	m, _ := newManager(t)
	name, _ := m.StackName("ns", "locked")
	ctx := context.Background()
	if _, err := m.Up(ctx, name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, m, name)
	_, err := m.Up(ctx, name, program("z", 0), RunOptions{})
	if err == nil {
		t.Fatal("an up succeeded while another update held the stack's lock")
	}
	var oe *OperationError
	host, _ := os.Hostname()
	if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 || oe.Locks[0].Host != host ||
		oe.Locks[0].Pid <= 0 || time.Since(oe.Locks[0].Created) > time.Minute || oe.Locks[0].ID == "" {
		t.Fatalf("concurrent up = %v (%+v), want ErrLocked naming one lock (its file too) of this host taken just now", err, oe)
	}
	holder := oe.Locks[0]

	torn := errors.New("failed to run update: exit status 255\ncode: 255\nstdout: \nstderr: error: failed to load checkpoint: EOF\n")
	err = m.classifyStack(ctx, name, torn)
	if oe = nil; !errors.As(err, &oe) || !errors.Is(err, ErrLocked) || len(oe.Locks) != 1 || !sameLock(oe.Locks[0], holder) {
		t.Fatalf("torn read while %+v holds the lock, no engine host = %v, want ErrLocked naming it", holder, err)
	}
	attachHost(t, m)
	err = m.classifyStack(ctx, name, torn)
	if oe = nil; !errors.As(err, &oe) || !errors.Is(err, ErrLocked) || len(oe.Locks) != 1 || !sameLock(oe.Locks[0], holder) {
		t.Fatalf("torn read while %+v holds the lock, engine host = %v, want ErrLocked naming it", holder, err)
	}

	if err := release(); err != nil {
		t.Fatalf("the lock holder's up failed: %v", err)
	}
	if err := m.classifyStack(ctx, name, torn); errors.Is(err, ErrLocked) || err == nil {
		t.Fatalf("torn read with no lock held = %v, want a plain failure", err)
	}
	if res, err := m.Up(ctx, name, program("z", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "z" {
		t.Fatalf("up after the lock was released = %+v, %v", res, err)
	}
}

// sameLock compares two reports of a lock: the same lock file, holder and time.
func sameLock(a, b Lock) bool {
	return a.ID == b.ID && a.User == b.User && a.Host == b.Host && a.Pid == b.Pid && a.Created.Equal(b.Created)
}

// killedLock creates stack name with one up, holds its lock with a second up (holdLock),
// SIGKILLs that up's pulumi process (as a crashed pod would), and returns the lock it left
// behind.
func killedLock(t *testing.T, m *Manager, name string) Lock {
	t.Helper()
	ctx := context.Background()
	if _, err := m.Up(ctx, name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, m, name)
	_, err := m.Up(ctx, name, program("z", 0), RunOptions{})
	var oe *OperationError
	if err == nil {
		t.Fatal("an up succeeded while another update held the stack's lock")
	}
	if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 {
		t.Fatalf("up while the lock is held = %v, want ErrLocked naming one lock", err)
	}
	lock := oe.Locks[0]
	p, err := os.FindProcess(lock.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("kill the lock holder (pid %d): %v", lock.Pid, err)
	}
	if err := release(); err == nil {
		t.Fatal("the killed update reported success")
	}
	return lock
}

// A lock left by a pulumi process that was killed (SIGKILL, as a crashed pod) stays until
// CancelLock removes it, with the engine host, without one (the pinned CLI's request command), or
// with a CLI that has no request command (`pulumi cancel`, which then removes the stack's every
// lock; nothing diagnoses such a CLI's failure, which is ErrLocked only where the Automation API's
// own test finds it); then updates work again.
func TestStaleLockCancel(t *testing.T) {
	for _, mode := range []string{"engine host", "CLI", "pulumi cancel"} {
		t.Run(mode, func(t *testing.T) {
			m, _ := newManager(t)
			name, _ := m.StackName("ns", "stale")
			ctx := context.Background()
			lock := killedLock(t, m, name)
			switch mode {
			case "engine host":
				attachHost(t, m)
			case "pulumi cancel":
				cliOf(m).noOperatorRequests.Store(true) // as a CLI without the request command
			}
			_, err := m.Up(ctx, name, program("z", 0), RunOptions{})
			if err == nil || (mode != "pulumi cancel" && !errors.Is(err, ErrLocked)) {
				t.Fatalf("up after the kill = %v, want ErrLocked (a failure, with nothing to diagnose it) (the lock is left behind)", err)
			}
			if err := m.CancelLock(ctx, name, []string{lock.ID}, []Lock{lock}); err != nil {
				t.Fatalf("CancelLock: %v", err)
			}
			res, err := m.Up(ctx, name, program("z", 0), RunOptions{})
			if err != nil || res.Outputs["greeting"] != "z" {
				t.Fatalf("up after CancelLock = %+v, %v", res, err)
			}
		})
	}
}

// A `stack rm` killed after it removed the stack but before it released the stack's lock (DIY
// RemoveStack locks; so does `stack init`) leaves a lock of a stack that does not exist.
// Destroy must not call such a stack destroyed while its lock stays, and an up must not wait
// for it forever: both report the lock (ErrLocked, with the dead owner); CancelLock removes it,
// with the engine host or without (the pinned CLI's request command), although `pulumi cancel`
// refuses a missing stack (with a CLI that has no request command it says so and what to do);
// then both succeed and no lock is left. The situation is made with a real lock of a killed
// pulumi process, and the stack's checkpoint then deleted as that `stack rm` had done.
func TestLockOfRemovedStack(t *testing.T) {
	for _, host := range []bool{true, false} {
		t.Run(map[bool]string{true: "engine host", false: "CLI"}[host], func(t *testing.T) {
			m, backend := newManager(t)
			name, _ := m.StackName("ns", "removed")
			ctx := context.Background()
			lock := killedLock(t, m, name)
			checkpoints, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", name+".json*"))
			if len(checkpoints) == 0 {
				t.Fatal("no checkpoint file to remove")
			}
			for _, f := range checkpoints {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			if ok, err := m.Exists(ctx, name); err != nil || ok {
				t.Fatalf("Exists after the checkpoint is gone = %v, %v; want false", ok, err)
			}
			if host {
				attachHost(t, m)
			}
			for _, op := range []string{"destroy", "up"} {
				var err error
				if op == "destroy" {
					_, err = m.Destroy(ctx, name, RunOptions{})
				} else {
					_, err = m.Up(ctx, name, program("w", 0), RunOptions{})
				}
				var oe *OperationError
				if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 || oe.Locks[0].Pid != lock.Pid {
					t.Fatalf("%s of the removed stack = %v, want ErrLocked naming pid %d", op, err, lock.Pid)
				}
			}
			if !host {
				// As with a CLI that has no request command: `pulumi cancel`, which refuses.
				cliOf(m).noOperatorRequests.Store(true)
				if err := m.CancelLock(ctx, name, []string{lock.ID}, []Lock{lock}); err == nil || !strings.Contains(err.Error(), "does not exist") ||
					!strings.Contains(err.Error(), PinnedCLIVersion) {
					t.Fatalf("CancelLock of a missing stack with `pulumi cancel` = %v; want an error saying the stack does not exist and naming the pinned CLI %s",
						err, PinnedCLIVersion)
				}
				cliOf(m).noOperatorRequests.Store(false)
			}
			if err := m.CancelLock(ctx, name, []string{lock.ID}, []Lock{lock}); err != nil {
				t.Fatalf("CancelLock: %v", err)
			}
			if ok, err := m.Exists(ctx, name); err != nil || ok {
				t.Fatalf("Exists after CancelLock = %v, %v; want false (the stack stays removed)", ok, err)
			}
			if res, err := m.Up(ctx, name, program("w", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "w" {
				t.Fatalf("up after CancelLock = %+v, %v", res, err)
			}
			if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
				t.Fatalf("destroy after CancelLock: %v", err)
			}
			if locks, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "locks", "*", "kindcustomhttp", name, "*.json")); len(locks) > 0 {
				t.Errorf("locks left: %v", locks)
			}
			if ok, err := m.Exists(ctx, name); err != nil || ok {
				t.Errorf("Exists after the destroy = %v, %v; want false", ok, err)
			}
		})
	}
}

// A pulumi process killed while gocloud's fileblob rewrote the metadata sidecar of a stack's
// checkpoint leaves the sidecar empty and the lock taken; the CLI then fails on the stack with
// "failed to load checkpoint: EOF" (without the repair the watcher's CancelLock cannot select
// the stack, and the object stays locked forever). The engine host reads that as the lock it is
// (ErrLocked), and CancelLock has it repair the sidecar and remove the lock; the stack keeps its
// state.
func TestCancelLockTornSidecar(t *testing.T) {
	m, backend := newManager(t)
	name, _ := m.StackName("ns", "torn")
	ctx := context.Background()
	lock := killedLock(t, m, name)
	attachHost(t, m)
	sidecar := filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", name+".json.attrs")
	if _, err := os.Stat(sidecar); err != nil {
		t.Fatalf("the checkpoint's sidecar (from gocloud's fileblob): %v", err)
	}
	if err := os.Truncate(sidecar, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, name, program("z", 0), RunOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("up with a torn sidecar and a dead lock = %v, want ErrLocked", err)
	}
	if _, err := m.Exists(ctx, name); err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("Exists with a torn sidecar = %v, want the CLI's EOF failure (the situation this test is about)", err)
	}
	cancelAndKeep(t, m, backend, sidecar, name, lock)
}

// cancelAndKeep runs CancelLock on the stack name, whose lock a killed process left and the
// sidecar of whose checkpoint it tore, then checks that the sidecar and the lock are gone and
// that an up keeps the stack's resources.
func cancelAndKeep(t *testing.T, m *Manager, backend, sidecar, name string, lock Lock) {
	t.Helper()
	if err := m.CancelLock(context.Background(), name, []string{lock.ID}, []Lock{lock}); err != nil {
		t.Fatalf("CancelLock: %v", err)
	}
	if _, err := os.Stat(sidecar); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("torn sidecar after CancelLock: %v, want removed", err)
	}
	if locks, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "locks", "*", "kindcustomhttp", name, "*.json")); len(locks) > 0 {
		t.Fatalf("locks left: %v", locks)
	}
	res, err := m.Up(context.Background(), name, program("z", 0), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "z" {
		t.Fatalf("up after CancelLock = %+v, %v", res, err)
	}
	if res.Changes["create"] != 0 || res.Changes["same"] == 0 {
		t.Errorf("up after CancelLock changed %v; want the stack's resources kept (nothing created)", res.Changes)
	}
}

// Without an engine host (every run a pulumi CLI process) the same kill: the sidecar of the
// stack's checkpoint left empty and the lock taken. An up (the CLI's `stack init` cannot read the
// stack) and a destroy (its `stack select` meets the torn read) both fail; the diagnosis, the
// pinned CLI's `pulumi operator-request`, reads the lock files as the engine host would and
// names the holder (ErrLocked), and leaves the sidecar alone while a lock is held. CancelLock
// (the same command: the repair, then that one lock) then removes the lock, and the stack keeps
// its state.
func TestTornSidecarWithoutEngineHost(t *testing.T) {
	for _, tc := range []struct {
		name, object string
		first        string // "up", "destroy" or "" (CancelLock first)
	}{
		{name: "an up meets it first", object: "torn-up", first: "up"},
		{name: "a destroy meets it first", object: "torn-destroy", first: "destroy"},
		{name: "CancelLock meets it first", object: "torn-cancel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, backend := newManager(t)
			name, _ := m.StackName("ns", tc.object)
			ctx := context.Background()
			holder := killedLock(t, m, name)
			sidecar := filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", name+".json.attrs")
			if err := os.Truncate(sidecar, 0); err != nil {
				t.Fatalf("the checkpoint's sidecar (from gocloud's fileblob): %v", err)
			}
			run := func() error {
				if tc.first == "destroy" {
					_, err := m.Destroy(ctx, name, RunOptions{})
					return err
				}
				_, err := m.Up(ctx, name, program("z", 0), RunOptions{})
				return err
			}
			if tc.first != "" {
				err := run()
				var oe *OperationError
				if !errors.As(err, &oe) || !errors.Is(err, ErrLocked) || len(oe.Locks) != 1 || !sameLock(oe.Locks[0], holder) {
					t.Fatalf("%s = %v, want ErrLocked naming the killed holder %+v", tc.first, err, holder)
				}
				if fi, err := os.Stat(sidecar); err != nil || fi.Size() != 0 {
					t.Fatalf("torn sidecar after the %s: %v, want it left (a lock is held)", tc.first, err)
				}
			}
			cancelAndKeep(t, m, backend, sidecar, name, holder)
		})
	}
}

// heldLocks asks the engine host which locks are held on stackName (protocol.OpLocks): held is
// true when a lock file exists, locks are those that parse. ok is false when there is no engine
// host or it could not tell (then whether a lock is held is unknown). It waits at most
// diagnoseTimeout.
func (m *Manager) heldLocks(stackName string) (held bool, locks []Lock, ok bool) {
	if _, ok := m.eng.(*hostEngine); !ok {
		return false, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), diagnoseTimeout)
	defer cancel()
	r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpLocks, Stack: stackName})
	if err != nil || r.Code != 0 {
		return false, nil, false
	}
	return r.Held, fromProtocolLocks(r.Locks), true
}
