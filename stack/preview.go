package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// previewOptions are `pulumi preview`'s options for RunOptions.
var previewOptions = optionSet[optpreview.Option]{
	color: optpreview.Color, progress: optpreview.ProgressStreams, suppress: optpreview.SuppressProgress,
	refresh: optpreview.Refresh, diff: optpreview.Diff,
}

// Preview runs `pulumi preview` of program against the stack, changing nothing. A stack that
// does not exist yet is created for the preview and removed again, so a preview leaves the
// backend as it found it; it previews as all creates.
func (m *Manager) Preview(ctx context.Context, stackName string, program pulumi.RunFunc, opts RunOptions) (Result, error) {
	res := Result{Operation: "preview", Start: time.Now()}
	existed, err := m.Exists(ctx, stackName)
	if err != nil {
		return res, err
	}
	st, err := m.open(ctx, stackName, program, true)
	if err != nil {
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if !existed {
		defer func() {
			_ = st.Workspace().RemoveStack(context.WithoutCancel(ctx), stackName)
			_ = os.RemoveAll(filepath.Join(m.cfg.WorkRoot, stackName))
		}()
	}
	pr, err := st.Preview(ctx, previewOptions.options(m.streams(opts), opts)...)
	res.End = time.Now()
	if err != nil {
		return res, fmt.Errorf("preview stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	res.Changes = make(map[string]int, len(pr.ChangeSummary))
	for op, n := range pr.ChangeSummary {
		res.Changes[string(op)] = n
	}
	return res, nil
}
