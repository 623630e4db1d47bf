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
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// EngineHost is the file name of the engine host, pulumi-operator-engine (agent/enginehost: the
// pinned pulumi CLI's binary, agent/cmd/pulumi, started under this name; `make build` puts it in
// bin/ and the image in /usr/local/bin as a link to pulumi): one
// long-lived process that runs the Manager's `pulumi up` engine runs with the same pkg/v3 code as
// the CLI's `up`, without a CLI process per run, and creates new stacks. An up then skips the
// CLI's start and, after a stack's first, its passphrase key derivation; docs/design/engine-host.md
// says why, docs/benchmarks.md what that buys. The protocol is package agent/protocol.
const EngineHost = "pulumi-operator-engine"

// NoEngineHost is the value of pulumi-operator's --engine-host that turns the engine host off:
// every up is a `pulumi up` CLI process. (stack.Config.EngineHost itself is off when empty.)
const NoEngineHost = "none"

// engineHostRuns is how many requests one engine host process serves before the Manager
// replaces it (the next request starts a new one; the old one exits once its requests have
// finished). pkg/v3 leaves goroutines and memory behind per update in a long-lived process (a
// language-runtime connection it never closes: docs/design/engine-host.md), so a process is not
// kept forever: the run count bounds that leak, and a new process costs one start and one key
// derivation per stack it then opens.
const engineHostRuns = 200

// engineHostIdle is how long an engine host process lives without a request before the
// Manager stops it: its memory (pkg/v3, the engine, what concurrent runs left on its heap) goes
// back once a burst is over, and an idle operator is the operator process alone. The next up
// starts a new one and derives each stack's key again, once.
const engineHostIdle = 30 * time.Second

// engineHostCancelGrace is how long a cancelled run (its context ended: a deadline, a shutdown)
// may take to reply before the Manager gives it up and kills its process once the process's
// other runs are done: a graceful cancel lets the running steps finish, which takes seconds;
// one that hangs would otherwise hold its caller, and the process, for ever.
const engineHostCancelGrace = 30 * time.Second

// errEngineHostHung marks a run abandoned after its cancel went unanswered (engineHostCancelGrace).
var errEngineHostHung = errors.New("engine host run hung")

// errEngineHostStart marks an engine host that could not be started (a binary that is not
// executable, for one): the up then runs as a `pulumi up` process instead (engine).
var errEngineHostStart = errors.New("start the engine host")

// engineHostFor resolves Config.EngineHost for cfg (BackendURL already checked): nil when
// unset or when the engine host cannot serve cfg's stacks (engineHostCanServe's rule: a DIY backend
// and the passphrase secrets provider, which are what it is tested with). An explicit path
// that does not exist is an error, so that a typo fails at start.
func engineHostFor(cfg Config, procs *processSet) (*engineHost, error) {
	if cfg.EngineHost == "" || !engineHostCanServe(cfg) {
		return nil, nil
	}
	abs, err := filepath.Abs(cfg.EngineHost)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("configure stack manager: engine host: %w (build it with `make build`, or leave it unset)", err)
	}
	return &engineHost{path: abs, project: cfg.Project, maxRuns: engineHostRuns, idle: engineHostIdle, cancelGrace: engineHostCancelGrace, procs: procs}, nil
}

