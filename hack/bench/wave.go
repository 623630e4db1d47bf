package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const nsWave = "bench-wave"

// WaveResult is an operator upgrade that changes only the program version (phase wave): an
// operator over Objects Ready objects is replaced by a build whose infra.ProgramVersion is one
// higher, so every stack needs one up, which the new operator runs at its default pace
// (--program-upgrades-per-minute). While that wave runs, new objects are created one at a
// time and timed to Ready; the same again once the wave is over, on the quiet operator.
type WaveResult struct {
	Objects int `json:"objects"`
	// Workers is the operators' --workers (the shipped default); PerMinute the pace, the
	// shipped default of --program-upgrades-per-minute.
	Workers   int    `json:"workers"`
	PerMinute int    `json:"perMinute"`
	Backend   string `json:"backend"` // "postgres" or "file"
	// FromVersion and ToVersion are infra.ProgramVersion of the two builds.
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	// CreateSeconds is from creating the objects (the old build) until all were Ready.
	CreateSeconds float64 `json:"createSeconds"`
	// WaveSeconds is from starting the new build until it had run an up of every object for
	// the program (UpgradeUps, "running up" with why ProgramUpgraded) and reported none
	// outdated (pulumi_operator_stacks_program_outdated 0).
	WaveSeconds float64 `json:"waveSeconds"`
	UpgradeUps  int     `json:"upgradeUps"`
	// MidWave are the seconds from create to Ready of the objects created while the wave ran
	// (the first once a quarter of the wave was done), Quiet those created after it; MidWaveAt
	// is how many upgrade ups had run when each mid-wave object was created.
	MidWave   []float64 `json:"midWaveSeconds"`
	MidWaveAt []int     `json:"midWaveAt"`
	Quiet     []float64 `json:"quietSeconds"`
	// Errors are the new build's failed reconciles over the wave.
	Errors  float64   `json:"errors"`
	Commit  string    `json:"commit"`
	Date    time.Time `json:"date"`
	Seconds float64   `json:"seconds"`
}

// waveRatioTarget: an object created during the wave is Ready within this many times its
// quiet time: new objects must not wait behind the wave.
const waveRatioTarget = 2.0

// waveProbes is how many objects are created and timed during the wave, and again after it.
const waveProbes = 5

// programVersionLine is infra.ProgramVersion's declaration in infra/program.go.
var programVersionLine = regexp.MustCompile(`(?m)^const ProgramVersion = "([0-9]+)"$`)

// bumpedOperator builds the operator from b.repo with infra.ProgramVersion one higher (a go
// build -overlay of infra/program.go, nothing of the tree changed) into dir, returning its
// path and the two versions.
func (b *bench) bumpedOperator(ctx context.Context, dir string) (bin, from, to string, err error) {
	src := filepath.Join(b.repo, "infra", "program.go")
	text, err := os.ReadFile(src)
	if err != nil {
		return "", "", "", err
	}
	m := programVersionLine.FindSubmatch(text)
	if m == nil {
		return "", "", "", fmt.Errorf("wave: no %q in %s", programVersionLine, src)
	}
	from = string(m[1])
	var n int
	fmt.Sscan(from, &n)
	to = fmt.Sprint(n + 1)
	patched := programVersionLine.ReplaceAll(text, []byte(`const ProgramVersion = "`+to+`"`))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	patchedPath := filepath.Join(dir, "program.go")
	if err := os.WriteFile(patchedPath, patched, 0o644); err != nil {
		return "", "", "", err
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{src: patchedPath}})
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		return "", "", "", err
	}
	bin = filepath.Join(dir, "pulumi-operator")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-overlay", overlayPath, "-o", bin, ".")
	cmd.Dir = b.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", "", fmt.Errorf("wave: build the operator with ProgramVersion %s: %w\n%s", to, err, out)
	}
	return bin, from, to, nil
}

