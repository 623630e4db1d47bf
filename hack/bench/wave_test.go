package main

import (
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
