package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// build is one operator build the run measures: the one under test (--operator, --pulumi) or
// the one beside it (--beside), with where its operators keep their state.
type build struct {
	// suffix marks the build's namespaces, log files and state directory: "" for the build
	// under test, besideSuffix for the other.
	suffix string
	// operator, pulumi and engineHost are its binaries: pulumi-operator, the pinned pulumi CLI
	// (with the operator-request command) and the engine host beside that CLI ("" when the
	// build has none).
	operator, pulumi, engineHost string
	// stateDir is its operators' --state-dir ("" for the run's shared one).
	stateDir string
}

// besideSuffix marks the namespaces, logs and state of the build beside the one under test.
const besideSuffix = "-beside"

// besideBuild is the build in dir (its pulumi-operator, pulumi and engine host, as `make
// build` lays them out in bin/) with a state directory of its own under out. Errors: dir has
// no pulumi-operator or no pulumi.
func besideBuild(dir, out string) (*build, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	bd := &build{suffix: besideSuffix, operator: filepath.Join(abs, "pulumi-operator"), pulumi: filepath.Join(abs, "pulumi"),
		stateDir: filepath.Join(out, "state"+besideSuffix)}
	for _, f := range []string{bd.operator, bd.pulumi} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("--beside %s: %w (want the bin/ directory of another checkout's `make build`)", dir, err)
		}
	}
	if p := filepath.Join(abs, stack.EngineHost); fileExists(p) {
		bd.engineHost = p
	}
	return bd, nil
}

// BesideRun is another operator build measured in the same run as this one (--beside), so
// that the machine's speed, which drifts from one run to the next (docs/testing.md), is the
// same for both: its figures 1, 4 and 5 come from samples taken in turn with this build's (the raw
// floor shared), each of its bursts runs right before or after this build's at the same
// worker count (which goes first alternates), and its idle windows after a restart take
// turns with this build's over the same objects.
type BesideRun struct {
	// Commit is the build's commit (--beside-commit, else its Go build information; "" when
	// neither says), Dir the directory of its binaries.
	Commit string `json:"commit"`
	Dir    string `json:"dir"`
	// EngineHost says the build had an engine host beside its pulumi CLI.
	EngineHost bool `json:"engineHost"`
	Measured
	// Idle is its window of 3 resyncs over this build's idle objects after its start (the
	// median of --idle-rounds).
	Idle    *IdleWindow `json:"idle,omitempty"`
	Figures []Figure    `json:"figures"`
}

// besideFigures are the figures of r.Beside, with the IDs and names of r's own: those of r's
// phases that it measured (figures), and its idle window as a restart (it started over
// objects another process made Ready, as r's second window did).
func (r *Results) besideFigures() []Figure {
	s := r.Beside
	o := &Results{Settings: r.Settings, FloorCPUSeconds: r.FloorCPUSeconds, Measured: s.Measured}
	out := o.figures()
	if s.Idle != nil && r.Idle != nil {
		out = append(out, idleWindowFigures(r.Idle.name(), *s.Idle, "_restart")...)
	}
	return out
}

// worseBy is how far, in percent of the build beside's value, a figure of the build under
// test may be worse before the side-by-side table marks it: the bar a change that only moves
// code is held to.
const worseBy = 10.0

// sideBySide sets r's figures beside those of r.Beside: nil without a build beside or when
// the two share no figure.
func (r *Results) sideBySide() *twoRuns {
	if r.Beside == nil {
		return nil
	}
	t := &twoRuns{Commit: r.Beside.Commit, Rows: figureRows(r.Figures, r.Beside.Figures)}
	for _, row := range t.Rows {
		if row.Marked() {
			t.Worse++
		}
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}

// printSideBySide writes the side-by-side table under the figures (nothing without --beside).
// Every figure is one where less is better (seconds, CPU, memory, ratios, counts of runs and
// errors), so a positive difference is this build's cost.
func (r *Results) printSideBySide(w io.Writer) {
	t := r.sideBySide()
	if t == nil {
		return
	}
	fmt.Fprintf(w, "\nSide by side with %s (%s), measured in turn in this run:\n", cond(t.Commit != "", t.Commit, "the build beside"), r.Beside.Dir)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tTHIS BUILD\tBESIDE\tDIFFERENCE\t")
	for _, row := range t.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%+.0f%%\t%s\n", row.Name, row.This, row.Other, row.Percent, cond(row.Marked(), "WORSE", cond(row.Unlike, "(not alike)", "")))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d of %d figures worse by more than %.0f%%\n", t.Worse, len(t.Rows), worseBy)
}
