package enginehost

import (
	"context"
	"errors"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/diyfile"
)

// errRunFailed is what a diagnosis finds when nothing in the backend explains a CLI run's
// failure: the program, a provider or the engine failed (KindFailed, unless the run's own
// diagnostics say otherwise).
var errRunFailed = errors.New("the run failed")

// diagnose is protocol.OpDiagnose: the kind of the failure of a pulumi CLI run of the operator on
// req.Stack, decided by classify, the rules of this host's own failures, from what the run's
// event log said (req.Steps, req.Diagnostics) and what probe finds in the backend now. It returns
// the locks other processes hold when that is the reason, and the torn sidecars probe removed.
// err is a bad request only: a backend that cannot be read is a diagnosis
// (KindBackendUnreachable), not a failure of this request.
func (h *host) diagnose(ctx context.Context, req protocol.Request) (protocol.ErrorKind, []protocol.Lock, []string, error) {
	if req.Stack != "" {
		if _, err := tokens.ParseStackName(req.Stack); err != nil {
			return "", nil, nil, badRequest("bad diagnose request: stack %q: %v", req.Stack, err)
		}
	}
	ran := runInfo{steps: req.Steps}
	for _, d := range req.Diagnostics {
		ran.pluginMissing = ran.pluginMissing || pluginMissing(d)
	}
	repaired, err := h.probe(ctx, req.Stack)
	kind, locks := h.classify(ctx, req.Stack, err, ran)
	return kind, locks, repaired, nil
}

// probe looks at the backend the way a run on stack would, and returns what stops such a run,
// or errRunFailed when nothing does: the backend cannot be opened (errOpenBackend), its locks
// cannot be listed (a network error, or a plain failure), the stack does not exist (errNoStack)
// or cannot be read (errReadStack). With no lock held on stack it first removes the stack's torn
// metadata sidecars on a file:// backend (diyfile.RepairSidecars, as unlock does), and returns
// them: a pulumi process killed while it rewrote one leaves a stack nobody can read, the CLI's
// `pulumi cancel` included; with a lock held the sidecar may be one being written. A failure to
// repair is reported on h.stderr, not returned: the run's own failure is the one to classify.
func (h *host) probe(ctx context.Context, stack string) (repaired []string, err error) {
	b, err := h.backend(ctx)
	if err != nil {
		return nil, err
	}
	if stack == "" {
		return nil, errRunFailed
	}
	held, _, err := h.locks(ctx, stack)
	if err != nil {
		return nil, err
	}
	if !held {
		var rerr error
		if repaired, rerr = diyfile.RepairSidecars(h.url, h.project, stack); rerr != nil {
			fmt.Fprintf(h.stderr, "warning: repair the metadata files of stack %s: %v\n", stack, rerr)
		}
	}
	ref, err := b.ParseStackReference(stack)
	if err != nil {
		return repaired, fmt.Errorf("stack name %q: %w", stack, err)
	}
	s, err := b.GetStack(ctx, ref)
	switch {
	case err != nil:
		return repaired, fmt.Errorf("%w: %w", errReadStack, err)
	case s == nil:
		return repaired, fmt.Errorf("%w: no stack named '%s' found", errNoStack, stack)
	}
	return repaired, errRunFailed
}
