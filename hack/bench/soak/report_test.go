package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The report calls a figure flat when its peak in the last fifth is within 10 % of the first
// fifth's, and says NO otherwise; writeSection replaces its own section and nothing else.
func TestReportAndSection(t *testing.T) {
	var samples []Sample
	for i := 1; i <= 10; i++ {
		samples = append(samples, Sample{Updates: i * 100, StateBytes: 1 << 20, OperatorRSS: int64(100*1024 + i*10*1024), Goroutines: 50})
	}
	out := report(&Result{Updates: 1000, Samples: samples})
	if !strings.Contains(out, "| operator goroutines | 50 | 50 | +0.0 % | yes |") {
		t.Errorf("steady goroutines not flat:\n%s", out)
	}
	if !strings.Contains(out, "| operator RSS | 120 MiB | 200 MiB | +66.7 % | **NO** |") {
		t.Errorf("growing RSS not flagged:\n%s", out)
	}
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(doc, []byte("# Benchmarks\n\nfigures\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"first soak\n", "second soak\n"} {
		if err := writeSection(doc, section); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(doc)
	if got := string(b); got != "# Benchmarks\n\nfigures\n\n"+soakBegin+"\nsecond soak\n"+soakEnd+"\n" {
		t.Errorf("doc after two soaks:\n%s", got)
	}
}