// phaseWave runs WaveResult's scenario.
func (b *bench) phaseWave(ctx context.Context) error {
	t0 := time.Now()
	res := &WaveResult{Objects: b.opts.waveObjects, Workers: 2, PerMinute: 60, Backend: "file", Commit: b.res.Versions.Operator, Date: t0}
	b.res.Wave = res
	defer func() { res.Seconds = time.Since(t0).Seconds() }()
	backendURL := ""
	if b.opts.postgresURL != "" {
		res.Backend, backendURL = "postgres", b.opts.postgresURL
	}
	bumped, from, to, err := b.bumpedOperator(ctx, filepath.Join(b.out, "wave"))
	if err != nil {
		return err
	}
	res.FromVersion, res.ToVersion = from, to
	if err := b.kube.ensureNamespace(ctx, nsWave); err != nil {
		return err
	}
	// The shipped defaults: --workers and --program-upgrades-per-minute are not passed.
	spec := operatorSpec{name: "wave-old", namespace: nsWave, workers: res.Workers, resync: 10 * time.Minute,
		backendURL: backendURL, engineHost: b.opts.engineHost, stateDir: filepath.Join(b.stateDir, "wave")}
	old, err := b.startOperator(ctx, spec)
	if err != nil {
		return err
	}
	objs := make([]*unstructured.Unstructured, res.Objects)
	keys := make([]string, res.Objects)
	for i := range objs {
		objs[i] = crObject(nsWave, fmt.Sprintf("w-%05d", i), 1, false)
		keys[i] = nsWave + "/" + objs[i].GetName()
	}
	b.logf("wave: %d objects on the build with ProgramVersion %s (%s backend, --workers %d)", res.Objects, from, res.Backend, res.Workers)
	tc := time.Now()
	if err := b.kube.createMany(ctx, objs, 20); err != nil {
		b.stopOperator(old)
		return err
	}
	last, ready, err := b.kube.crs.waitAll(ctx, keys, 1, time.Duration(res.Objects)*4*time.Second+10*time.Minute)
	b.stopOperator(old)
	if err != nil {
		return fmt.Errorf("wave: %d of %d objects Ready on the old build: %w", ready, res.Objects, err)
	}
	res.CreateSeconds = last.Sub(tc).Seconds()
	b.logf("  %d objects Ready in %.0f s; starting the build with ProgramVersion %s", res.Objects, res.CreateSeconds, to)

	spec.name, spec.binary = "wave-new", bumped
	tw := time.Now()
	op, err := b.startOperator(ctx, spec)
	if err != nil {
		return err
	}
	defer b.stopOperator(op)
	upgrades := func() int {
		n := 0
		for _, l := range op.logLines() {
			if l.Msg == "running up" && l.Why == "ProgramUpgraded" && !l.At.Before(tw) {
				n++
			}
		}
		return n
	}
	deadline := tw.Add(time.Duration(res.Objects)*time.Minute/time.Duration(res.PerMinute) + 15*time.Minute)
	probe := func(name string) (float64, error) {
		s, _, err := b.crReady(ctx, nsWave, name)
		return s, err
	}
	for upgrades() < res.Objects/4 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("wave: %d upgrade ups by %s, want a quarter of %d (log %s)", upgrades(), time.Now().Format(time.TimeOnly), res.Objects, op.logPath)
		}
		time.Sleep(time.Second)
	}
	for i := range waveProbes {
		at := upgrades()
		s, err := probe(fmt.Sprintf("mid-%d", i))
		if err != nil {
			return fmt.Errorf("wave: object created mid-wave: %w", err)
		}
		res.MidWave, res.MidWaveAt = append(res.MidWave, s), append(res.MidWaveAt, at)
		b.logf("  created mid-wave (%d of %d upgraded): Ready in %.2f s", at, res.Objects, s)
	}
	for {
		res.UpgradeUps = upgrades()
		outdated, err := op.metric("pulumi_operator_stacks_program_outdated", nil)
		if res.UpgradeUps >= res.Objects && err == nil && outdated == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("wave: %d upgrade ups and %v outdated (%v) by %s, want %d and 0 (log %s)",
				res.UpgradeUps, outdated, err, time.Now().Format(time.TimeOnly), res.Objects, op.logPath)
		}
		time.Sleep(time.Second)
	}
	res.WaveSeconds = time.Since(tw).Seconds()
	res.Errors, _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "error"})
	b.logf("  wave over in %.0f s (%d upgrade ups, %.0f failed reconciles)", res.WaveSeconds, res.UpgradeUps, res.Errors)
	for i := range waveProbes {
		s, err := probe(fmt.Sprintf("quiet-%d", i))
		if err != nil {
			return fmt.Errorf("wave: object created after the wave: %w", err)
		}
		res.Quiet = append(res.Quiet, s)
		b.logf("  created after the wave: Ready in %.2f s", s)
	}
	return nil
}

