package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
)

// refreshOptions are `pulumi refresh`'s options for RunOptions: color and progress only
// (RunOptions.Refresh and Diff are for up and preview).
var refreshOptions = optionSet[optrefresh.Option]{
	color: optrefresh.Color, progress: optrefresh.ProgressStreams, suppress: optrefresh.SuppressProgress,
}

// Refresh reads the live state of the stack's resources into its state (`pulumi refresh`),
// changing no resource. The stack must exist.
func (m *Manager) Refresh(ctx context.Context, stackName string, opts RunOptions) (Result, error) {
	res := Result{Operation: "refresh", Start: time.Now()}
	st, err := m.open(ctx, stackName, emptyProgram, false)
	if err != nil {
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if res.Recovered, err = m.settlePending(ctx, st, stackName); err != nil {
		return res, err
	}
	r, err := st.Refresh(ctx, refreshOptions.options(m.streams(opts), opts)...)
	res.End = time.Now()
	if err != nil {
		m.recordPending(stackName)
		return res, fmt.Errorf("refresh stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if r.Summary.ResourceChanges != nil {
		res.Changes = *r.Summary.ResourceChanges
	}
	return res, nil
}
