package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// EngineHost is the file name of the engine host, pulumi-operator-engine (agent/enginehost: the
// pinned pulumi CLI's binary, agent/cmd/pulumi, started under this name; `make build` puts it in
// bin/ and the image in /usr/local/bin as a link to pulumi): one
// long-lived process that runs the Manager's `pulumi up` engine runs with the same pkg/v3 code as
// the CLI's `up`, without a CLI process per run, and creates new stacks. An up then skips the
// CLI's start and, after a stack's first, its passphrase key derivation; docs/design/engine-host.md
// says why, docs/benchmarks.md what that buys. The protocol is the gRPC service of
// agent/protocol/enginepb (package agent/protocol converts it).
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

// engineHostFor resolves Config.EngineHost for cfg, whose backend is backend: nil when unset
// or when the engine host cannot serve cfg's stacks (engineHostCanServe's rule: a DIY backend
// and the passphrase secrets provider, which are what it is tested with). An explicit path
// that does not exist is an error, so that a typo fails at start.
func engineHostFor(cfg Config, backend Backend, procs *processSet) (*engineHost, error) {
	if cfg.EngineHost == "" || !engineHostCanServe(backend, cfg.SecretsProvider) {
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
	// procs holds every engine host process while it runs (Manager.Kill).
	procs *processSet

	mu   sync.Mutex
	proc *engineProc
}

// hostEngine is the engine with an engine host: the ups that want no progress output and every
// request go to the engine host process, the rest (previews, refreshes, destroys, ups with
// progress output, an up when the host cannot be started) to cli.
type hostEngine struct {
	m    *Manager
	host *engineHost
	cli  *cliPerRun
}

var _ engine = (*hostEngine)(nil)

// run sends r to the engine host when it is an up that takes (takes), else runs it as cli does.
// An up that could not start the host (errEngineHostStart) runs as cli does: nothing ran.
func (h *hostEngine) run(ctx context.Context, r engineRun) (engineOutcome, error) {
	if r.op != "up" || !h.takes(r.opts) {
		return h.cli.run(ctx, r)
	}
	out, err := h.up(ctx, r)
	if !errors.Is(err, errEngineHostStart) {
		return out, err
	}
	slog.Warn("the engine host could not be started; running `pulumi up`", "stack", r.stack, "error", err)
	return h.cli.run(ctx, r)
}

// takes reports whether an up with opts goes to the engine host: no progress output is wanted
// (the host reports at the end, the CLI as it goes: laptop commands keep the CLI), and the CLI's
// passphrase is one the host reads alike from any directory (PULUMI_CONFIG_PASSPHRASE, or an
// absolute PULUMI_CONFIG_PASSPHRASE_FILE; a relative one is the CLI's relative to each stack's
// workspace).
func (h *hostEngine) takes(opts RunOptions) bool {
	if h.m.streams(opts) != nil {
		return false
	}
	if _, ok := h.m.lookupEnv("PULUMI_CONFIG_PASSPHRASE"); ok {
		return true
	}
	f, _ := h.m.lookupEnv("PULUMI_CONFIG_PASSPHRASE_FILE")
	return filepath.IsAbs(f)
}

// up is r, an up, through the engine host: the same run, reported the same way (a failure is a
// *kindError holding what the CLI would have printed, and the reply's kind), except that a host
// that cannot be started is errEngineHostStart, nothing having run. The host prunes the stack's
// history itself (the outcome's pruned).
func (h *hostEngine) up(ctx context.Context, r engineRun) (engineOutcome, error) {
	m := h.m
	dir := filepath.Join(m.cfg.WorkRoot, r.stack)
	// A passphrase changed since the host started (a rotated Secret) must be seen as the CLI
	// would see it: pkg/v3 caches a stack's key by its salt alone, so an old host would go on
	// with the old key. A new host reads the new one.
	phrase, err := m.passphrase(dir)
	if err != nil {
		return engineOutcome{}, &cliError{op: "up", code: 255, stderr: "error: " + err.Error(), err: err}
	}
	keep, _ := m.keep(r.opts)
	reply, err := h.host.do(ctx, protocol.Request{Op: protocol.OpUp, Stack: r.stack, Dir: dir, Client: r.client, Refresh: r.opts.Refresh, Keep: keep},
		phrase, m.engineHostEnv)
	if errors.Is(err, errEngineHostStart) {
		return engineOutcome{}, err // run goes the CLI's way instead
	}
	if err != nil {
		return engineOutcome{}, &cliError{op: "up", code: -1, stderr: "error: " + err.Error(), err: err}
	}
	if reply.Code != 0 {
		return engineOutcome{}, newReplyError("up", reply)
	}
	reportPrune(r.stack, reply)
	return engineOutcome{changes: reply.Changes, outputs: reply.Outputs, pruned: true}, nil
}

// request sends req, a request that runs no program (init, prune, locks, unlock, diagnose), to the
// engine host and waits for its reply. The process is picked by the passphrase req.Stack's runs
// would use, so that such a request does not replace a process that its ups use. Errors: the
// passphrase cannot be read, or engineHost.do's.
func (h *hostEngine) request(ctx context.Context, req protocol.Request) (protocol.Reply, error) {
	phrase, err := h.m.passphrase(filepath.Join(h.m.cfg.WorkRoot, req.Stack))
	if err != nil {
		return protocol.Reply{}, err
	}
	return h.host.do(ctx, req, phrase, h.m.engineHostEnv)
}

// pruneEvery is 1: a prune is a request to the running host, no process of its own.
func (h *hostEngine) pruneEvery() int { return 1 }

// close ends the host process once its runs have finished.
func (h *hostEngine) close() { h.host.close() }

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
	return append(env, "PULUMI_BACKEND_URL="+m.backend.String())
}
