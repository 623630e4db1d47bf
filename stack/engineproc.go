package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/enginepb"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// do runs req on a running engine host process (starting one when there is none, the current
// one has served engineHostRuns requests, has exited, or was started with another passphrase)
// and waits for its reply. When ctx ends first, an up is asked to cancel gracefully and still
// waited for, as the CLI path waits for a CLI it interrupted: the run then writes its state and
// releases its lock; any other call ends with ctx. Errors: the host could not be started, or it
// exited before replying (killed, crashed): the run's outcome is then unknown, as a killed CLI's.
func (h *engineHost) do(ctx context.Context, req protocol.Request, phrase string, env func() []string) (protocol.Reply, error) {
	// Nothing is sent for a caller that has given up, or once the fence no longer permits: a
	// request sent then would run after the operation was cancelled, or after another replica
	// may lead.
	if err := ctx.Err(); err != nil {
		return protocol.Reply{}, fmt.Errorf("send to the engine host: %w", err)
	}
	if err := h.procs.fence.Check(); err != nil {
		return protocol.Reply{}, fmt.Errorf("send to the engine host: %w", err)
	}
	p, err := h.pick(phrase, env)
	if err != nil {
		return protocol.Reply{}, err
	}
	defer h.finished(p)
	if req.Op != protocol.OpUp {
		r, err := protocol.Call(ctx, p.client, req)
		if err != nil {
			return protocol.Reply{}, p.callError(ctx, err)
		}
		return r, nil
	}
	// The call's own context is the hard stop, ended only once the run is given up (or done).
	callCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	u := protocol.StartUp(callCtx, p.client, req)
	select {
	case <-u.Done():
		return p.result(ctx, u)
	case <-ctx.Done():
	}
	u.Cancel()
	select {
	case <-u.Done():
		return p.result(ctx, u)
	case <-time.After(h.cancelGrace):
	}
	// The run ignores its cancel (hung on a provider, or the process is stuck): give it up.
	// The process takes no more requests and is killed once its other runs are done, so that
	// nothing of this run writes to the stack later; its lock is then a dead process's.
	p.abandon()
	slog.Warn("the engine host did not end a cancelled run: it is retired and will be killed once its other runs end",
		"pid", p.cmd.Process.Pid, "stack", req.Stack, "waited", h.cancelGrace.String())
	return protocol.Reply{}, fmt.Errorf("%w: the engine host did not end the run within %s of its cancel; the run was abandoned and its process is killed", errEngineHostHung, h.cancelGrace)
}

// pick returns the process that takes the next request, starting one when needed, and counts
// the request on it (finished uncounts it).
func (h *engineHost) pick(phrase string, env func() []string) (*engineProc, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.proc
	if p != nil && !p.takes(phrase, h.maxRuns) {
		p.retire()
		p = nil
	}
	if p == nil {
		var err error
		if p, err = startEngineProc(h.path, h.project, phrase, env(), h.procs); err != nil {
			return nil, err
		}
		h.proc = p
	}
	p.mu.Lock()
	p.inflight++
	p.runs++
	if p.idleTimer != nil {
		p.idleTimer.Stop() // a timer that fired already finds this request counted (retireIdle)
		p.idleTimer = nil
	}
	p.mu.Unlock()
	return p, nil
}

// finished uncounts a request of p; a retired process with nothing left under way is told to
// exit, and one that is not is retired after h.idle unless a request comes first.
func (h *engineHost) finished(p *engineProc) {
	p.mu.Lock()
	p.inflight--
	empty := p.inflight == 0
	if empty && !p.retired && h.idle > 0 {
		if p.idleTimer != nil {
			p.idleTimer.Stop()
		}
		p.idleTimer = time.AfterFunc(h.idle, func() { h.retireIdle(p) })
	}
	retiredAndEmpty := p.retired && empty
	p.mu.Unlock()
	if retiredAndEmpty {
		p.end()
	}
}

// retireIdle retires p when it is still the current process and no request is under way on it
// (pick counts requests under h.mu, so none can slip in between).
func (h *engineHost) retireIdle(p *engineProc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc != p {
		return
	}
	p.mu.Lock()
	busy := p.inflight > 0
	p.mu.Unlock()
	if busy {
		return
	}
	h.proc = nil
	p.retire()
	slog.Debug("engine host stopped after being idle", "pid", p.cmd.Process.Pid, "idle", h.idle)
}

// running reports whether an engine host process runs and takes requests.
func (h *engineHost) running() bool {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited && !p.retired
}

// close stops the engine host process, if any, once its requests have finished; the next
// request starts a new one.
func (h *engineHost) close() {
	h.mu.Lock()
	p := h.proc
	h.proc = nil
	h.mu.Unlock()
	if p != nil {
		p.retire()
	}
}

// engineProc is one engine host process and the gRPC connection to it.
type engineProc struct {
	cmd    *exec.Cmd
	phrase string // the passphrase it was started with
	// stdin is the host's standard input: closing it stops the host once its calls are done.
	stdin  io.WriteCloser
	conn   *grpc.ClientConn
	client enginepb.EngineClient
	// done is closed once the process has exited and been reaped.
	done chan struct{}

	mu       sync.Mutex
	inflight int  // requests under way
	runs     int  // requests taken
	retired  bool // takes no more requests; exits once none is under way
	hung     bool // holds an abandoned run: killed, not closed, once none is under way
	exited   bool
	// idleTimer retires the process engineHost.idle after its last request finished; nil
	// while requests run.
	idleTimer *time.Timer
	stderr    *tailWriter
}

