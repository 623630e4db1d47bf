package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// StackInfo describes one stack of the project in the backend.
type StackInfo struct {
	// Name is the stack name; Cluster, Namespace and CRName (the name) of the KindCustomHttp
	// it belongs to are parsed from it (empty for a name Name shortened or a stack of another
	// tool).
	Name                       string
	Cluster, Namespace, CRName string
	// LastUpdate is the time of the last update as the backend reports it (RFC 3339), ""
	// for none; UpdateInProgress is true while an update holds the lock.
	LastUpdate       string
	UpdateInProgress bool
	// Resources counts the resources in the stack's state, -1 when unknown.
	Resources int
}

// ListStacks lists the project's stacks in the backend. It runs in a workspace directory of
// its own, removed afterwards, so that calls at once never remove each other's directory.
func (m *Manager) ListStacks(ctx context.Context) ([]StackInfo, error) {
	// A stack name never starts with a dot (see Name), so no stack's workspace is taken.
	name := scratchName(".list-")
	defer os.RemoveAll(filepath.Join(m.cfg.WorkRoot, name))
	opts, err := m.workspaceOptions(name)
	if err != nil {
		return nil, err
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", m.classifyStack(ctx, "", err))
	}
	sums, err := ws.ListStacks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list stacks: %w", m.classifyStack(ctx, "", err))
	}
	out := make([]StackInfo, 0, len(sums))
	for _, s := range sums {
		name := s.Name
		if i := strings.LastIndex(name, "/"); i >= 0 { // organization/project/stack
			name = name[i+1:]
		}
		info := StackInfo{Name: name, LastUpdate: s.LastUpdate, UpdateInProgress: s.UpdateInProgress, Resources: -1}
		if s.ResourceCount != nil {
			info.Resources = *s.ResourceCount
		}
		if parts := strings.Split(name, "."); len(parts) == 3 {
			if again, err := Name(parts[0], parts[1], parts[2]); err == nil && again == name {
				info.Cluster, info.Namespace, info.CRName = parts[0], parts[1], parts[2]
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// Exists reports whether the backend holds the stack.
func (m *Manager) Exists(ctx context.Context, stackName string) (bool, error) {
	_, err := m.open(ctx, stackName, false)
	if err == nil {
		return true, nil
	}
	if auto.IsSelectStack404Error(err) {
		return false, nil
	}
	return false, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
}
