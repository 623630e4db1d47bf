package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Preview runs `pulumi preview` of program against the stack, changing nothing: one CLI run
// on a stack that exists. A stack that does not exist yet is created for the preview and
// removed again, so a preview leaves the backend as it found it; it previews as all creates, or
// with opts.Adopt as that program's imports.
func (m *Manager) Preview(ctx context.Context, stackName string, program pulumi.RunFunc, opts RunOptions) (Result, error) {
	res := Result{Operation: "preview", Start: time.Now()}
	// A stack named by the rule before Name's moves to its object's name first (migrate.go),
	// so that the preview is of the stack the next up runs on.
	if err := m.settleName(ctx, stackName); err != nil {
		return res, fmt.Errorf("preview stack %s: %w", stackName, err)
	}
	if err := m.writeWorkspace(stackName); err != nil {
		return res, err
	}
	run := func() (engineOutcome, error) {
		return m.engine(ctx, stackName, "preview", res.program(program, opts), engineArgs("preview", opts), opts)
	}
	out, err := run()
	if err != nil && stackNotFound(err) {
		st, created, oerr := m.openCreated(ctx, stackName, true)
		res.created = created
		if oerr != nil {
			return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, oerr))
		}
		defer func() {
			_ = st.Workspace().RemoveStack(context.WithoutCancel(ctx), stackName)
			_ = m.forget(stackName)
		}()
		out, err = run()
	}
	res.End = time.Now()
	if err != nil {
		return res, fmt.Errorf("preview stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	res.Changes = out.changes
	return res, nil
}
