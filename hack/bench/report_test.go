package main

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/render/*.md with what markdown renders now")

// TestMarkdownGolden renders each testdata/render/NAME.json as `bench --render` does and
// compares the doc with NAME.md byte for byte: full.json is a whole `make bench` run; edge.json
// takes the branches that run did not (an earlier run to compare, notes and BROKEN lines, a
// failed burst, a reduced idle with a compared build, no engine host, `stack init` in the
// profile, a CLI start without the key derivation); failed.json is a run whose phases measured
// nothing. After an intended change of the doc, `go test -run TestMarkdownGolden -update`
// rewrites the .md files; review their diff.
func TestMarkdownGolden(t *testing.T) {
	for _, name := range []string{"full", "edge", "failed"} {
		t.Run(name, func(t *testing.T) {
			r, err := readResults(filepath.Join("testdata", "render", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "render", name+".md"), render(t, r))
		})
	}
}

// checkGolden fails the test when got differs from the file golden, naming the first line
// that differs; with -update it writes got there first.
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			if i >= len(gl) || i >= len(wl) || gl[i] != wl[i] {
				t.Fatalf("the text differs from %s from line %d:\ngot:  %q\nwant: %q", golden, i+1, line(gl, i), line(wl, i))
			}
		}
	}
}

// line is lines[i], or a mark when there is no such line.
func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(no such line)"
}

// render is r.markdown(), failing the test on an error.
func render(t *testing.T, r *Results) string {
	t.Helper()
	md, err := r.markdown()
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// TestTwoRuns: with an earlier run's results.json, the doc shows each figure of both runs and
// how far apart they are; a figure the earlier run lacks is left out, and the whole section
// when it has none of them.
func TestTwoRuns(t *testing.T) {
	earlier := &Results{Date: time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC), Versions: Versions{Operator: "abc1234", Go: "go1.26.8", PulumiCLI: "v3.255.0"},
		Figures: []Figure{{ID: "change", Name: "5. change", Value: 2.0, Unit: "s"}, {ID: "burst_best", Name: "2. burst, best (--workers 4)", Value: 100, Unit: "s"}}}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := writeJSON(path, earlier); err != nil {
		t.Fatal(err)
	}
	r := &Results{Versions: Versions{Go: "go1.26.11", PulumiCLI: "v3.274.1"}, Figures: []Figure{{ID: "change", Name: "5. change", Value: 2.2, Unit: "s"}, {ID: "drift_repair", Name: "4. drift", Value: 1, Unit: "s"},
		{ID: "burst_best", Name: "2. burst, best (--workers 8)", Value: 115, Unit: "s"}}}
	if err := r.loadPrevious(path); err != nil {
		t.Fatal(err)
	}
	md := render(t, r)
	if !strings.Contains(md, "commit abc1234, built with go1.26.8, pulumi CLI v3.255.0,") || !strings.Contains(md, "The commits differ") || !strings.Contains(md, "| 5. change | 2.20 s | 2.00 s | +10% |") {
		t.Fatalf("the doc lacks the two runs' table:\n%s", md[strings.Index(md, "Two runs"):])
	}
	if !strings.Contains(md, "| 2. burst, best (--workers 8) | 115 s | 100 s (2. burst, best (--workers 4)) | +15% |") {
		t.Errorf("a best figure of another worker count is not named so:\n%s", md[strings.Index(md, "Two runs"):])
	}
	if strings.Contains(md[strings.Index(md, "Two runs"):], "4. drift |") {
		t.Fatal("a figure the earlier run lacks is in the two runs' table")
	}
	r.Versions.Operator = "abc1234-dirty"
	if md := render(t, r); !strings.Contains(md, "another run of the same commit (abc1234") {
		t.Fatalf("two runs of one commit are not called so:\n%s", md[strings.Index(md, "Two runs"):])
	}
	if err := r.loadPrevious(filepath.Join(t.TempDir(), "none.json")); !os.IsNotExist(err) {
		t.Fatalf("a missing file: err = %v", err)
	}
	// An earlier run with none of these figures (one of other phases): no section at all.
	r.Previous = &PreviousRun{Commit: "def5678", Date: earlier.Date}
	if md := render(t, r); strings.Contains(md, "Two runs") {
		t.Fatalf("an earlier run without these figures gives a two runs' section:\n%s", md[strings.Index(md, "Two runs"):])
	}
}

// TestWhereTheRestGoes: the profile section names the measured key derivation and the CLI's
// GOGC when the results have them, and falls back to the older sentence when they do not.
func TestWhereTheRestGoes(t *testing.T) {
	profile := []ProfileRun{{Label: "operator: new CR to Ready", TotalSeconds: 2, CLI: []CLIStep{{Command: "up", Wall: 1.5, CPU: 1.2}}, CLIWall: 1.5, CLICPU: 1.2}}
	r := &Results{Profile: profile, CLIStart: &CLIStart{Wall: 0.3, CPU: 0.2, Samples: 5, KeyDerivation: 0.19, GOGC: "400"}}
	md := render(t, r)
	for _, want := range []string{"1,000,000 iterations: 0.19 s of one core", "GOGC=400", "stack.EngineHost"} {
		if !strings.Contains(md, want) {
			t.Errorf("the doc lacks %q", want)
		}
	}
	old := render(t, &Results{Profile: profile, CLIStart: &CLIStart{Wall: 0.3, CPU: 0.2, Samples: 5}})
	if !strings.Contains(old, "(PBKDF2, every run)") || strings.Contains(old, "GOGC=") {
		t.Error("results without the key derivation or GOGC should render the older sentence, without GOGC")
	}
}

// TestNewStackByHelper: a profile in which the stack-init helper made the new stack says so
// (with its median time) instead of the sentence about a second CLI start; one without it
// keeps that sentence.
func TestNewStackByHelper(t *testing.T) {
	start := &CLIStart{Wall: 0.3, CPU: 0.2, Samples: 5, KeyDerivation: 0.19, GOGC: "400"}
	helper := []ProfileRun{{Label: "operator: new CR to Ready", TotalSeconds: 1.5,
		CLI: []CLIStep{{Command: stackInitLabel, Wall: 0.12, CPU: 0.1}, {Command: "up", Wall: 1.2, CPU: 0.8}}}}
	md := render(t, &Results{Profile: helper, CLIStart: start})
	if !strings.Contains(md, "made by the stack-init helper (0.12 s in the profile above)") || strings.Contains(md, "pays the start and the key twice") {
		t.Error("a profile with the helper's run should name it and its time, not a second CLI start")
	}
	cli := []ProfileRun{{Label: "operator: new CR to Ready", TotalSeconds: 2,
		CLI: []CLIStep{{Command: "stack init", Wall: 0.5, CPU: 0.5}, {Command: "up", Wall: 1.2, CPU: 0.8}}}}
	md = render(t, &Results{Profile: cli, CLIStart: start})
	if !strings.Contains(md, "pays the start and the key twice") || strings.Contains(md, "stack-init helper (") {
		t.Error("a profile with `stack init` should keep the sentence about a second CLI start")
	}
}

// TestBurstGroups: the bursts with the engine host are judged as a group of their own, beside
// the CLI's: each group's best is its shortest burst, with its own status rows and CPU per up.
func TestBurstGroups(t *testing.T) {
	r := &Results{FloorCPUSeconds: 0.5, Machine: Machine{CPUs: 2}, Measured: Measured{Bursts: []BurstResult{
		{Workers: 2, CRs: 100, Seconds: 60, FloorSeconds: 25, Ratio: 2.4, PeakTreeRSSMiB: 600, OperatorCPUSeconds: 70, Ups: 100},
		{Workers: 4, CRs: 100, Seconds: 50, FloorSeconds: 25, Ratio: 2.0, PeakTreeRSSMiB: 1100, OperatorCPUSeconds: 74, Ups: 100},
		{Workers: 2, CRs: 100, EngineHost: true, Seconds: 38, FloorSeconds: 25, Ratio: 1.52, PeakTreeRSSMiB: 600, OperatorCPUSeconds: 36, Ups: 100},
		{Workers: 4, CRs: 100, EngineHost: true, Seconds: 31, FloorSeconds: 25, Ratio: 1.24, PeakTreeRSSMiB: 860, OperatorCPUSeconds: 38, Ups: 100},
	}}}
	got := map[string]Figure{}
	for _, f := range r.figures() {
		got[f.ID] = f
	}
	for id, want := range map[string]struct {
		name, status string
		value        float64
	}{
		"burst_best":              {"2. burst, best (--workers 4) vs CPU floor", "NOT MET", 50},
		"burst_best_rss":          {"2. burst, best (--workers 4): peak RSS of the operator's process tree", "NOT MET", 1100},
		"burst_host_best":         {"2. burst with the engine host, best (--workers 4) vs CPU floor", "MET", 31},
		"burst_host_best_seconds": {"2. burst with the engine host, best (--workers 4)", "MET", 31},
		"burst_host_best_rss":     {"2. burst with the engine host, best (--workers 4): peak RSS of the operator's process tree", "MET", 860},
		"burst_host_w2":           {"2. burst of 100 CRs with the engine host, --workers 2", "INFO", 38},
	} {
		f, ok := got[id]
		if !ok || f.Name != want.name || f.Status != want.status || f.Value != want.value {
			t.Errorf("figure %s: %+v (present %v); want %q, %s, %v", id, f, ok, want.name, want.status, want.value)
		}
	}
	if f := got["burst_host_cpu_per_up"]; f.Value != 0.37 {
		t.Errorf("engine host CPU per up %v, want 0.37 (74 CPU s over 200 ups)", f.Value)
	}
	if f := got["burst_cpu_per_up"]; f.Value != 0.72 {
		t.Errorf("CLI CPU per up %v, want 0.72 (144 CPU s over 200 ups)", f.Value)
	}
}

// TestPlots: writePlots draws each plot the golden results have data for as an SVG whose
// titles and axis labels are there, the doc links each one, and results without bursts,
// latency samples or idle windows get no plot of them.
func TestPlots(t *testing.T) {
	r, err := readResults(filepath.Join("testdata", "render", "full.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	refs, err := writePlots(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"burst-time.svg", "burst-cpu.svg", "latency.svg", "idle-cpu.svg", "idle-rss.svg"}
	var got []string
	for _, ref := range refs {
		got = append(got, ref.File)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plots %v, want %v", got, want)
	}
	md, err := r.markdown()
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		b, err := os.ReadFile(filepath.Join(dir, ref.File))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		if !strings.HasPrefix(strings.TrimSpace(svg), "<?xml") || !strings.Contains(svg, "<svg") {
			t.Errorf("%s is no SVG: %.80q", ref.File, svg)
		}
		for _, text := range []string{ref.Title[:20]} {
			if !strings.Contains(svg, text) {
				t.Errorf("%s lacks its title %q", ref.File, text)
			}
		}
		if link := "](" + plotsDir + "/" + ref.File + ")"; !strings.Contains(md, link) {
			t.Errorf("the doc does not link %s", ref.File)
		}
	}
	if refs := plotsFor(&Results{}); len(refs) != 0 {
		t.Errorf("plots of empty results: %v, want none", refs)
	}
}

// TestBinaryVersions: the Go release is read from a binary's own build information (the test
// binary here), and a file that is no Go binary gives none.
func TestBinaryVersions(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if goVersion, _ := binaryVersions(self); goVersion != runtime.Version() {
		t.Fatalf("binaryVersions(test binary) = %q, want %q", goVersion, runtime.Version())
	}
	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if goVersion, commit := binaryVersions(notGo); goVersion != "" || commit != "" {
		t.Fatalf("binaryVersions(shell script) = %q, %q, want nothing", goVersion, commit)
	}
}
