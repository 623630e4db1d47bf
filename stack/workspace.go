package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// emptyProgram is the program of every operation that does not deploy one: refresh and
// destroy (served by engine), and the workspaces' auto runs (`stack init|select|export|
// import|rm`, the refresh after adopting pending operations). A workspace needs a program all
// the same: without one the CLI would start the language host the workspace's Pulumi.yaml
// runtime, "go", names, in a directory that holds no Go program. The CLI runs it only with
// --run-program, which this package never passes: refresh and destroy work from the state and
// the provider alone, so an empty program is right, and it cannot declare a resource by
// mistake. Up and preview serve the object's program instead (engine).
func emptyProgram(*pulumi.Context) error { return nil }

// scratchName is prefix and 16 random hex digits: the name of a throwaway workspace directory
// (ListStacks') or event log (engine) that no other call uses at the same time (64 random bits
// make a collision negligible).
func scratchName(prefix string) string {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(rnd[:])
}

// workspaceOptions are the options of a local workspace for stackName (program emptyProgram): its
// own directory WorkRoot/<stackName> (created here), so that two stacks never share workspace
// files; the CLI, project, secrets provider, environment (the backend's URL included) and Pulumi
// home of the Manager.
func (m *Manager) workspaceOptions(stackName string) ([]auto.LocalWorkspaceOption, error) {
	dir := filepath.Join(m.cfg.WorkRoot, stackName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace directory: %w", err)
	}
	proj := workspace.Project{
		Name:    tokens.PackageName(m.cfg.Project),
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		// No backend here: the CLI reads it from PULUMI_BACKEND_URL (Manager.env), so the
		// Pulumi.yaml auto writes into the workspace names none.
	}
	opts := []auto.LocalWorkspaceOption{
		auto.WorkDir(dir),
		auto.Pulumi(m.cmd),
		auto.Project(proj),
		auto.SecretsProvider(m.cfg.SecretsProvider),
		auto.EnvVars(m.cliEnv()),
		auto.Program(emptyProgram),
	}
	if m.cfg.PulumiHome != "" {
		opts = append(opts, auto.PulumiHome(m.cfg.PulumiHome))
	}
	return opts, nil
}

// open opens stackName in its workspace, creating the stack when create is set
// and it does not exist: one CLI run for a stack it creates or selects, two for one that
// exists when create is set. A stack open creates is recorded as settled (it holds no pending
// operation). The error is auto's own for a stack that does not exist (test it with
// auto.IsSelectStack404Error), so callers classify it themselves; a workspace that cannot
// be opened is classified here.
func (m *Manager) open(ctx context.Context, stackName string, create bool) (auto.Stack, error) {
	st, _, err := m.openCreated(ctx, stackName, create)
	return st, err
}

// openCreated is open, also saying whether it created the stack.
func (m *Manager) openCreated(ctx context.Context, stackName string, create bool) (_ auto.Stack, created bool, _ error) {
	opts, err := m.workspaceOptions(stackName)
	if err != nil {
		return auto.Stack{}, false, err
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		return auto.Stack{}, false, fmt.Errorf("open workspace of stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	// auto.UpsertStack selects, then creates; written out the other way round when create is
	// set: a stack this process has not seen is most often a new object's, so trying `stack
	// init` first costs one CLI run for it, and one more only for a stack that exists. Done
	// this way also says whether the stack is new, and so holds no pending operation.
	var st auto.Stack
	if create {
		if st, err = auto.NewStack(ctx, stackName, ws); err == nil {
			m.recordSettled(stackName)
			return st, true, nil
		}
		if !auto.IsCreateStack409Error(err) {
			return auto.Stack{}, false, err
		}
	}
	st, err = auto.SelectStack(ctx, stackName, ws)
	if err != nil {
		if !create && auto.IsSelectStack404Error(err) {
			// Looking must not leave a workspace behind for a stack that does not exist.
			_ = os.RemoveAll(filepath.Join(m.cfg.WorkRoot, stackName))
		}
		return auto.Stack{}, false, err
	}
	return st, false, nil
}

// writeWorkspace makes sure stackName's workspace directory holds this Manager's Pulumi.yaml
// (a directory removed by hand is made again), without running the CLI.
func (m *Manager) writeWorkspace(stackName string) error {
	opts, err := m.workspaceOptions(stackName)
	if err != nil {
		return err
	}
	if _, err := auto.NewLocalWorkspace(context.Background(), opts...); err != nil {
		return fmt.Errorf("open workspace of stack %s: %w", stackName, classify(err))
	}
	return nil
}
