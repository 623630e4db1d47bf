package stack

import (
	"context"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Up creates the stack if needed and runs `pulumi up` with program (for a KindCustomHttp:
// infra.Program of its Desired, on the stack StackName names). On a stack this process has
// already created or updated, that is one CLI run, the engine's; the outputs and the change
// summary come from its event log (see engine.go). On a stack this up creates, opts.Adopt
// runs instead of program when set (RunOptions.Adopt). Errors: ErrLocked when another update
// holds the lock, ErrPluginMissing when a provider plugin is absent, otherwise the CLI's
// error, trimmed to its "error:" lines.
func (m *Manager) Up(ctx context.Context, stackName string, program pulumi.RunFunc, opts RunOptions) (Result, error) {
	res := Result{Operation: "up", Start: time.Now()}
	out, _, err := m.operate(ctx, stackName, true, &res, func() (engineOutcome, error) {
		opts := opts
		opts.Refresh = opts.Refresh && !res.created
		return m.engine(ctx, stackName, "up", res.program(program, opts), engineArgs("up", opts), opts)
	})
	if err != nil {
		return res, err
	}
	res.Outputs = out.outputs
	if res.Outputs == nil {
		res.Outputs = map[string]string{}
	}
	return res, nil
}
