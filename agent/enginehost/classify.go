package enginehost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// Errors whose kind is known where they are made.
var (
	errCancelled = errors.New("update cancelled")
	// errOpenBackend wraps a failure to open the backend (diy.New: the bucket, its meta.yaml).
	errOpenBackend = errors.New("open the backend")
	// errReadStack wraps a failure to read the stack's checkpoint before the run.
	errReadStack = errors.New("read the stack")
	// errNoStack: the backend holds no stack of the request's name.
	errNoStack = errors.New("stack not found")
	// errBadRequest wraps a request that is missing what it needs.
	errBadRequest = errors.New("bad request")
)

// badRequest is an errBadRequest with a message saying what is wrong.
func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// runInfo is what an up's engine events said about the run, for classify.
type runInfo struct {
	// steps: the engine started at least one resource step (so the stack's lock was ours).
	steps bool
	// pluginMissing: the engine reported a provider plugin it could not find.
	pluginMissing bool
	// lockOp: the request reads or removes the stack's locks itself (OpLocks, OpUnlock): its
	// failure is never a lock's.
	lockOp bool
}

// backend opens h's backend on first use (diy.New reads the bucket's .pulumi/meta.yaml): a
// failure is errOpenBackend, kind protocol.KindBackendUnreachable, and the next request tries
// again.
func (h *host) backend(ctx context.Context) (backend.Backend, error) {
	h.openMu.Lock()
	defer h.openMu.Unlock()
	if h.b != nil {
		return h.b, nil
	}
	sink := diag.DefaultSink(io.Discard, h.stderr, diag.FormatOptions{Color: colors.Never})
	proj := &workspace.Project{Name: tokens.PackageName(h.project), Runtime: workspace.NewProjectRuntimeInfo("go", nil)}
	b, err := diy.New(ctx, sink, h.url, proj)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errOpenBackend, err)
	}
	h.b = b
	return b, nil
}

// classify is the protocol.ErrorKind of a request on stack that failed with err, and the locks
// other processes hold on it when that is the reason. The rules, in order:
//   - cancelled, a bad request, a backend that cannot be opened: the error says so itself (the
//     sentinels above, made where they happen);
//   - a provider plugin that cannot be found: pkg/v3 loads providers while the program runs and
//     hands a workspace.MissingError to the program over gRPC, which fails with its text and
//     bails; the type does not survive that trip, so the engine's error diagnostic is recognized
//     by MissingError's own format (pluginMissing), in this module, which pins that format;
//   - locked: the run did not start a step and another process holds a lock on the stack (the
//     backend's lock files, read here; one still being written is empty and a lock all the same).
//     pkg/v3's DIY backend reports a lock only as text (backend/diy lock.go checkForLock), which
//     is why the files are read; a checkpoint read while another process rewrites it
//     (an empty read on the file backend) is the same wait, and so is a stack that does not exist
//     while a lock on it is held (a `stack init` or `stack rm` under way, or killed in the middle);
//   - a missing stack (errNoStack);
//   - unreachable: a network error in the chain (connection refused, DNS);
//   - anything else: KindFailed.
func (h *host) classify(ctx context.Context, stack string, err error, ran runInfo) (protocol.ErrorKind, []protocol.Lock) {
	var missing *workspace.MissingError
	switch {
	case errors.Is(err, errCancelled):
		return protocol.KindCancelled, nil
	case errors.Is(err, errBadRequest):
		return protocol.KindBadRequest, nil
	case errors.Is(err, errOpenBackend):
		return protocol.KindBackendUnreachable, nil
	case errors.As(err, &missing) || ran.pluginMissing:
		return protocol.KindPluginMissing, nil
	}
	if !ran.steps && !ran.lockOp && stack != "" {
		if held, locks, lerr := h.locks(ctx, stack); lerr == nil && held {
			return protocol.KindLocked, locks
		}
	}
	if errors.Is(err, errNoStack) {
		return protocol.KindStackMissing, nil
	}
	// *net.OpError and *net.DNSError, not the net.Error interface: a syscall.Errno satisfies
	// that too, so a missing local file would count as a network failure.
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		return protocol.KindBackendUnreachable, nil
	}
	return protocol.KindFailed, nil
}

// pluginMissing reports whether an engine diagnostic is a workspace.MissingError's message
// ("no resource plugin 'pulumi-resource-<name>' found in the workspace ...", sdk/v3
// go/common/workspace/plugins.go MissingError.Error).
func pluginMissing(msg string) bool {
	return strings.Contains(msg, "no resource plugin 'pulumi-resource-")
}
