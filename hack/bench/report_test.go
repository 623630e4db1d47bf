package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoRuns: with an earlier run's results.json, the doc shows each figure of both runs and
// how far apart they are; a figure the earlier run lacks is left out.
func TestTwoRuns(t *testing.T) {
	earlier := &Results{Date: time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC), Versions: Versions{Operator: "abc1234"},
		Figures: []Figure{{ID: "change", Name: "5. change", Value: 2.0, Unit: "s"}}}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := writeJSON(path, earlier); err != nil {
		t.Fatal(err)
	}
	r := &Results{Figures: []Figure{{ID: "change", Name: "5. change", Value: 2.2, Unit: "s"}, {ID: "drift_repair", Name: "4. drift", Value: 1, Unit: "s"}}}
	if err := r.loadPrevious(path); err != nil {
		t.Fatal(err)
	}
	md := r.markdown()
	if !strings.Contains(md, "commit abc1234") || !strings.Contains(md, "| 5. change | 2.20 s | 2.00 s | +10% |") {
		t.Fatalf("the doc lacks the two runs' table:\n%s", md[strings.Index(md, "Two runs"):])
	}
	if strings.Contains(md[strings.Index(md, "Two runs"):], "4. drift |") {
		t.Fatal("a figure the earlier run lacks is in the two runs' table")
	}
	if err := r.loadPrevious(filepath.Join(t.TempDir(), "none.json")); !os.IsNotExist(err) {
		t.Fatalf("a missing file: err = %v", err)
	}
}
