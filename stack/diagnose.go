package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// One classifier. What a failed pulumi run was (a lock's wait, an unreachable backend, a missing
// plugin, a missing stack, or a failure) is decided in one place, the engine host's classify
// (agent/enginehost classify.go), from what the backend holds and what the run's engine events
// said, never from the words of an error: the host judges its own runs, and this Manager asks it
// about every pulumi CLI run that failed (diagnose, protocol.OpDiagnose). Without an engine
// host the pinned CLI answers the same request as a command of its own (cliPerRun.request: the same
// code). Either way the failure reaches the callers as a *kindError.

// kindError is a failed run and the kind of its failure, as the engine host's classifier decided
// it. err is the run's own error, for people (a *cliError: a CLI run, or the host's reply in the
// CLI's shape; or an Automation API error): logs and summaries read alike for every path.
type kindError struct {
	err   error
	kind  protocol.ErrorKind
	locks []protocol.Lock
	// repaired counts the torn metadata sidecars the diagnosis removed.
	repaired int
}

func (e *kindError) Error() string { return e.err.Error() }

func (e *kindError) Unwrap() error { return e.err }

// newReplyError is the failed reply r of an op request to the engine host as an error.
func newReplyError(op string, r protocol.Reply) *kindError {
	return &kindError{
		err:  &cliError{op: op, code: r.Code, stdout: r.Stdout, stderr: r.Stderr, err: fmt.Errorf("exit status %d", r.Code)},
		kind: r.Kind, locks: r.Locks,
	}
}

// diagnoseTimeout bounds a diagnosis: it runs on an error path, which must not hang on a stuck
// engine host or backend.
const diagnoseTimeout = 30 * time.Second

// diagnosed is err, a failed pulumi CLI run on stackName ("" for one on no stack) or a failed
// Automation API call on it, as a *kindError of the kind the engine host's classifier gives it
// (diagnose), steps and diagnostics being what the run's event log said (a resource step started;
// the messages of its error diagnostics). It is err unchanged when err has a kind already, when ctx
// has ended (the failure is then the cancellation's, and a diagnosis would start a process for a
// caller that has gone), when the fence refused the run (fence.ErrFenced: nothing may start), or
// when no diagnosis can be had. Each torn metadata sidecar the diagnosis removed is logged as a
// warning with slog's default logger.
func (m *Manager) diagnosed(ctx context.Context, stackName string, err error, steps bool, diagnostics []string) error {
	var ke *kindError
	if err == nil || errors.As(err, &ke) || ctx.Err() != nil || errors.Is(err, fence.ErrFenced) {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diagnoseTimeout)
	defer cancel()
	r, ok := m.diagnose(dctx, protocol.Request{Op: protocol.OpDiagnose, Stack: stackName, Steps: steps, Diagnostics: diagnostics})
	if !ok {
		return err
	}
	for _, f := range r.Repaired {
		slog.Warn("removed a torn metadata file of the stack, left by a killed pulumi process", "stack", stackName, "file", f)
	}
	return &kindError{err: err, kind: r.Kind, locks: r.Locks, repaired: len(r.Repaired)}
}

// diagnose sends req (protocol.OpDiagnose) to the engine host, or runs it as a pinned CLI process
// (engine.request), and returns the diagnosis. ok is false when none can be had (on Pulumi Cloud, or with
// a CLI not built by this project). When the host or the command itself failed, the reason is
// logged and the diagnosis is KindFailed, a plain failure: said once, so that the caller's later
// classifyStack of the same error does not ask again.
func (m *Manager) diagnose(ctx context.Context, req protocol.Request) (protocol.Reply, bool) {
	r, err := m.eng.request(ctx, req)
	switch {
	case errors.Is(err, errNoRequests):
		return protocol.Reply{}, false
	case err != nil:
		slog.Warn("could not diagnose a failed pulumi run", "stack", req.Stack, "error", err)
		return protocol.Reply{Kind: protocol.KindFailed}, true
	case r.Code != 0 && r.Kind == protocol.KindFenced:
		return protocol.Reply{Kind: protocol.KindFenced}, true // the run's failure too: this replica may no longer write
	case r.Code != 0:
		slog.Warn("could not diagnose a failed pulumi run", "stack", req.Stack, "kind", r.Kind, "error", RedactText(strings.TrimSpace(r.Stderr)))
		return protocol.Reply{Kind: protocol.KindFailed}, true
	}
	return r, true
}
