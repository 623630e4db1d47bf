// Package diystack holds what the engine host does to a DIY backend's stacks outside an engine
// run: creating one as `pulumi stack init` does.
package diystack

import (
	"context"
	"errors"
	"fmt"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/backenderr"
)

// Create makes stack name in backend b as `pulumi stack init` does there (CreateStack, which
// takes and releases the stack's lock), without the initial state that names a secrets
// provider: created is true when it made the stack, false (and no error) when the stack exists.
// Errors: an invalid stack name, a backend that cannot be read or written, a lock another
// process holds.
func Create(ctx context.Context, b backend.Backend, name string) (created bool, err error) {
	ref, err := b.ParseStackReference(name)
	if err != nil {
		return false, fmt.Errorf("stack name %q: %w", name, err)
	}
	// Looked up first, without the lock CreateStack takes: an existing stack may be locked by
	// its own update, and must not fail for that.
	st, err := b.GetStack(ctx, ref)
	if err != nil {
		return false, fmt.Errorf("look up stack %s: %w", name, err)
	}
	if st != nil {
		return false, nil
	}
	if _, err := b.CreateStack(ctx, ref, "", nil, nil); err != nil {
		var exists *backenderr.StackAlreadyExistsError
		if errors.As(err, &exists) {
			return false, nil
		}
		return false, fmt.Errorf("create stack %s: %w", name, err)
	}
	return true, nil
}
