package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestInTurn: each step goes first in turn over consecutive i, and the first error stops the
// rest.
func TestInTurn(t *testing.T) {
	var got []string
	step := func(s string) func() error { return func() error { got = append(got, s); return nil } }
	for i := range 3 {
		if err := inTurn(i, step("raw"), step("under"), step("beside")); err != nil {
			t.Fatal(err)
		}
	}
	if want := "raw under beside under beside raw beside raw under"; strings.Join(got, " ") != want {
		t.Fatalf("order %q, want %q", strings.Join(got, " "), want)
	}
	got = nil
	boom := errors.New("boom")
	if err := inTurn(1, step("raw"), func() error { return boom }, step("beside")); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if len(got) != 0 {
		t.Fatalf("steps after the failed one ran: %v", got)
	}
}

// TestMedianRound: the median round's figures, every round's seconds beside them; a failed
// round counts as the slowest; one round is itself.
func TestMedianRound(t *testing.T) {
	rs := []BurstResult{{Seconds: 33, Ups: 1}, {Seconds: 27, Ups: 2}, {Seconds: 30, Ups: 3}}
	r := medianRound(rs)
	if r.Seconds != 30 || r.Ups != 3 || len(r.RoundSeconds) != 3 || r.RoundSeconds[0] != 33 {
		t.Fatalf("median of three: %+v", r)
	}
	// Even: the lower of the two middle ones; a failed round is the slowest.
	r = medianRound([]BurstResult{{Error: "timed out", Seconds: 0}, {Seconds: 31}, {Seconds: 29}, {Seconds: 40}})
	if r.Seconds != 31 || r.Error != "" {
		t.Fatalf("median of four with a failed one: %+v", r)
	}
	if r := medianRound(rs[:1]); r.Seconds != 33 || r.RoundSeconds != nil {
		t.Fatalf("one round: %+v", r)
	}
	if err := checkRounds(0, 1); err == nil || !strings.Contains(err.Error(), "--burst-rounds 0: want 1 or more") {
		t.Fatalf("--burst-rounds 0: err = %v", err)
	}
	if err := checkRounds(1, 0); err == nil || !strings.Contains(err.Error(), "--idle-rounds 0: want 1 or more") {
		t.Fatalf("--idle-rounds 0: err = %v", err)
	}
	if err := checkRounds(3, 3); err != nil {
		t.Fatal(err)
	}
}

