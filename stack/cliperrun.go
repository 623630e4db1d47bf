package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// Why cliPerRun runs the CLI itself instead of auto.Stack.Up, Refresh and Destroy: those run
// `pulumi stack output` and `pulumi stack history` (and Destroy's `stack rm`) after every
// engine run, only to return the outputs and the summary (sdk v3.255.0 go/auto/stack.go,
// Up 493-509). Each is a CLI process that loads the backend, so an up through auto would be
// several CLI runs where one does the work (docs/benchmarks.md). The engine writes both to its
// own event log (--event-log, the file auto itself tails), so one run says everything. The CLI
// is run through auto's PulumiCommand all the same (its version check, --non-interactive,
// process group and interrupt on cancel).

// errNoRequests marks a request that nothing here can answer: on Pulumi Cloud (no DIY backend),
// or with a pulumi CLI that is not this project's build (it has no request command) and no engine
// host. The callers then do without (a CLI command of Pulumi's own, or nothing).
var errNoRequests = errors.New("no engine host, and the pulumi CLI has no operator requests")

// cliPerRun is the engine as one process of the pinned pulumi CLI per run and per request.
type cliPerRun struct {
	m *Manager
	// noOperatorRequests is set once the CLI turned out not to know protocol.RequestCommand
	// (request).
	noOperatorRequests atomic.Bool
	// waiting are the requests for the next request process; serving is set while
	// serveRequests runs. mu guards both.
	mu      sync.Mutex
	waiting []*waitingRequest
	serving bool
}

var _ engine = (*cliPerRun)(nil)

// run is `pulumi <op> <args> --stack <stack> --event-log F` in the stack's workspace directory,
// which must exist with its Pulumi.yaml (open made it). The program is the one served at
// r.client (--client), as auto does for an inline program; without --client the CLI would start
// the Go language host that the workspace's `runtime: go` names, which the operator does not need.
func (c *cliPerRun) run(ctx context.Context, r engineRun) (engineOutcome, error) {
	m := c.m
	dir := filepath.Join(m.cfg.WorkRoot, r.stack)
	logFile := filepath.Join(dir, scratchName(".events-")+".jsonl")
	defer os.Remove(logFile)
	args := append([]string{r.op}, r.args...)
	args = append(args, "--client="+r.client, "--exec-kind=auto.inline")
	args = append(args, "--color="+colorOf(r.opts), "--event-log", logFile, "--stack", r.stack)
	streams := m.streams(r.opts)
	if streams == nil {
		args = append(args, "--suppress-progress")
	}
	// --event-log is one of the CLI's debug flags: it exists only with PULUMI_DEBUG_COMMANDS
	// (auto sets it for every run too).
	env := append(m.runEnv(), "PULUMI_DEBUG_COMMANDS=true")
	if r.opts.Background {
		ctx = withNice(ctx, BackgroundNice)
	}
	stdout, stderr, code, err := m.cmd.Run(ctx, dir, nil, streams, nil, env, args...)
	if err != nil {
		// A log the run did not get to write says nothing.
		ran, _ := readEventLog(logFile)
		return engineOutcome{steps: ran.steps, diagnostics: ran.diagnostics},
			&cliError{op: r.op, code: code, stdout: stdout, stderr: stderr, err: err}
	}
	return readEventLog(logFile)
}

// request runs req as the pinned CLI's protocol.RequestCommand, `pulumi operator-request
// <project>`: the engine host's code in a process of its own, the requests as JSON lines on its
// stdin, a Reply for each on its stdout. Requests that come while such a process runs wait, and
// the next process takes all of them (serveRequests): each process costs a CLI start, which a
// burst of new stacks would otherwise pay once per stack. A caller whose ctx ends returns then;
// a request of it that a process has taken may still run.
func (c *cliPerRun) request(ctx context.Context, req protocol.Request) (protocol.Reply, error) {
	if c.m.backend.Kind == BackendCloud || c.noOperatorRequests.Load() {
		return protocol.Reply{}, errNoRequests
	}
	w := &waitingRequest{ctx: ctx, req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, w)
	if !c.serving {
		c.serving = true
		go c.serveRequests()
	}
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.reply, w.err
	case <-ctx.Done():
		return protocol.Reply{}, ctx.Err()
	}
}

// waitingRequest is a request for cliPerRun's next request process and, once done is closed, its
// reply or error.
type waitingRequest struct {
	ctx   context.Context
	req   protocol.Request
	done  chan struct{}
	reply protocol.Reply
	err   error
}

// serveRequests runs request processes one after the other, each for all the requests waiting
// when it starts whose callers still wait, until none is left. Written here because the one
// batching in client-go, the workqueue, merges equal keys rather than gathering distinct requests
// for one consumer call.
func (c *cliPerRun) serveRequests() {
	for {
		c.mu.Lock()
		batch := slices.DeleteFunc(c.waiting, func(w *waitingRequest) bool { return w.ctx.Err() != nil })
		c.waiting = nil
		if len(batch) == 0 {
			c.serving = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.runRequests(batch)
	}
}

// runRequests runs one request process for batch and hands each request its reply. The process
// ends early (interrupted, as any CLI run whose context ends) once every caller of the batch has
// gone.
func (c *cliPerRun) runRequests(batch []*waitingRequest) {
	m := c.m
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, w := range batch {
		defer context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})()
		_ = enc.Encode(w.req) // a Request always marshals
	}
	stdout, stderr, code, err := m.cmd.Run(ctx, m.cfg.WorkRoot, &in, nil, nil, m.runEnv(), protocol.RequestCommand, m.cfg.Project)
	var replies []protocol.Reply
	for dec := json.NewDecoder(strings.NewReader(stdout)); len(replies) < len(batch); {
		var r protocol.Reply
		if dec.Decode(&r) != nil {
			break
		}
		replies = append(replies, r)
	}
	if len(replies) == 0 && err != nil && code > 0 && ctx.Err() == nil {
		// It ran and printed no reply: not this project's build (ours prints one per request
		// whatever the outcome; a process killed, by its lease among others, has no exit code).
		if !c.noOperatorRequests.Swap(true) {
			slog.Warn("this pulumi CLI is not the project's build (it has no `pulumi "+protocol.RequestCommand+"`): "+
				"new stacks are made with `pulumi stack init`, history is not pruned, a failed run is not diagnosed, and only `pulumi cancel` removes locks",
				"pulumi", m.cfg.PulumiPath, "exit", code, "stderr", RedactText(strings.TrimSpace(stderr)))
		}
		err = errNoRequests
	}
	for i, w := range batch {
		switch {
		case i < len(replies):
			w.reply = replies[i]
		case errors.Is(err, errNoRequests):
			w.err = err
		default:
			w.err = fmt.Errorf("run `pulumi %s` (%s): no reply (exit %d): %v", protocol.RequestCommand, w.req.Op, code, err)
		}
		close(w.done)
	}
}

// pruneEvery is Config.KeepHistory: each prune is a process of its own.
func (c *cliPerRun) pruneEvery() int { return c.m.cfg.KeepHistory }

// close has nothing to stop: each process ends with its run.
func (c *cliPerRun) close() {}
