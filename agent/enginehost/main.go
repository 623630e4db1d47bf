// Package enginehost is the operator's engine host, pulumi-operator-engine: one long-lived process
// that runs `pulumi up` engine runs for the operator's stack.Manager, the way the pulumi CLI's `up`
// command runs them (the same pkg/v3 calls: the DIY backend, the stack's configuration and
// secrets manager, backend.UpdateStack), without starting a CLI process for each one. It also
// does what the operator needs of the backend outside a run: creating a stack, pruning its
// history, reading and removing its locks (protocol.Op), so that the operator never reads or
// writes the backend's files itself. The
// Manager starts it once (stack.EngineHost) and sends it requests; it is not meant to be run
// by hand.
//
// Why: every CLI run pays the CLI's start (mostly package initialisation) and, for every stack
// it opens, a passphrase key derivation (PBKDF2, 1,000,000 iterations), before the engine does
// anything: together a large part of an up's CPU. This process pays the start once, and each
// stack's key once (pkg/v3's passphrase secrets managers are cached per process, by the state
// they were made from). It is a process of its own, not a part of the operator, because linking
// pkg/v3 adds resident memory to whatever links it, which the operator's idle budget has no
// room for; a process of its own can also be replaced (the Manager recycles it) and killed with
// its plugins without restarting the operator. docs/design/engine-host.md has the measurements
// behind this; docs/benchmarks.md the current figures.
//
// Protocol: package protocol (agent/protocol), which the operator imports too: requests on
// standard input, one JSON line each (protocol.Request); one reply per request on file
// descriptor 3 (protocol.Reply), in the order they finish. Standard output is not the protocol's
// because pkg/v3 prints a banner there (backend/diy apply). A reply's Kind classifies a failure
// (locked, plugin missing, backend unreachable, ...), decided here, where pkg/v3's errors are
// known, so that the operator never reads an error's text. Requests run concurrently, each in a
// goroutine; two requests for one stack never run at once: the second waits for the first (a
// cancel while it waits ends it without a run).
//
// Configuration comes from the environment only, as the CLI's does: PULUMI_BACKEND_URL (a DIY
// backend's URL; a PostgreSQL URL holds a password, and a command line is world-readable),
// PULUMI_HOME, PULUMI_CONFIG_PASSPHRASE(_FILE), and whatever the provider plugins need
// (KUBECONFIG, ...), which they inherit. It exits 0 when standard input closes, once the requests
// under way have finished, and 2 at start for a missing or non-DIY backend URL.
//
// It is not a binary of its own: Main runs in the pinned CLI's binary (agent/cmd/pulumi) when
// that binary is started under the name pulumi-operator-engine, so that it links exactly the
// pkg/v3 of the CLI that the operator runs for everything else, and so that the image carries
// pkg/v3 once, not twice.
package enginehost

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	cmdPulumi "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi/cmd"
	"github.com/pulumi/pulumi/pkg/v3/util/cancel"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/result"
	"gocloud.dev/blob"

	"github.com/pulumi-operator/pulumi-operator/agent/internal/diystack"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

const usage = "usage: PULUMI_BACKEND_URL=<DIY backend URL> pulumi-operator-engine <project> 3>replies (requests on standard input)"

// Main is the engine host's process: it reads os.Args (the project name, os.Args[1]) and the
// environment above, serves requests until standard input closes, and exits the process (0, or
// 2 for a wrong command line or backend URL); it never returns.
func Main() {
	replies := os.NewFile(3, "replies")
	if len(os.Args) != 2 || replies == nil {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	// The provider plugins this process starts must not inherit the reply pipe: one that
	// outlives this process (plugins watch the engine only every few minutes) would keep the
	// operator from seeing the pipe close, and so from learning that this process died.
	syscall.CloseOnExec(3)
	os.Exit(serve(context.Background(), os.Getenv("PULUMI_BACKEND_URL"), os.Args[1], os.Stdin, replies, os.Stderr))
}

// host is the state of one serve: its backend and the requests under way.
type host struct {
	project string
	url     string
	// stderr takes the diagnostics of opening the backend.
	stderr io.Writer
	// b is the backend, opened by the first request that needs it (backend): nil until then;
	// openMu guards it.
	openMu sync.Mutex
	b      backend.Backend
	// bucket is the backend's bucket, opened by the first prune or lock lookup.
	bucket *blob.Bucket

	mu sync.Mutex
	// cancels holds each request's cancellation source, by request id, from its arrival to its
	// reply: a cancel that comes while the request still loads its stack reaches the engine run
	// too, which then starts cancelled.
	cancels map[int64]*cancel.Source
	out     *json.Encoder
	// stacks holds one slot per stack: a request runs only while it holds its stack's slot, so
	// two requests for one stack never run at once in this process (the DIY lock would refuse
	// the second; pkg/v3's per-process caches of a stack are not meant to be shared by two runs).
	stacks map[string]chan struct{}
}

// serve runs the engine host on backend URL url for project until in closes; it returns the exit
// code. Errors at start (a missing or non-DIY URL, a bad project name) go to stderr and exit 2. A
// backend that cannot be opened is not an error at start: each request tries to open it and
// reports protocol.KindBackendUnreachable while it cannot, so that the host recovers, without
// a restart, when the database or endpoint comes back.
func serve(ctx context.Context, url, project string, in io.Reader, out io.Writer, stderr io.Writer) int {
	if url == "" || !diy.IsDIYBackendURL(url) {
		scheme, _, _ := strings.Cut(url, ":") // the scheme alone: the rest may hold a password
		fmt.Fprintf(stderr, "error: PULUMI_BACKEND_URL %q: want a DIY backend's URL (file://, postgres://, s3://, ...)\n%s\n", scheme, usage)
		return 2
	}
	if err := tokens.ValidateProjectName(project); err != nil {
		fmt.Fprintf(stderr, "error: project name %q: %v\n%s\n", project, err, usage)
		return 2
	}
	h := &host{project: project, url: url, stderr: stderr, cancels: map[int64]*cancel.Source{}, out: json.NewEncoder(out), stacks: map[string]chan struct{}{}}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		var req protocol.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintf(stderr, "error: bad request %q: %v\n", sc.Text(), err)
			continue
		}
		if req.Cancel {
			h.cancel(req.ID)
			continue
		}
		// The source's context is never cancelled from outside: only a cancel line (Cancel) or
		// the end of the run (Terminate) stops it, as SIGINT and the process's exit do the CLI's.
		c, src := cancel.NewContext(context.WithoutCancel(ctx))
		h.mu.Lock()
		h.cancels[req.ID] = src
		h.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r protocol.Reply
			if release, ok := h.acquire(req.Stack, c); !ok {
				r = protocol.Reply{ID: req.ID, Code: 255, Kind: protocol.KindCancelled, Stderr: "error: update cancelled before it started: another request for stack " + req.Stack + " was running\n"}
			} else if err := protocol.LeaseValid(); err != nil {
				// Checked once the request may run, right before it would take the stack's lock:
				// the lease may have ended while it waited. (A run under way is ended by the
				// lease's deadline itself: WatchLease.)
				release()
				r = protocol.Reply{ID: req.ID, Code: 255, Kind: protocol.KindFenced, Stderr: "error: " + err.Error() + "\n"}
			} else {
				r = h.run(ctx, req, scope{ctx: c, src: src})
				release()
			}
			src.Terminate() // the engine holds an update's plugin host until then (scope.Close)
			h.mu.Lock()
			delete(h.cancels, req.ID)
			h.mu.Unlock()
			h.send(r)
		}()
	}
	wg.Wait()
	return 0
}