// TestBesideBuild: a bin/ directory with the operator and the CLI is a build, with its engine
// host when there is one and a state directory of its own; one without them is refused with
// what to pass.
func TestBesideBuild(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	if _, err := besideBuild(dir, out); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("an empty directory: err = %v", err)
	}
	for _, f := range []string{"pulumi-operator", "pulumi"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bd, err := besideBuild(dir, out)
	if err != nil {
		t.Fatal(err)
	}
	if bd.engineHost != "" || bd.suffix != besideSuffix || bd.stateDir != filepath.Join(out, "state-beside") {
		t.Fatalf("build without an engine host: %+v", bd)
	}
	if err := os.WriteFile(filepath.Join(dir, stack.EngineHost), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if bd, err = besideBuild(dir, out); err != nil || bd.engineHost != filepath.Join(dir, stack.EngineHost) {
		t.Fatalf("with an engine host: %+v, %v", bd, err)
	}
}

// TestSideBySide: the build beside gets figures with this build's IDs (its idle window as a
// restart), the table sets them side by side and counts those worse by more than worseBy
// percent, and there is no table without a build beside or a figure in common.
func TestSideBySide(t *testing.T) {
	w := IdleWindow{Label: "after a restart", Seconds: 32, CPUSeconds: 0.4, CPUPercent: 1.25, PeakRSSMiB: 90}
	r := &Results{
		Measured: Measured{Latency: &PairResult{OperatorMedian: 0.7, FloorMedian: 1, Ratio: 0.7}},
		Idle:     &IdleResult{CRs: 1000, Windows: []IdleWindow{w, w}},
		Beside: &BesideRun{Commit: "7235c85", Dir: "/b/bin",
			Measured: Measured{Latency: &PairResult{OperatorMedian: 0.6, FloorMedian: 1, Ratio: 0.6}}, Idle: &IdleWindow{Label: "after a restart", Seconds: 32, CPUSeconds: 0.5, CPUPercent: 1.5, PeakRSSMiB: 90}},
	}
	r.Figures, r.Beside.Figures = r.figures(), r.besideFigures()
	ids := map[string]bool{}
	for _, f := range r.Beside.Figures {
		ids[f.ID] = true
	}
	if !ids["cr_ready"] || !ids["idle_cpu_restart"] || ids["idle_cpu"] {
		t.Fatalf("figures beside: %v", ids)
	}
	tb := r.sideBySide()
	if tb == nil || tb.Worse != 2 {
		t.Fatalf("side by side: %+v, want 2 worse (figure 1's value and ratio, +17%%)", tb)
	}
	var out strings.Builder
	r.printSideBySide(&out)
	for _, want := range []string{"Side by side with 7235c85 (/b/bin)", "2 of 4 figures worse by more than 10%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed table lacks %q:\n%s", want, out.String())
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "%") && strings.Contains(l, "WORSE") != strings.Contains(l, "+17%") {
			t.Errorf("only the +17%% rows should be marked WORSE: %q", l)
		}
	}
	md := render(t, r)
	if !strings.Contains(md, "### Side by side with 7235c85") || !strings.Contains(md, "| 1. new CR to Ready (median) | 0.70 s | 0.60 s | +17% **worse** |") {
		t.Fatalf("the doc lacks the side-by-side table:\n%s", md)
	}
	// A best burst at another worker count in each build is not the same thing: not marked.
	r.Figures = append(r.Figures, Figure{ID: "burst_best_rss", Name: "2. burst, best (--workers 8): peak RSS", Value: 1757, Unit: "MiB"})
	r.Beside.Figures = append(r.Beside.Figures, Figure{ID: "burst_best_rss", Name: "2. burst, best (--workers 2): peak RSS", Value: 561, Unit: "MiB"})
	if tb := r.sideBySide(); tb.Worse != 2 || len(tb.Rows) != 5 {
		t.Fatalf("a best burst of another worker count: %d worse of %d rows, want 2 of 5", tb.Worse, len(tb.Rows))
	}
	r.Beside.Figures = []Figure{{ID: "shard_x", Value: 1}}
	if r.sideBySide() != nil {
		t.Fatal("a table for builds without a figure in common")
	}
	r.Beside = nil
	out.Reset()
	if r.printSideBySide(&out); out.Len() != 0 || strings.Contains(render(t, r), "Side by side") {
		t.Fatal("a side-by-side table without --beside")
	}
}

// TestMedianWindow: the median of each figure of the windows, the Pulumi runs summed (one run in
// any window shows), the label saying how many; one window is itself.
func TestMedianWindow(t *testing.T) {
	ws := []IdleWindow{
		{Label: "after a restart", Resyncs: 3, Seconds: 32, CPUSeconds: 1.2, PeakRSSMiB: 160, MeanRSSMiB: 139, Ups: 0},
		{Label: "after a restart", Resyncs: 3, Seconds: 32, CPUSeconds: 1.4, PeakRSSMiB: 138, MeanRSSMiB: 136, Ups: 1},
		{Label: "after a restart", Resyncs: 3, Seconds: 33, CPUSeconds: 1.1, PeakRSSMiB: 141, MeanRSSMiB: 137, Ups: 0},
	}
	w := medianWindow(ws)
	if w.PeakRSSMiB != 141 || w.CPUSeconds != 1.2 || w.MeanRSSMiB != 137 || w.Seconds != 32 || w.Ups != 1 || w.Rounds != 3 ||
		w.Label != "after a restart (median of 3 starts)" || w.Resyncs != 3 {
		t.Fatalf("median window: %+v", w)
	}
	if one := medianWindow(ws[:1]); one.PeakRSSMiB != 160 || one.Rounds != 0 || one.Label != "after a restart" {
		t.Fatalf("one window: %+v", one)
	}
}
