package stack

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// processAlive reports whether pid runs on this host (signal 0 checks without signalling).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// startHeld starts command args through a processSet with holder records under root (stack is its
// stack) and returns the process and its exited.
func startHeld(t *testing.T, s *processSet, stack string, args ...string) (*exec.Cmd, func(bool)) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	exited, err := s.start(cmd, stack)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, exited
}

// HolderGone judges a lock by the holder record of the process that took it, never by the host
// name and pid alone: a lock whose pid no longer runs here but that no process of this operator
// took (a host-network pod of another operator, or another cluster's pod of the same name: the
// same host name, another PID namespace) is not gone; a lock of a process the operator started
// is gone once that process has ended (its flock free), also for a later Manager on the same
// workspace root (a restarted container), and alive while it runs; a record matches only its
// own pid, the locks taken while it ran, and a CLI run's own stack.
func TestHolderGone(t *testing.T) {
	root := t.TempDir()
	host, _ := os.Hostname()
	s := &processSet{holders: newHolders(root)}

	running, _ := startHeld(t, s, "", "sleep", "60")
	killed, exitedKilled := startHeld(t, s, "stack-a", "sleep", "60")
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	exitedKilled(false) // as trackedCommand.Run records a failed run
	clean, exitedClean := startHeld(t, s, "stack-b", "true")
	_ = clean.Wait()
	exitedClean(true)

	dead := exec.Command("true") // a pid that ran here, never through the operator
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, tc := range map[string]struct {
		l           Lock
		stack       string
		gone, alive bool
	}{
		"killed CLI run, its stack":            {Lock{Host: host, Pid: killed.Process.Pid, Created: now}, "stack-a", true, false},
		"killed CLI run, another stack":        {Lock{Host: host, Pid: killed.Process.Pid, Created: now}, "stack-x", false, false},
		"killed, lock taken before it started": {Lock{Host: host, Pid: killed.Process.Pid, Created: now.Add(-time.Hour)}, "stack-a", false, false},
		"killed, lock taken after it ended":    {Lock{Host: host, Pid: killed.Process.Pid, Created: now.Add(time.Hour)}, "stack-a", false, false},
		"engine host still running, any stack": {Lock{Host: host, Pid: running.Process.Pid, Created: now}, "stack-z", false, true},
		"ended cleanly: no record":             {Lock{Host: host, Pid: clean.Process.Pid, Created: now}, "stack-b", false, false},
		"dead pid of another PID namespace":    {Lock{Host: host, Pid: dead.Process.Pid, Created: now}, "stack-a", false, false},
		"another host with a recorded pid":     {Lock{Host: "elsewhere", Pid: killed.Process.Pid, Created: now}, "stack-a", false, false},
		"no time (an unparsed lock)":           {Lock{Host: host, Pid: killed.Process.Pid}, "stack-a", false, false},
	} {
		t.Run(name, func(t *testing.T) {
			gone, alive, why := s.holders.judge(tc.l, tc.stack)
			if gone != tc.gone || alive != tc.alive {
				t.Errorf("judge(%+v, %s) = gone %v, alive %v (%q); want gone %v, alive %v", tc.l, tc.stack, gone, alive, why, tc.gone, tc.alive)
			}
			if gone && why == "" {
				t.Error("gone without a reason for people")
			}
		})
	}

	// A later Manager on the same root (the operator's container restarted: another process, and
	// under Kubernetes another PID namespace) judges the earlier one's processes by their records.
	later := newHolders(root)
	if gone, _, _ := later.judge(Lock{Host: host, Pid: killed.Process.Pid, Created: now}, "stack-a"); !gone {
		t.Error("a later Manager does not see the killed process's lock as gone")
	}
	if _, alive, _ := later.judge(Lock{Host: host, Pid: running.Process.Pid, Created: now}, "stack-z"); !alive {
		t.Error("a later Manager does not see the running process as alive")
	}
	// The process keeps the flock in every process of its own that inherits the record (a CLI that
	// does not keep it from its plugins): the lock then waits, it is never judged gone early.
	if entries, _ := os.ReadDir(filepath.Join(root, holderDirName)); len(entries) != 2 {
		t.Errorf("holder records: %d, want 2 (the running and the killed process; the clean one removed)", len(entries))
	}
}

// A process start that fails removes its holder record; so does one refused after killAll.
func TestHolderRecordOfFailedStart(t *testing.T) {
	root := t.TempDir()
	s := &processSet{holders: newHolders(root)}
	if _, err := s.start(exec.Command(filepath.Join(root, "no-such-binary")), "x"); err == nil {
		t.Fatal("start of a missing binary succeeded")
	}
	s.killAll()
	if _, err := s.start(exec.Command("true"), "x"); err == nil {
		t.Fatal("start after killAll succeeded")
	}
	if entries, _ := os.ReadDir(filepath.Join(root, holderDirName)); len(entries) != 0 {
		t.Errorf("holder records left: %v", entries)
	}
}

// Nothing reaches the engine host for a caller that has given up or once the fence no longer
// permits: no process is started for it (a missing binary would say so otherwise), no request sent.
func TestEngineHostRefusesAfterCancelOrFence(t *testing.T) {
	h := &engineHost{path: filepath.Join(t.TempDir(), "no-engine-host"), project: "p", procs: &processSet{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.do(ctx, protocol.Request{Op: protocol.OpUp, Stack: "s"}, "x", os.Environ); !errors.Is(err, context.Canceled) {
		t.Errorf("do with a cancelled context = %v, want context.Canceled before any start", err)
	}
	f := fence.New(time.Minute)
	f.Renewed(f.Now())
	f.Revoke()
	h.procs.fence = f
	if _, err := h.do(context.Background(), protocol.Request{Op: protocol.OpUp, Stack: "s"}, "x", os.Environ); !errors.Is(err, fence.ErrFenced) {
		t.Errorf("do after the fence = %v, want fence.ErrFenced", err)
	}
	// And a process start is refused by the fence itself.
	if _, err := h.procs.start(exec.Command("true"), ""); !errors.Is(err, fence.ErrFenced) {
		t.Errorf("start after the fence = %v, want fence.ErrFenced", err)
	}
}
