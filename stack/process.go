package stack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// processSet holds the pulumi processes a Manager has running (CLI runs and engine hosts), so
// that Manager.Kill can end them all at once, and starts each under the Manager's fence
// (Config.Fence: a process starts only while the fence permits, and gets the fence's lease) with
// a holder record (holder.go: what proves later that it has ended).
type processSet struct {
	fence   *fence.Fence
	holders *holders // nil: no records (tests of other things)

	mu sync.Mutex
	m  map[*os.Process]struct{}
	// closed is set by killAll: no process starts any more.
	closed bool
}

// start starts cmd (not yet started; stack is the stack it works on, "" for an engine host)
// under the fence, with a holder record, and holds it until the returned exited is called, once
// the process has been waited for (ok: it exited 0). Errors: fence.ErrFenced (wrapped) when the
// fence no longer permits a process, or after killAll; the holder record's, the fence's pipe's or
// cmd.Start's.
func (s *processSet) start(cmd *exec.Cmd, stack string) (exited func(ok bool), err error) {
	var rec *pending
	if s.holders != nil {
		if rec, err = s.holders.prepare(cmd, stack); err != nil {
			return nil, fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
		}
	}
	started, leaseExited, err := s.fence.Attach(cmd)
	if err != nil {
		rec.started(0)
		return nil, fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
	}
	// Under the lock, so that a killAll either sees this process or makes it refuse to start.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		started()
		leaseExited()
		rec.started(0)
		return nil, fmt.Errorf("start %s: %w: its pulumi processes were killed", filepath.Base(cmd.Path), fence.ErrFenced)
	}
	err = cmd.Start()
	started()
	if err != nil {
		s.mu.Unlock()
		leaseExited()
		rec.started(0)
		return nil, err
	}
	if s.m == nil {
		s.m = map[*os.Process]struct{}{}
	}
	p := cmd.Process
	s.m[p] = struct{}{}
	s.mu.Unlock()
	rec.started(p.Pid)
	return func(ok bool) {
		s.mu.Lock()
		delete(s.m, p)
		s.mu.Unlock()
		leaseExited()
		rec.exited(ok)
	}, nil
}

// killAll sends SIGKILL to every process of the set and its process group (the provider
// plugins it started), and returns how many it signalled. No process starts afterwards.
func (s *processSet) killAll() int {
	s.mu.Lock()
	s.closed = true
	procs := make([]*os.Process, 0, len(s.m))
	for p := range s.m {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		killGroup(p)
	}
	return len(procs)
}

// await waits until no process of the set runs (each one's exited called: waited for, and what
// its session left killed), at most d, and reports whether none runs. It looks every
// awaitPoll: the set's processes end seldom, and a channel per change would cost every start.
func (s *processSet) await(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for s.len() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(awaitPoll)
	}
	return true
}

// awaitPoll is how often processSet.await looks.
const awaitPoll = 10 * time.Millisecond

// len is how many processes run.
func (s *processSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// trackedCommand is the pulumi CLI as an auto.PulumiCommand that runs each command the way
// auto's own does (sdk go/auto/cmd.go Run: --non-interactive, PULUMI_AUTOMATION_API=true, the
// CLI's directory first on PATH, SIGINT when ctx ends and a kill 10 s later, the exit code),
// and keeps each running process in procs. It is written out because auto's Run does not give
// out the process it starts, and Manager.Kill must be able to end it at once (a leader that
// lost its Lease fences itself). Each process also gets a session of its own and dies with the
// operator (setProcAttr); whatever it started and left behind when it ends, the normal way or
// not (a cancel it ignored until the kill cliCancelDelay later, Manager.Kill, the OOM killer),
// is killed before Run returns (killSession): a provider plugin outliving its CLI would go on
// talking to the cluster for a run that is over, and hold its memory.
type trackedCommand struct {
	path    string // absolute
	version semver.Version
	procs   *processSet
	// drop are variables of this process's environment the runs do not get (Manager.drop).
	drop []string
	// cancelDelay is cliCancelDelay when zero (tests shorten it).
	cancelDelay time.Duration
}

var _ auto.PulumiCommand = (*trackedCommand)(nil)

// cliCancelDelay is how long a CLI run interrupted by its context may take to stop before it is
// killed: auto's own (exec.Cmd.WaitDelay in go/auto/cmd.go).
const cliCancelDelay = 10 * time.Second

// Version is the CLI's version.
func (c *trackedCommand) Version() semver.Version { return c.version }

// Run runs the CLI with args in workdir; see trackedCommand. It returns stdout, stderr, the exit
// code (-2 when there is none, as auto's) and the error of the run.
func (c *trackedCommand) Run(ctx context.Context, workdir string, stdin io.Reader, additionalOutput []io.Writer,
	additionalErrorOutput []io.Writer, additionalEnv []string, args ...string) (string, string, int, error) {
	if !slices.Contains(args, "--non-interactive") {
		args = append([]string{"--non-interactive"}, args...)
	}
	cmd := exec.CommandContext(ctx, c.path, args...)
	cmd.Dir = workdir
	env := append(without(operatorEnv(), c.drop), additionalEnv...)
	env = append(env, "PULUMI_AUTOMATION_API=true")
	cmd.Env = pathFirst(env, filepath.Dir(c.path))
	var stdout, stderr bytes.Buffer
	cmd.Stdout = io.MultiWriter(append(additionalOutput, &stdout)...)
	cmd.Stderr = io.MultiWriter(append(additionalErrorOutput, &stderr)...)
	cmd.Stdin = stdin
	setProcAttr(cmd)
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			_ = cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = cliCancelDelay
	if c.cancelDelay > 0 {
		cmd.WaitDelay = c.cancelDelay
	}
	code := -2
	exited, err := c.procs.start(cmd, stackArg(args))
	if err == nil {
		if n := niceOf(ctx); n > 0 {
			// Its children inherit it: the provider plugins start after this.
			if perr := setNice(cmd.Process.Pid, n); perr != nil {
				slog.Debug("could not lower a pulumi run's CPU priority", "command", commandName(args), "pid", cmd.Process.Pid, "error", perr)
			}
		}
		awaitExit(cmd.Process.Pid)
		if n := killSession(cmd.Process.Pid); n > 0 {
			slog.Debug("killed what a pulumi run left running", "command", commandName(args), "pid", cmd.Process.Pid, "processes", n)
		}
		err = cmd.Wait()
		exited(err == nil)
	}
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err == nil {
		code = 0
	}
	return stdout.String(), stderr.String(), code, err
}

// niceKey is the context key of withNice.
type niceKey struct{}

// withNice is ctx telling trackedCommand.Run to start its process at nice value n (1..19).
func withNice(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, niceKey{}, n)
}

// niceOf is the nice value withNice put in ctx; 0 when none.
func niceOf(ctx context.Context) int {
	n, _ := ctx.Value(niceKey{}).(int)
	return n
}

// commandName is the pulumi command args run: the first argument that is not a flag.
func commandName(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// pathFirst is env with dir first on PATH (added when PATH is absent).
func pathFirst(env []string, dir string) []string {
	out := slices.Clone(env)
	for i, e := range out {
		if len(e) >= 5 && strings.EqualFold(e[:5], "PATH=") {
			if e[5:] == "" {
				out[i] = "PATH=" + dir
			} else {
				out[i] = "PATH=" + dir + string(os.PathListSeparator) + e[5:]
			}
			return out
		}
	}
	return append(out, "PATH="+dir)
}