// acquire waits until stack's slot is free and takes it, returning the function that frees it;
// false when c is cancelled first (the request then never runs).
func (h *host) acquire(stack string, c *cancel.Context) (func(), bool) {
	h.mu.Lock()
	slot := h.stacks[stack]
	if slot == nil {
		slot = make(chan struct{}, 1)
		h.stacks[stack] = slot
	}
	h.mu.Unlock()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, true
	case <-c.Canceled():
		return nil, false
	}
}

// send writes one reply; replies of concurrent requests never interleave.
func (h *host) send(r protocol.Reply) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.out.Encode(r) // a reader gone is the operator gone: nothing to tell
}

// cancel asks request id's engine run to stop gracefully: at once when it runs, as soon as it
// starts when the request is still loading its stack; no-op for a request that has finished.
func (h *host) cancel(id int64) {
	h.mu.Lock()
	src := h.cancels[id]
	h.mu.Unlock()
	if src != nil {
		src.Cancel()
	}
}

// run serves one request: an up, an init, a prune, a lock lookup or removal, or an error reply
// for anything else. A
// failure's reply carries the CLI's exit code, its "error:" line and its kind (classify).
func (h *host) run(ctx context.Context, req protocol.Request, sc scope) protocol.Reply {
	var stdout, stderr strings.Builder
	r := protocol.Reply{ID: req.ID}
	var err error
	var ran runInfo
	switch req.Op {
	case protocol.OpUp:
		r.Changes, r.Outputs, ran, err = h.up(ctx, req, sc, &stdout, &stderr)
		if err == nil && req.Keep > 0 {
			var perr error
			if r.Pruned, perr = h.prune(ctx, req.Stack, req.Keep); perr != nil {
				r.PruneError = perr.Error()
			}
		}
	case protocol.OpPrune:
		if req.Stack == "" || req.Keep < 1 {
			err = badRequest("bad prune request: want a stack and keep of at least 1 (got %q, %d)", req.Stack, req.Keep)
		} else {
			r.Pruned, err = h.prune(ctx, req.Stack, req.Keep)
		}
	case protocol.OpInit:
		r.Created, err = h.init(ctx, req.Stack)
	case protocol.OpLocks:
		ran.lockOp = true
		r.Held, r.Locks, err = h.locks(ctx, req.Stack)
	case protocol.OpUnlock:
		ran.lockOp = true
		r.Repaired, err = h.unlock(ctx, req.Stack, req.Locks)
	default:
		err = badRequest("unknown operation %q: this engine host runs %s, %s, %s, %s and %s", req.Op,
			protocol.OpUp, protocol.OpInit, protocol.OpPrune, protocol.OpLocks, protocol.OpUnlock)
	}
	if err != nil {
		// As the CLI's main does (cmd.DisplayErrorMessage, cmd.ExitCodeFor): a bail has been
		// reported by the display already.
		if !result.IsBail(err) {
			fmt.Fprintf(&stderr, "error: %v\n", err)
		}
		r.Code = cmdPulumi.ExitCodeFor(err)
		if r.Code == 0 {
			r.Code = 1
		}
		r.Kind, r.Locks = h.classify(ctx, req.Stack, err, ran)
	}
	r.Stdout, r.Stderr = stdout.String(), stderr.String()
	return r
}

// init creates stack name as `pulumi stack init` does on a DIY backend (diystack.Create): true
// when it made the stack, false (and no error) when the stack exists. No key derivation: the
// Manager writes the salt, the first up records it.
func (h *host) init(ctx context.Context, name string) (bool, error) {
	b, err := h.backend(ctx)
	if err != nil {
		return false, err
	}
	return diystack.Create(ctx, b, name)
}
