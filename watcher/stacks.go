package watcher

import (
	"context"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// ManagerStacks is the Stacks of a *stack.Manager: the Manager runs operations on a named
// stack with a program; the watcher speaks of a KindCustomHttp's Desired. Up runs
// infra.Program(d) on the stack StackName gives d, or infra.ProgramAdopting(d, adopt) when the up
// creates that stack (stack.RunOptions.Adopt); everything else is the Manager's own.
type ManagerStacks struct{ *stack.Manager }

// Up brings d's stack up to date with infra.Program(d), importing the objects adopt names if
// the stack did not exist (stack.RunOptions.Adopt); errors are stack.Manager.Up's, or
// StackName's when d's namespace/name make no stack name.
func (m ManagerStacks) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	name, err := m.StackName(d.Namespace, d.Name)
	if err != nil {
		return stack.Result{Operation: "up"}, err
	}
	opts.Adopt = nil
	if adopt.Any() {
		opts.Adopt = infra.ProgramAdopting(d, adopt)
	}
	return m.Manager.Up(ctx, name, infra.Program(d), opts)
}
