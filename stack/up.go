package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// upOptions are `pulumi up`'s options for RunOptions.
var upOptions = optionSet[optup.Option]{
	color: optup.Color, progress: optup.ProgressStreams, suppress: optup.SuppressProgress,
	refresh: optup.Refresh, diff: optup.Diff,
}

// Up creates the stack if needed and runs `pulumi up` with program (for a KindCustomHttp:
// infra.Program of its Desired, on the stack StackName names). Errors: ErrLocked
// when another update holds the lock, ErrPluginMissing when a provider plugin is absent,
// otherwise the CLI's error, trimmed to its "error:" lines.
func (m *Manager) Up(ctx context.Context, stackName string, program pulumi.RunFunc, opts RunOptions) (Result, error) {
	res := Result{Operation: "up", Start: time.Now()}
	st, err := m.open(ctx, stackName, program, true)
	if err != nil {
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if res.Recovered, err = m.settlePending(ctx, st, stackName); err != nil {
		return res, err
	}
	up, err := st.Up(ctx, upOptions.options(m.streams(opts), opts)...)
	res.End = time.Now()
	if err != nil {
		m.recordPending(stackName)
		return res, fmt.Errorf("up stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if up.Summary.ResourceChanges != nil {
		res.Changes = *up.Summary.ResourceChanges
	}
	res.Outputs = make(map[string]string, len(up.Outputs))
	for k, v := range up.Outputs {
		if v.Secret {
			res.Outputs[k] = "[secret]"
			continue
		}
		res.Outputs[k] = fmt.Sprint(v.Value)
	}
	return res, nil
}
