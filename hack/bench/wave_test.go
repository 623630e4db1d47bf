package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaveSection: the wave section states the ratio of the medians against the 2x target, MET
// or NOT MET, and the figures it comes from; without quiet times there is no ratio to meet.
func TestWaveSection(t *testing.T) {
	w := &WaveResult{Objects: 1000, Workers: 2, PerMinute: 60, Backend: "postgres", FromVersion: "6", ToVersion: "7",
		CreateSeconds: 600, WaveSeconds: 1010, UpgradeUps: 1000, MidWave: []float64{0.9, 1.1, 1.0}, MidWaveAt: []int{250, 251, 253},
		Quiet: []float64{0.7, 0.8, 0.75}, Commit: "abc1234", Date: time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC), Seconds: 1800}
	got := (&Results{Wave: w}).waveSection()
	for _, want := range []string{"1000 stacks", "`infra.ProgramVersion` 7 instead of 6", "1.33x, MET", "1.00 s (0.90, 1.10, 1.00)", "250, 251, 253", "59.4 ups a minute"} {
		if !strings.Contains(got, want) {
			t.Errorf("wave section lacks %q:\n%s", want, got)
		}
	}
	w.MidWave = []float64{2, 2, 2}
	if got := (&Results{Wave: w}).waveSection(); !strings.Contains(got, "2.67x, NOT MET") {
		t.Errorf("a wave 2.67x slower is reported:\n%s", got)
	}
	w.Quiet = nil
	if got := (&Results{Wave: w}).waveSection(); !strings.Contains(got, "0.00x, NOT MET") {
		t.Errorf("without quiet times:\n%s", got)
	}
}

// TestProgramVersionLine: the wave's overlay finds infra.ProgramVersion in the repository's
// infra/program.go (a changed declaration would break make bench-wave, not this test's
// silence), and a program.go without it is an error naming the file, before any build.
func TestProgramVersionLine(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "infra", "program.go"))
	if err != nil {
		t.Fatal(err)
	}
	if programVersionLine.Find(text) == nil {
		t.Fatalf("infra/program.go has no line matching %s", programVersionLine)
	}
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "infra"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "infra", "program.go"), []byte("package infra\n\nconst ProgramVersion = 6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{repo: repo}
	if _, _, _, err := b.bumpedOperator(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "program.go") {
		t.Fatalf("bumpedOperator = %v, want an error naming program.go", err)
	}
}