// engineMaxReply is the largest reply the operator takes from the engine host: a reply holds a
// run's whole display, which gRPC's default of 4 MiB could refuse for a large program.
const engineMaxReply = 64 << 20

// startEngineProc starts the engine host at path for project with environment env, serving the
// Engine service on a Unix socket in a directory of its own that only this user can enter
// (os.MkdirTemp: mode 0700), whose listening end it receives as file descriptor 3.
func startEngineProc(path, project, phrase string, env []string, procs *processSet) (*engineProc, error) {
	dir, err := os.MkdirTemp("", "pulumi-operator-engine-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errEngineHostStart, err)
	}
	sock := filepath.Join(dir, "engine.sock")
	lf, err := listenFile(sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", errEngineHostStart, err)
	}
	defer lf.Close() // the child's copy is the only one once it has started
	cmd := exec.Command(path, project)
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", errEngineHostStart, err)
	}
	cmd.ExtraFiles = []*os.File{lf}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(engineMaxReply)))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", errEngineHostStart, err)
	}
	p := &engineProc{cmd: cmd, phrase: phrase, stdin: stdin, conn: conn, client: enginepb.NewEngineClient(conn), done: make(chan struct{}), stderr: &tailWriter{max: 4096}}
	cmd.Stderr = p.stderr
	setEngineProcAttr(cmd)
	start := time.Now()
	exited, err := procs.start(cmd, "")
	if err != nil {
		conn.Close()
		os.RemoveAll(dir)
		if errors.Is(err, fence.ErrFenced) {
			return nil, err // not a host that cannot start: nothing may run (engine must not fall back to the CLI)
		}
		return nil, fmt.Errorf("%w %s: %w", errEngineHostStart, path, err)
	}
	slog.Debug("engine host started", "pid", cmd.Process.Pid, "seconds", time.Since(start).Seconds())
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exited = true
		p.mu.Unlock()
		close(p.done)
		conn.Close()
		os.RemoveAll(dir)
		if err != nil {
			slog.Warn("the engine host exited", "pid", cmd.Process.Pid, "error", err, "stderr", RedactText(p.stderr.String()))
		}
		// A provider plugin the host left behind would go on talking to the cluster after the
		// set shows the host gone (Manager.Stop), as a CLI run's would (trackedCommand).
		if n := killSession(cmd.Process.Pid); n > 0 {
			slog.Warn("killed processes the engine host left behind", "pid", cmd.Process.Pid, "processes", n)
		}
		exited(cmd.ProcessState != nil && cmd.ProcessState.Success())
	}()
	return p, nil
}

// listenFile listens on the Unix socket path and returns the listening socket as a file to hand
// to a child (the listener itself is closed, without removing path).
func listenFile(path string) (*os.File, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	return ln.File()
}

// takes reports whether p may take another request: it runs, is not retired, has served fewer
// than maxRuns, and has phrase.
func (p *engineProc) takes(phrase string, maxRuns int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited && !p.retired && p.runs < maxRuns && p.phrase == phrase
}

// retire stops p taking requests and ends it once none is under way (end).
func (p *engineProc) retire() {
	p.mu.Lock()
	p.retired = true
	idle := p.inflight == 0
	p.mu.Unlock()
	if idle {
		p.end()
	}
}

// abandon retires p for a run that did not answer its cancel: p is killed, not closed, once its
// other runs are done (its input closing would not end it: the host waits for its calls).
func (p *engineProc) abandon() {
	p.mu.Lock()
	p.hung = true
	p.mu.Unlock()
	p.retire()
}

// end ends a retired p with nothing under way: its input closes (the host finishes and exits),
// or, when it holds an abandoned run, it is killed with what it started.
func (p *engineProc) end() {
	p.mu.Lock()
	hung := p.hung
	p.mu.Unlock()
	if hung {
		killGroup(p.cmd.Process)
		return
	}
	_ = p.stdin.Close()
}

// result is u's outcome: its reply, or callError of its transport failure.
func (p *engineProc) result(ctx context.Context, u *protocol.UpCall) (protocol.Reply, error) {
	r, err := u.Result()
	if err != nil {
		return protocol.Reply{}, p.callError(ctx, err)
	}
	return r, nil
}

// engineExitWait is how long a call that failed in transport waits for the host's exit, to say
// how it exited rather than that the connection broke.
const engineExitWait = 5 * time.Second

// callError is the error of a call that failed in transport (err): ctx's when the caller gave
// up, exitError when the host exited, else err.
func (p *engineProc) callError(ctx context.Context, err error) error {
	if ctx.Err() != nil && status.Code(err) == codes.Canceled {
		return fmt.Errorf("call the engine host: %w", ctx.Err())
	}
	select {
	case <-p.done:
		return p.exitError()
	case <-time.After(engineExitWait):
		return fmt.Errorf("call the engine host: %w", err)
	}
}

// exitError says that the engine host exited before it replied.
func (p *engineProc) exitError() error {
	msg := "the engine host exited before its run finished"
	if st := p.cmd.ProcessState; st != nil {
		msg += " (" + st.String() + ")"
	}
	if tail := strings.TrimSpace(p.stderr.String()); tail != "" {
		msg += ": " + RedactText(tail)
	}
	return errors.New(msg)
}

// tailWriter keeps the last max bytes written to it (the engine host's standard error, for the
// error when it dies).
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0:0], t.b[over:]...)
	}
	return len(b), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
