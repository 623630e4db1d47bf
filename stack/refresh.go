package stack

import (
	"context"
	"fmt"
	"time"
)

// Refresh reads the live state of the stack's resources into its state (`pulumi refresh`),
// changing no resource: one CLI run on a stack this process knows. The stack must exist; a
// missing one is an error that names it.
func (m *Manager) Refresh(ctx context.Context, stackName string, opts RunOptions) (Result, error) {
	res := Result{Operation: "refresh", Start: time.Now()}
	_, found, err := m.operate(ctx, stackName, false, &res, func() (engineOutcome, error) {
		return m.engine(ctx, stackName, "refresh", emptyProgram, []string{"--yes", "--skip-preview"}, opts)
	})
	if err == nil && !found {
		err = fmt.Errorf("refresh stack %s: no stack named %s in the backend", stackName, stackName)
	}
	return res, err
}
