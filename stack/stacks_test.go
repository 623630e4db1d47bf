package stack

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Several ListStacks at once (`pulumi-operator stacks` beside a watcher, or two laptops on one
// workspace root) each see the stacks, and leave no workspace directory behind: each lists
// from a directory of its own, which no other call removes under it.
func TestListStacksAtOnce(t *testing.T) {
	m, _ := newManager(t)
	ctx := context.Background()
	name, _ := m.StackName("ns", "listed")
	if _, err := m.Up(ctx, name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	const calls = 4
	var wg sync.WaitGroup
	lists := make([][]StackInfo, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() { lists[i], errs[i] = m.ListStacks(ctx) })
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil || len(lists[i]) != 1 || lists[i][0].Name != name {
			t.Errorf("ListStacks call %d of %d at once = %+v, %v; want the one stack %s", i+1, calls, lists[i], errs[i], name)
		}
	}
	left, err := filepath.Glob(filepath.Join(m.cfg.WorkRoot, ".list*"))
	if err != nil || len(left) > 0 {
		t.Errorf("ListStacks left workspace directories %v (%v)", left, err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.WorkRoot, name)); err != nil {
		t.Errorf("the stack's own workspace directory is gone: %v", err)
	}
}
