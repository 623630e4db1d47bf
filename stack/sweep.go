package stack

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// sweepAge is how old a leftover must be before a sweep removes it: far longer than any
// operation runs (--operation-timeout), so nothing in use is ever taken.
const sweepAge = time.Hour

// sweepLeftovers removes from the workspace root what killed runs leave behind and nothing else
// ever removes: engine event logs (".events-*.jsonl" in a stack's workspace; a run removes its
// own when it ends) and the throwaway workspaces of ListStacks' scratch stacks (".list-*") and of
// the scratch stacks earlier versions made to remove a missing stack's lock ("lock-sweep-*"),
// each older than sweepAge. It returns how many it removed; what it
// cannot read or remove is skipped (a later sweep tries again).
func sweepLeftovers(root string) int {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	cutoff := time.Now().Add(-sweepAge)
	old := func(path string) bool {
		fi, err := os.Stat(path)
		return err == nil && fi.ModTime().Before(cutoff)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if strings.HasPrefix(e.Name(), "lock-sweep-") || strings.HasPrefix(e.Name(), ".list-") {
			if old(dir) && os.RemoveAll(dir) == nil {
				n++
			}
			continue
		}
		logs, _ := filepath.Glob(filepath.Join(dir, ".events-*.jsonl"))
		for _, f := range logs {
			if old(f) && os.Remove(f) == nil {
				n++
			}
		}
	}
	return n
}

// SweepWorkspaces removes the workspace directories of this Manager's cluster whose stacks
// belong to no object any more (live reports false for the stack name) and that no run has
// touched for sweepAge, and the leftovers of killed runs (sweepLeftovers); it returns how many
// it removed. A workspace holds nothing the backend does not (the salt travels with the state),
// so a stack whose workspace went gets a new one at its next operation. Call it only when this
// Manager's caller owns every stack of its cluster name in the workspace root: a process that
// reconciles part of them (a label selector, a namespace) would take the others' for dead.
func (m *Manager) SweepWorkspaces(live func(stackName string) bool) int {
	n := sweepLeftovers(m.cfg.WorkRoot)
	gone := sweepDead(m.cfg.WorkRoot, m.cfg.ClusterName, live)
	for _, name := range gone {
		m.recordPending(name)
	}
	if n += len(gone); n > 0 {
		slog.Info("removed workspace leftovers", "root", m.cfg.WorkRoot, "removed", n)
	}
	return n
}

// sweepDead removes the workspace directories under root of cluster's stacks for which live is
// false and that are older than sweepAge, and returns their stack names.
func sweepDead(root, cluster string, live func(string) bool) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	cutoff := time.Now().Add(-sweepAge)
	var gone []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, cluster+".") || live(name) {
			continue
		}
		dir := filepath.Join(root, name)
		fi, err := os.Stat(dir)
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		if os.RemoveAll(dir) == nil {
			gone = append(gone, name)
		}
	}
	return gone
}
