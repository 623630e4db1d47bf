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
// Protocol: the gRPC service Engine (agent/protocol/enginepb/engine.proto), served on the
// listening Unix socket the operator hands down as file descriptor 3; package protocol converts
// its messages for both sides. A failed call's status carries an enginepb.Error whose kind
// (locked, plugin missing, backend unreachable, ...) is decided here, where pkg/v3's errors are
// known, so that the operator never reads an error's text. Calls run concurrently, each in its
// own goroutine; two calls for one stack never run at once: the second waits for the first (a
// cancel while it waits ends it without a run). Standard output is not the protocol's, because
// pkg/v3 prints a banner there (backend/diy apply).
//
// Configuration comes from the environment only, as the CLI's does: PULUMI_BACKEND_URL (a DIY
// backend's URL; a PostgreSQL URL holds a password, and a command line is world-readable),
// PULUMI_HOME, PULUMI_CONFIG_PASSPHRASE(_FILE), and whatever the provider plugins need
// (KUBECONFIG, ...), which they inherit. It exits 0 when standard input closes, once the calls
// under way have finished, and 2 at start for a missing or non-DIY backend URL or no socket.
//
// It is not a binary of its own: Main runs in the pinned CLI's binary (agent/cmd/pulumi) when
// that binary is started under the name pulumi-operator-engine, so that it links exactly the
// pkg/v3 of the CLI that the operator runs for everything else, and so that the image carries
// pkg/v3 once, not twice.
package enginehost

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	cmdPulumi "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi/cmd"
	"github.com/pulumi/pulumi/pkg/v3/util/cancel"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/result"
	"gocloud.dev/blob"
	"google.golang.org/grpc"

	"github.com/pulumi-operator/pulumi-operator/agent/internal/diystack"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/enginepb"
)

const usage = "usage: PULUMI_BACKEND_URL=<DIY backend URL> pulumi-operator-engine <project> 3<listening Unix socket (gRPC service Engine); stops when standard input closes"

// Main is the engine host's process: it reads os.Args (the project name, os.Args[1]), the
// listening socket on file descriptor 3 and the environment above, serves until standard input
// closes, and exits the process (0, or 2 for a wrong command line, socket or backend URL); it
// never returns.
func Main() {
	f := os.NewFile(3, "engine socket")
	if len(os.Args) != 2 || f == nil {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	// FileListener serves a duplicate marked close-on-exec; closing 3 leaves the provider plugins
	// this process starts without the socket: one that outlived this process would keep the
	// socket's address answering for a host that is gone.
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: file descriptor 3: want a listening Unix socket: %v\n%s\n", err, usage)
		os.Exit(2)
	}
	os.Exit(serve(context.Background(), os.Getenv("PULUMI_BACKEND_URL"), os.Args[1], ln, os.Stdin, os.Stderr))
}

// host is the state of one serve: its backend and the stacks with calls under way.
type host struct {
	project string
	url     string
	// ctx is serve's: never cancelled from outside; the backend's reads and writes run under it
	// (a cancelled context would lose an update's last checkpoint write).
	ctx context.Context
	// stderr takes the diagnostics of opening the backend.
	stderr io.Writer
	// b is the backend, opened by the first request that needs it (backend): nil until then;
	// openMu guards it.
	openMu sync.Mutex
	b      backend.Backend
	// bucket is the backend's bucket, opened by the first prune or lock lookup.
	bucket *blob.Bucket

	mu sync.Mutex
	// stacks holds one slot per stack: a request runs only while it holds its stack's slot, so
	// two requests for one stack never run at once in this process (the DIY lock would refuse
	// the second; pkg/v3's per-process caches of a stack are not meant to be shared by two runs).
	stacks map[string]chan struct{}
}

// serve runs the engine host on backend URL url for project: it serves the Engine service on ln
// until stop reaches its end (the operator closed the host's standard input), then waits for the
// calls under way and returns the exit code. Errors at start (a missing or non-DIY URL, a bad
// project name) go to stderr and return 2. A backend that cannot be opened is not an error at
// start: each request tries to open it and reports protocol.KindBackendUnreachable while it
// cannot, so that the host recovers, without a restart, when the database or endpoint comes back.
func serve(ctx context.Context, url, project string, ln net.Listener, stop io.Reader, stderr io.Writer) int {
	if url == "" || !diy.IsDIYBackendURL(url) {
		ln.Close()
		scheme, _, _ := strings.Cut(url, ":") // the scheme alone: the rest may hold a password
		fmt.Fprintf(stderr, "error: PULUMI_BACKEND_URL %q: want a DIY backend's URL (file://, postgres://, s3://, ...)\n%s\n", scheme, usage)
		return 2
	}
	if err := tokens.ValidateProjectName(project); err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "error: project name %q: %v\n%s\n", project, err, usage)
		return 2
	}
	h := &host{project: project, url: url, ctx: ctx, stderr: stderr, stacks: map[string]chan struct{}{}}
	srv := grpc.NewServer()
	enginepb.RegisterEngineServer(srv, &server{h: h})
	stopped := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stop)
		srv.GracefulStop() // refuses new calls, waits for those under way
		close(stopped)
	}()
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintf(stderr, "error: serve the engine socket: %v\n", err)
		return 1
	}
	<-stopped
	return 0
}

// call runs req once it holds its stack's slot, under c (cancelled by src: a Cancel, or the end
// of its call), and returns its reply; a call cancelled while it waits for the slot never runs
// (KindCancelled), nor one whose lease has ended (KindFenced).
func (h *host) call(req protocol.Request, c *cancel.Context, src *cancel.Source) protocol.Reply {
	defer src.Terminate() // the engine holds an update's plugin host until then (scope.Close)
	release, ok := h.acquire(req.Stack, c)
	if !ok {
		return protocol.Reply{Code: 255, Kind: protocol.KindCancelled, Stderr: "error: update cancelled before it started: another request for stack " + req.Stack + " was running\n"}
	}
	defer release()
	// Checked once the request may run, right before it would take the stack's lock: the lease
	// may have ended while it waited. (A run under way is ended by the lease's deadline itself:
	// WatchLease.)
	if err := protocol.LeaseValid(); err != nil {
		return protocol.Reply{Code: 255, Kind: protocol.KindFenced, Stderr: "error: " + err.Error() + "\n"}
	}
	return h.run(h.ctx, req, scope{ctx: c, src: src})
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

// run serves one request: an up, an init, a prune, a lock lookup or removal, a diagnosis, an
// export, or an
// error reply for anything else. A failure's reply carries the CLI's exit code, its "error:" line and its
// kind (classify).
func (h *host) run(ctx context.Context, req protocol.Request, sc scope) protocol.Reply {
	var stdout, stderr strings.Builder
	var r protocol.Reply
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
	case protocol.OpDiagnose:
		r.Kind, r.Locks, r.Repaired, err = h.diagnose(ctx, req)
	case protocol.OpExport:
		r.Deployment, err = h.export(ctx, req.Stack)
	default:
		err = badRequest("unknown operation %q: this engine host runs %s, %s, %s, %s, %s, %s and %s", req.Op,
			protocol.OpUp, protocol.OpInit, protocol.OpPrune, protocol.OpLocks, protocol.OpUnlock, protocol.OpDiagnose, protocol.OpExport)
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
