package watcher

import (
	"context"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// ManagerStacks is the Stacks of a *stack.Manager: the Manager runs operations on a named
// stack with a program; the watcher speaks of a KindCustomHttp's Desired. Up runs
// infra.ProgramAdopting(d, adopt) on the stack StackName gives d; everything else is the
// Manager's own.
type ManagerStacks struct{ *stack.Manager }

// Up brings d's stack up to date with infra.ProgramAdopting(d, adopt); errors are stack.Manager.Up's, or
// StackName's when d's namespace/name make no stack name.
func (m ManagerStacks) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	name, err := m.StackName(d.Namespace, d.Name)
	if err != nil {
		return stack.Result{Operation: "up"}, err
	}
	return m.Manager.Up(ctx, name, infra.ProgramAdopting(d, adopt), opts)
}
