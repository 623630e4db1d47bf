package commands

import (
	"context"
	"fmt"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Operation is the Pulumi operation a command runs on each object's stack. Its value is the
// command's name, as results (--json "operation") and messages show it.
type Operation string

// The operations, one per command of the same name.
const (
	Up      Operation = "up"
	Preview Operation = "preview"
	Refresh Operation = "refresh"
	Destroy Operation = "destroy"
)

// String returns the command's name.
func (op Operation) String() string { return string(op) }

// manyObjects says whether op may run on several objects in one command: up and preview may;
// refresh and destroy work on one object's stack at a time.
func (op Operation) manyObjects() bool { return op == Up || op == Preview }

// run runs op once on the stack name, built by infra.Program from d where op needs a program.
// Its errors are stack.Manager's (stack.ErrLocked for a locked stack); an Operation other
// than the four above is an error naming it.
func (op Operation) run(ctx context.Context, mgr *stack.Manager, name string, d api.Desired, opts stack.RunOptions) (stack.Result, error) {
	switch op {
	case Up:
		return mgr.Up(ctx, name, infra.Program(d), opts)
	case Preview:
		return mgr.Preview(ctx, name, infra.Program(d), opts)
	case Refresh:
		return mgr.Refresh(ctx, name, opts)
	case Destroy:
		return mgr.Destroy(ctx, name, opts)
	}
	return stack.Result{}, fmt.Errorf("run operation %q: not up, preview, refresh or destroy", string(op))
}
