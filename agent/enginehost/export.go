package enginehost

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
)

// export is protocol.OpExport: stack's deployment as `pulumi stack export` prints it (the JSON of
// an apitype.UntypedDeployment), read by the DIY backend's ExportDeployment, which copies the
// checkpoint as it is: no secrets manager is made, so no passphrase is read and secrets stay
// encrypted. Errors: a bad stack name (a bad request), the backend's, errNoStack.
func (h *host) export(ctx context.Context, stack string) (json.RawMessage, error) {
	if _, err := tokens.ParseStackName(stack); err != nil {
		return nil, badRequest("bad export request: stack %q: %v", stack, err)
	}
	b, err := h.backend(ctx)
	if err != nil {
		return nil, err
	}
	ref, err := b.ParseStackReference(stack)
	if err != nil {
		return nil, badRequest("bad export request: stack %q: %v", stack, err)
	}
	s, err := b.GetStack(ctx, ref)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", errReadStack, err)
	case s == nil:
		return nil, fmt.Errorf("%w: no stack named '%s' found", errNoStack, stack)
	}
	d, err := b.ExportDeployment(ctx, s)
	if err != nil {
		return nil, err
	}
	return json.Marshal(d)
}
