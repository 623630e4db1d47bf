package stack

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The sweeps take only what nobody uses: workspaces of this cluster's stacks whose object is
// gone, and leftovers of killed runs, each untouched for sweepAge; never a live stack's
// workspace, another cluster's, or anything recent.
func TestSweeps(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-2 * sweepAge)
	mk := func(rel string, dir, aged bool) {
		p := filepath.Join(root, rel)
		if dir {
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if aged {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("c1.ns.live", true, true)
	mk("c1.ns.live/.events-1.jsonl", false, true)  // a killed run's
	mk("c1.ns.live/.events-2.jsonl", false, false) // a run going on
	mk("c1.ns.gone", true, true)
	mk("c1.ns.fresh", true, false)
	mk("c2.ns.gone", true, true)
	mk("lock-sweep-ab12", true, true)
	mk(".list-cd34", true, true)
	mk("lock-sweep-new", true, false)
	for _, d := range []string{"c1.ns.live", "c1.ns.gone", "c2.ns.gone", "lock-sweep-ab12", ".list-cd34"} {
		if err := os.Chtimes(filepath.Join(root, d), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if n := sweepLeftovers(root); n != 3 {
		t.Errorf("sweepLeftovers removed %d, want 3 (an old event log and two scratch workspaces)", n)
	}
	gone := sweepDead(root, "c1", func(s string) bool { return s == "c1.ns.live" })
	if !slices.Equal(gone, []string{"c1.ns.gone"}) {
		t.Errorf("sweepDead removed %v, want [c1.ns.gone]", gone)
	}
	var left []string
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, _ error) error {
		if rel, _ := filepath.Rel(root, p); rel != "." {
			left = append(left, rel)
		}
		return nil
	})
	slices.Sort(left)
	want := []string{"c1.ns.fresh", "c1.ns.live", "c1.ns.live/.events-2.jsonl", "c2.ns.gone", "lock-sweep-new"}
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
