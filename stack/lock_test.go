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

// A second update of a stack that is being updated gets ErrLocked, naming the holder, not a
// generic failure and never success. A torn checkpoint read is ErrLocked only while the lock
// is held, as the engine host reads the locks; without an engine host it is a plain failure.
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
		oe.Locks[0].Pid <= 0 || time.Since(oe.Locks[0].Created) > time.Minute {
		t.Fatalf("concurrent up = %v (%+v), want ErrLocked naming one lock of this host taken just now", err, oe)
	}
	holder := oe.Locks[0]

	torn := errors.New("failed to run update: exit status 255\ncode: 255\nstdout: \nstderr: error: " + tornRead + "\n")
	if err := m.classifyStack(name, torn); errors.Is(err, ErrLocked) || err == nil {
		t.Fatalf("torn read without an engine host to read the locks = %v, want a plain failure", err)
	}
	attachHost(t, m)
	err = m.classifyStack(name, torn)
	if oe = nil; !errors.As(err, &oe) || !errors.Is(err, ErrLocked) || len(oe.Locks) != 1 || !sameLock(oe.Locks[0], holder) {
		t.Fatalf("torn read while %+v holds the lock = %v, want ErrLocked naming it", holder, err)
	}

	if err := release(); err != nil {
		t.Fatalf("the lock holder's up failed: %v", err)
	}
	if err := m.classifyStack(name, torn); errors.Is(err, ErrLocked) || err == nil {
		t.Fatalf("torn read with no lock held = %v, want a plain failure", err)
	}
	if res, err := m.Up(ctx, name, program("z", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "z" {
		t.Fatalf("up after the lock was released = %+v, %v", res, err)
	}
}

// sameLock compares two reports of a lock; the CLI's message has the time to the second, the
// lock file to the nanosecond.
func sameLock(a, b Lock) bool {
	return a.User == b.User && a.Host == b.Host && a.Pid == b.Pid && a.Created.Truncate(time.Second).Equal(b.Created.Truncate(time.Second))
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
// CancelLock removes it, with the engine host or with the CLI's `pulumi cancel`; then updates
// work again.
func TestStaleLockCancel(t *testing.T) {
	for _, host := range []bool{true, false} {
		t.Run(map[bool]string{true: "engine host", false: "CLI"}[host], func(t *testing.T) {
			m, _ := newManager(t)
			name, _ := m.StackName("ns", "stale")
			ctx := context.Background()
			lock := killedLock(t, m, name)
			if host {
				attachHost(t, m)
			}
			if _, err := m.Up(ctx, name, program("z", 0), RunOptions{}); !errors.Is(err, ErrLocked) {
				t.Fatalf("up after the kill = %v, want ErrLocked (the lock is left behind)", err)
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

func TestParseLocks(t *testing.T) {
	msg := "stderr: error: the stack is currently locked by 2 lock(s). Either wait...\n" +
		"  file:///b/.pulumi/locks/o/p/s/1.json?no_tmp_dir=true: created by root@pod-a (pid 42) at 2026-11-22T12:00:00Z\n" +
		"  file:///b/.pulumi/locks/o/p/s/2.json: created by @host-b (pid 7) at 2026-11-22T12:01:00Z\n" +
		"  file:///b/.pulumi/locks/o/p/s/3.json: created by x@y (pid 9) at not-a-time\n"
	got := parseLocks(msg + msg)
	if len(got) != 2 || got[0].Host != "pod-a" || got[0].Pid != 42 || got[0].User != "root" || got[0].ID != "1" ||
		got[1].Host != "host-b" || got[1].Created.Minute() != 1 || got[1].ID != "2" {
		t.Fatalf("parseLocks = %+v", got)
	}
}

// A `stack rm` killed after it removed the stack but before it released the stack's lock (DIY
// RemoveStack locks; so does `stack init`) leaves a lock of a stack that does not exist.
// Destroy must not call such a stack destroyed while its lock stays, and an up must not wait
// for it forever: both report the lock (ErrLocked, with the dead owner); CancelLock removes it
// with the engine host although `pulumi cancel` refuses a missing stack (without the host it
// says so and what to do); then both succeed and no lock is left. The
// situation is made with a real lock of a killed pulumi process, and the stack's checkpoint
// then deleted as that `stack rm` had done.
func TestLockOfRemovedStack(t *testing.T) {
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
	if err := m.CancelLock(ctx, name, []string{lock.ID}, []Lock{lock}); err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), EngineHost) {
		t.Fatalf("CancelLock of a missing stack without the engine host = %v; want an error saying the stack does not exist and naming %s", err, EngineHost)
	}
	attachHost(t, m)
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
// stack's checkpoint left empty and the lock taken. An up meets the lock (the CLI's `stack init`
// names the holder, though it cannot read the stack); a destroy's `stack select` meets the torn
// read, a plain failure (no lock can be read here) that removes the sidecar, and its retry meets
// the lock. CancelLock (`pulumi cancel`, after the same repair) then removes the lock, and the
// stack keeps its state.
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
			if tc.first == "destroy" {
				err := run()
				if err == nil || errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "EOF") || !strings.Contains(err.Error(), "removed 1 torn metadata file") {
					t.Fatalf("destroy with a torn sidecar = %v, want the plain EOF failure saying the sidecar was removed", err)
				}
				if _, err := os.Stat(sidecar); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("torn sidecar after the destroy: %v, want removed", err)
				}
			}
			if tc.first != "" {
				err := run()
				var oe *OperationError
				if !errors.As(err, &oe) || !errors.Is(err, ErrLocked) || len(oe.Locks) != 1 || !sameLock(oe.Locks[0], holder) {
					t.Fatalf("%s = %v, want ErrLocked naming the killed holder %+v", tc.first, err, holder)
				}
			}
			cancelAndKeep(t, m, backend, sidecar, name, holder)
		})
	}
}
