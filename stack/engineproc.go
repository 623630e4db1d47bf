package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// do sends req to a running engine host process (starting one when there is none, the current
// one has served engineHostRuns requests, has exited, or was started with another passphrase)
// and waits for its reply. When ctx ends first it asks the host to cancel the run gracefully
// and still waits for the reply, as the CLI path waits for a CLI it interrupted: the run then
// writes its state and releases its lock. Errors: the host could not be started, or it exited
// before replying (killed, crashed): the run's outcome is then unknown, as a killed CLI's.
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
	p, id, ch, err := h.send(req, phrase, env)
	if err != nil {
		return protocol.Reply{}, err
	}
	defer h.finished(p, id)
	select {
	case r, ok := <-ch:
		if !ok {
			return protocol.Reply{}, p.exitError()
		}
		return r, nil
	case <-ctx.Done():
	}
	_ = p.write(protocol.Request{ID: id, Cancel: true}) // a process that cannot read it is going: ch closes
	select {
	case r, ok := <-ch:
		if !ok {
			return protocol.Reply{}, p.exitError()
		}
		return r, nil
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

// send picks or starts the process and writes req under a new id; ch receives the reply (closed
// when the process exits without one).
func (h *engineHost) send(req protocol.Request, phrase string, env func() []string) (*engineProc, int64, chan protocol.Reply, error) {
	h.mu.Lock()
	p := h.proc
	if p != nil && !p.takes(phrase, h.maxRuns) {
		p.retire()
		p = nil
	}
	if p == nil {
		var err error
		if p, err = startEngineProc(h.path, h.project, phrase, env(), h.procs); err != nil {
			h.mu.Unlock()
			return nil, 0, nil, err
		}
		h.proc = p
	}
	h.nextID++
	id := h.nextID
	ch := make(chan protocol.Reply, 1)
	p.mu.Lock()
	p.waiting[id] = ch
	p.runs++
	if p.idleTimer != nil {
		p.idleTimer.Stop() // a timer that fired already finds this request waiting (retireIdle)
		p.idleTimer = nil
	}
	p.mu.Unlock()
	h.mu.Unlock()
	req.ID = id
	if err := p.write(req); err != nil {
		// The process is going (its input is closed): the next request starts another.
		p.retire()
		h.finished(p, id)
		return nil, 0, nil, fmt.Errorf("send to the engine host: %w", err)
	}
	return p, id, ch, nil
}

// finished forgets request id; a retired process with nothing left waiting is told to exit,
// and one that is not is retired after h.idle unless a request comes first (at once when
// h.oneShot).
func (h *engineHost) finished(p *engineProc, id int64) {
	p.mu.Lock()
	delete(p.waiting, id)
	empty := len(p.waiting) == 0
	if empty && h.oneShot {
		p.retired = true
	}
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

// retireIdle retires p when it is still the current process and no request is waiting on it
// (send registers requests under h.mu, so none can slip in between).
func (h *engineHost) retireIdle(p *engineProc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc != p {
		return
	}
	p.mu.Lock()
	busy := len(p.waiting) > 0
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

// engineProc is one engine host process.
type engineProc struct {
	cmd    *exec.Cmd
	phrase string // the passphrase it was started with

	wmu   sync.Mutex // one request line at a time
	stdin io.WriteCloser

	mu      sync.Mutex
	waiting map[int64]chan protocol.Reply // by request id
	runs    int                           // requests sent
	retired bool                          // takes no more requests; exits once waiting is empty
	hung    bool                          // holds an abandoned run: killed, not closed, once waiting is empty
	exited  bool
	// idleTimer retires the process engineHost.idle after its last request finished; nil
	// while requests run.
	idleTimer *time.Timer
	stderr    *tailWriter
}

// startEngineProc starts the engine host at path for project with environment env; replies
// come through a pipe on its file descriptor 3.
func startEngineProc(path, project, phrase string, env []string, procs *processSet) (*engineProc, error) {
	cmd := exec.Command(path, project)
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errEngineHostStart, err)
	}
	replies, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errEngineHostStart, err)
	}
	cmd.ExtraFiles = []*os.File{w}
	p := &engineProc{cmd: cmd, phrase: phrase, stdin: stdin, waiting: map[int64]chan protocol.Reply{}, stderr: &tailWriter{max: 4096}}
	cmd.Stderr = p.stderr
	setEngineProcAttr(cmd)
	start := time.Now()
	exited, err := procs.start(cmd, "")
	if err != nil {
		replies.Close()
		w.Close()
		if errors.Is(err, fence.ErrFenced) {
			return nil, err // not a host that cannot start: nothing may run (engine must not fall back to the CLI)
		}
		return nil, fmt.Errorf("%w %s: %w", errEngineHostStart, path, err)
	}
	w.Close() // the child's copy is the only writer now: its exit ends the reader
	slog.Debug("engine host started", "pid", cmd.Process.Pid, "seconds", time.Since(start).Seconds())
	go func() {
		p.read(replies)
		exited(cmd.ProcessState != nil && cmd.ProcessState.Success())
	}()
	return p, nil
}

// takes reports whether p may take another request: it runs, is not retired, has served fewer
// than maxRuns, and has phrase.
func (p *engineProc) takes(phrase string, maxRuns int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited && !p.retired && p.runs < maxRuns && p.phrase == phrase
}

// retire stops p taking requests and ends it once none is waiting (end).
func (p *engineProc) retire() {
	p.mu.Lock()
	p.retired = true
	idle := len(p.waiting) == 0
	p.mu.Unlock()
	if idle {
		p.end()
	}
}

// abandon retires p for a run that did not answer its cancel: p is killed, not closed, once its
// other runs are done (its input closing would not end it: the host waits for its runs).
func (p *engineProc) abandon() {
	p.mu.Lock()
	p.hung = true
	p.mu.Unlock()
	p.retire()
}

// end ends a retired p with nothing waiting: its input closes (the host finishes and exits), or,
// when it holds an abandoned run, it is killed with what it started.
func (p *engineProc) end() {
	p.mu.Lock()
	hung := p.hung
	p.mu.Unlock()
	if hung {
		killGroup(p.cmd.Process)
		return
	}
	p.close()
}

// close closes p's input: the host finishes what runs and exits.
func (p *engineProc) close() { _ = p.stdin.Close() }

// write sends one request line.
func (p *engineProc) write(req protocol.Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, err = p.stdin.Write(append(b, '\n'))
	return err
}

// read delivers replies until the process closes its end, then reaps it and closes the channel
// of every request still waiting (exitError tells why).
func (p *engineProc) read(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024) // a reply holds a run's whole display
	for sc.Scan() {
		var rep protocol.Reply
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			slog.Warn("unreadable reply from the engine host", "error", err)
			continue
		}
		p.mu.Lock()
		ch := p.waiting[rep.ID]
		p.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exited = true
	for id, ch := range p.waiting {
		close(ch)
		delete(p.waiting, id)
	}
	p.mu.Unlock()
	if err != nil {
		slog.Warn("the engine host exited", "pid", p.cmd.Process.Pid, "error", err, "stderr", RedactText(p.stderr.String()))
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