// engineHost starts and talks to the engine host process (one at a time; see engineHostRuns).
type engineHost struct {
	path, project string
	// maxRuns is engineHostRuns, idle engineHostIdle and cancelGrace engineHostCancelGrace (tests
	// lower them).
	maxRuns     int
	idle        time.Duration
	cancelGrace time.Duration
	// oneShot retires a process as soon as no request waits on it (Config.CLIUps): requests that
	// overlap share it, the next one starts another.
	oneShot bool
	// procs holds every engine host process while it runs (Manager.Kill).
	procs *processSet

	mu     sync.Mutex
	proc   *engineProc
	nextID int64
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

// replyError is a failed engine host reply: the CLI's text for people (a *cliError, which logs
// and summaries read alike for both paths) and the reply's kind and locks, which decide what the
// failure is (classify, stackNotFound) without reading the text.
type replyError struct {
	*cliError
	kind  protocol.ErrorKind
	locks []protocol.Lock
}

func (e *replyError) Unwrap() error { return e.cliError }

// operationError is e as classify's result: ErrLocked (with its locks), ErrPluginMissing or
// ErrBackendUnavailable by the reply's kind; any other kind is a plain failure.
func (e *replyError) operationError() *OperationError {
	oe := &OperationError{Err: redactErr(e), Summary: summarize(redactPasswords(e.Error()))}
	switch e.kind {
	case protocol.KindLocked:
		oe.kind, oe.Locks = ErrLocked, fromProtocolLocks(e.locks)
	case protocol.KindBackendUnreachable:
		oe.kind = ErrBackendUnavailable
	case protocol.KindFenced:
		oe.kind = fence.ErrFenced
	case protocol.KindPluginMissing:
		oe.kind = ErrPluginMissing
		oe.Summary = pluginMissingSummary(oe.Summary)
	}
	oe.Summary = clip(oe.Summary)
	return oe
}

// useEngineHost reports whether an up of stackName with opts goes to the engine host: there is
// one and Config.CLIUps is not set, no progress output is wanted (the host reports at the end, the CLI as it goes: laptop
// commands keep the CLI), and the CLI's passphrase is one the host reads alike from any
// directory (PULUMI_CONFIG_PASSPHRASE, or an absolute PULUMI_CONFIG_PASSPHRASE_FILE; a relative
// one is the CLI's relative to each stack's workspace).
func (m *Manager) useEngineHost(opts RunOptions) bool {
	if m.engineHost == nil || m.cfg.CLIUps || m.streams(opts) != nil {
		return false
	}
	if _, ok := m.lookupEnv("PULUMI_CONFIG_PASSPHRASE"); ok {
		return true
	}
	f, _ := m.lookupEnv("PULUMI_CONFIG_PASSPHRASE_FILE")
	return filepath.IsAbs(f)
}

// lookupEnv is k in the CLI's environment: Config.Env (and New's settings) over this process's.
func (m *Manager) lookupEnv(k string) (string, bool) {
	if v, ok := m.env[k]; ok {
		return v, true
	}
	return os.LookupEnv(k)
}

// engineHostUp is engine's up through the engine host: the same run, reported the same way (a
// failure is a *replyError holding what the CLI would have printed, and the reply's kind), except
// that a host that cannot be started is errEngineHostStart, nothing having run.
func (m *Manager) engineHostUp(ctx context.Context, stackName, client string, opts RunOptions) (engineOutcome, error) {
	dir := filepath.Join(m.cfg.WorkRoot, stackName)
	// A passphrase changed since the host started (a rotated Secret) must be seen as the CLI
	// would see it: pkg/v3 caches a stack's key by its salt alone, so an old host would go on
	// with the old key. A new host reads the new one.
	phrase, err := m.passphrase(dir)
	if err != nil {
		return engineOutcome{}, &cliError{op: "up", code: 255, stderr: "error: " + err.Error(), err: err}
	}
	keep, _ := m.keep(opts)
	r, err := m.engineHost.do(ctx, protocol.Request{Op: protocol.OpUp, Stack: stackName, Dir: dir, Client: client, Refresh: opts.Refresh, Keep: keep},
		phrase, m.engineHostEnv)
	if errors.Is(err, errEngineHostStart) {
		return engineOutcome{}, err // engine runs the CLI instead
	}
	if err != nil {
		return engineOutcome{}, &cliError{op: "up", code: -1, stderr: "error: " + err.Error(), err: err}
	}
	if r.Code != 0 {
		return engineOutcome{}, newReplyError("up", r)
	}
	reportPrune(stackName, r)
	return engineOutcome{changes: r.Changes, outputs: r.Outputs}, nil
}

// prune asks the engine host, or without one the CLI (pruneByCLI), to keep only the newest
// updates of stackName's history and backups that opts allows (Manager.keep: its KeepHistory,
// else Config.KeepHistory), after an operation that ran as a CLI process: best effort (the
// operation has succeeded; the next prune catches up), so failures are only logged. Nothing
// happens on Pulumi Cloud or with a depth of 0.
func (m *Manager) prune(ctx context.Context, stackName string, opts RunOptions) {
	keep, budgeted := m.keep(opts)
	if isCloud(m.cfg.BackendURL) || keep < 1 || (!budgeted && !m.pruneDue(stackName)) {
		return
	}
	if m.engineHost == nil {
		m.pruneByCLI(ctx, stackName, keep)
		return
	}
	r, err := m.hostRequest(ctx, protocol.Request{Op: protocol.OpPrune, Stack: stackName, Keep: keep})
	if err != nil {
		slog.Warn("could not prune the stack's history", "stack", stackName, "error", err)
		return
	}
	if r.Code != 0 {
		r.PruneError = strings.TrimSpace(r.Stderr)
	}
	reportPrune(stackName, r)
}

// pruneDue reports whether an up or refresh of stackName that ran as a CLI process should prune
// its history now: always, but with Config.CLIUps or without an engine host only every
// KeepHistory-th time per stack (counted in this process), so that each prune's process is paid
// once per KeepHistory ups and the history holds at most twice KeepHistory updates.
func (m *Manager) pruneDue(stackName string) bool {
	if !m.cfg.CLIUps && m.engineHost != nil {
		return true
	}
	m.unprunedMu.Lock()
	defer m.unprunedMu.Unlock()
	if m.unpruned == nil {
		m.unpruned = map[string]int{}
	}
	m.unpruned[stackName]++
	if m.unpruned[stackName] < m.cfg.KeepHistory {
		return false
	}
	delete(m.unpruned, stackName)
	return true
}

// reportPrune logs what pruning did for the reply r of stackName: a warning when it failed.
func reportPrune(stackName string, r protocol.Reply) {
	switch {
	case r.PruneError != "":
		slog.Warn("could not prune the stack's history", "stack", stackName, "error", RedactText(r.PruneError))
	case r.Pruned > 0:
		slog.Debug("pruned the stack's history and backups", "stack", stackName, "files", r.Pruned)
	}
}

// hostRequest sends req, a request that runs no program (init, prune, locks, unlock), to the
// engine host (which must be configured) and waits for its reply. The process is picked by the
// passphrase req.Stack's runs would use, so that such a request does not replace a process that
// its ups use. Errors: the passphrase cannot be read, or engineHost.do's.
func (m *Manager) hostRequest(ctx context.Context, req protocol.Request) (protocol.Reply, error) {
	phrase, err := m.passphrase(filepath.Join(m.cfg.WorkRoot, req.Stack))
	if err != nil {
		return protocol.Reply{}, err
	}
	return m.engineHost.do(ctx, req, phrase, m.engineHostEnv)
}

// engineHostEnv is the engine host's environment: the CLI's (this process's, allow-listed by childEnv, New's settings and
// Config.Env over it, PULUMI_HOME) and the backend URL, which the host reads from there.
func (m *Manager) engineHostEnv() []string {
	env := without(operatorEnv(), m.drop)
	for k, v := range m.env {
		env = append(env, k+"="+v)
	}
	if m.cfg.PulumiHome != "" {
		env = append(env, "PULUMI_HOME="+m.cfg.PulumiHome)
	}
	return append(env, "PULUMI_BACKEND_URL="+m.cfg.BackendURL)
}

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