// ratio divides the median mid-wave time by the median quiet time; it is zero when either
// list is empty (no ratio to judge).
func (w *WaveResult) ratio() float64 {
	q := median(w.Quiet)
	if q == 0 || len(w.MidWave) == 0 {
		return 0
	}
	return median(w.MidWave) / q
}

// The markers of the wave section of docs/benchmarks.md, written by a run with phase wave
// (make bench-wave) and kept by every other run (keepSections).
const (
	waveBegin = "<!-- wave: written by make bench-wave; make bench keeps it -->"
	waveEnd   = "<!-- /wave -->"
)

// waveSection is the Markdown of r.Wave.
func (r *Results) waveSection() string {
	w := r.Wave
	var s strings.Builder
	fmt.Fprintf(&s, "## A program upgrade: %d stacks at the default pace\n\n", w.Objects)
	fmt.Fprintf(&s, "Generated by `make bench-wave` (`hack/bench/`, phase `wave`; outside `make bench` and CI) on %s at operator commit %s, on the machine above. The run took %.0f minutes. "+
		"An operator (`--workers %d`, its engine host, %s backend) over %d Ready objects is replaced by the same commit built with `infra.ProgramVersion` %s instead of %s (a `go build -overlay`), so every stack needs one up for the program and nothing else; the new build runs them at its default pace (`--program-upgrades-per-minute %d`). "+
		"Once a quarter of the wave is done, %d new objects are created one at a time and timed from create to Ready; %d more once the wave is over, on the now quiet operator.\n\n",
		w.Date.UTC().Format("2006-01-02 15:04 UTC"), w.Commit, w.Seconds/60, w.Workers, w.Backend, w.Objects, w.ToVersion, w.FromVersion, w.PerMinute, waveProbes, waveProbes)
	status := "NOT MET"
	if rt := w.ratio(); rt > 0 && rt <= waveRatioTarget {
		status = "MET"
	}
	s.WriteString("| | |\n| --- | --- |\n")
	fmt.Fprintf(&s, "| the objects created on the old build, all Ready | %.0f s |\n", w.CreateSeconds)
	fmt.Fprintf(&s, "| the wave: from the new build's start to every stack upgraded (%d ups for the program), none outdated | %.0f s (%.1f ups a minute) |\n",
		w.UpgradeUps, w.WaveSeconds, float64(w.UpgradeUps)/(w.WaveSeconds/60))
	fmt.Fprintf(&s, "| a new object created during the wave, to Ready (median of %d; upgrades done at each create: %s) | %.2f s (%s) |\n",
		len(w.MidWave), joinInts(w.MidWaveAt), median(w.MidWave), joinSeconds(w.MidWave))
	fmt.Fprintf(&s, "| a new object created after the wave, to Ready (median of %d) | %.2f s (%s) |\n", len(w.Quiet), median(w.Quiet), joinSeconds(w.Quiet))
	fmt.Fprintf(&s, "| during the wave vs after it (target at most %.0fx) | **%.2fx, %s** |\n", waveRatioTarget, w.ratio(), status)
	fmt.Fprintf(&s, "| failed reconciles of the new build | %.0f |\n", w.Errors)
	return s.String()
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

func joinSeconds(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// writeWaveDoc writes r's wave section into the Markdown file at path (between waveBegin and
// waveEnd; appended when the file has none).
func writeWaveDoc(path string, r *Results) error {
	if r.Wave == nil {
		return errors.New("no wave results")
	}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(spliceSection(string(b), waveBegin, waveEnd, r.waveSection())), 0o644)
}
