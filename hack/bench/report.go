package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"
)

// Results is everything a run measured; written as JSON (--out/results.json) and rendered
// into the table and docs/benchmarks.md.
type Results struct {
	Date     time.Time  `json:"date"`
	Seconds  float64    `json:"durationSeconds"`
	Machine  Machine    `json:"machine"`
	Versions Versions   `json:"versions"`
	Settings Settings   `json:"settings"`
	Load     []LoadMark `json:"loadAverage"`
	Figures  []Figure   `json:"figures"`
	// FloorCPUSeconds is the CPU of the engine run of one raw up of a new stack (median): the
	// `pulumi up` CLI process and the provider plugin it waited for.
	FloorCPUSeconds float64 `json:"floorCPUSeconds,omitempty"`
	Measured
	Idle *IdleResult `json:"idle,omitempty"`
	// Scale is the cost curve (phase scale) and Shards the run of sharded operators on one
	// PostgreSQL backend (phase shards): `make bench-scale`, outside `make bench`.
	Scale  *ScaleResult `json:"scale,omitempty"`
	Shards *ShardResult `json:"shards,omitempty"`
	// Wave is a program upgrade over many stacks (phase wave): `make bench-wave`.
	Wave     *WaveResult  `json:"wave,omitempty"`
	Profile  []ProfileRun `json:"cliProfile,omitempty"`
	CLIStart *CLIStart    `json:"cliStart,omitempty"`
	// Previous is an earlier run's figures (--previous), to show how far apart two runs are.
	Previous *PreviousRun `json:"previous,omitempty"`
	// Beside is another build measured in turn with this one in this run (--beside).
	Beside     *BesideRun     `json:"beside,omitempty"`
	Notes      []string       `json:"notes,omitempty"`
	Broken     []string       `json:"broken,omitempty"`
	ClusterCPU map[string]any `json:"clusterCPU,omitempty"`
}

// Measured are the figures of one operator build that a build beside it (--beside) has too:
// 1, 4 and 5 on the file backend, 1 and 5 on PostgreSQL, and the bursts. Results and BesideRun
// embed it, so its fields stand at the top of either's JSON.
type Measured struct {
	Latency *PairResult `json:"crToReady,omitempty"`
	Drift   *PairResult `json:"driftRepair,omitempty"`
	Change  *PairResult `json:"change,omitempty"`
	// Postgres holds figures 1 and 5 measured again on the PostgreSQL backend.
	Postgres *SiteResults  `json:"postgres,omitempty"`
	Bursts   []BurstResult `json:"bursts,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs        int    `json:"cpus"`
	MemTotalMiB int64  `json:"memTotalMiB"`
	CPUModel    string `json:"cpuModel"`
	Kernel      string `json:"kernel"`
}

// Versions of everything measured.
type Versions struct {
	Go             string `json:"go"`
	PulumiCLI      string `json:"pulumiCLI"`
	ProviderPlugin string `json:"kubernetesProviderPlugin"`
	Kubernetes     string `json:"kubernetes"`
	Operator       string `json:"operatorCommit"`
}

// Settings of the run.
type Settings struct {
	Samples        int   `json:"samples"`
	Warmup         int   `json:"warmup"`
	LatencyWorkers int   `json:"latencyWorkers"`
	Burst          int   `json:"burstCRs"`
	BurstWorkers   []int `json:"burstWorkers"`
	// HostWorkers are the worker counts of the bursts with --engine-host.
	HostWorkers []int `json:"engineHostWorkers,omitempty"`
	// OperatorEngineHost says the engine host lay beside the operator binary, so the operator
	// used it wherever the bench gave no --engine-host (figures 1, 3, 4, 5).
	OperatorEngineHost bool `json:"operatorEngineHost,omitempty"`
	// BurstRounds is how many times each burst ran (--burst-rounds); its row is the median
	// round. 0 in a results.json from before the setting: once.
	BurstRounds int `json:"burstRounds,omitempty"`
	// IdleRounds is how many windows after a restart the idle figure is the median of
	// (--idle-rounds); 0 in a results.json from before the setting: one.
	IdleRounds  int    `json:"idleRounds,omitempty"`
	IdleTarget  int    `json:"idleTarget"`
	IdleWorkers int    `json:"idleWorkers"`
	Resync      string `json:"resync"`
	Budget      string `json:"budget"`
	Phases      string `json:"phases"`
}

// LoadMark is /proc/loadavg at a point of the run. Other work on the machine (tests, builds)
// shows here: a load well above the bench's own (about the worker count during bursts, under
// 1 otherwise) means noisy figures.
type LoadMark struct {
	Phase  string    `json:"phase"`
	At     time.Time `json:"at"`
	Load1  float64   `json:"load1"`
	Load5  float64   `json:"load5"`
	Load15 float64   `json:"load15"`
}

// Figure is one line of the table: a value, maybe a floor and their ratio, and the target.
type Figure struct {
	ID     string  `json:"id"`
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Floor  float64 `json:"floor,omitempty"`
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"target"`
	// Status is MET, NOT MET, INFO (no target) or FAILED (not measured: something broke).
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
}

// SiteResults are figures 1, 4 and 5 of one site (backend); nil where not measured.
type SiteResults struct {
	Latency *PairResult `json:"crToReady,omitempty"`
	Drift   *PairResult `json:"driftRepair,omitempty"`
	Change  *PairResult `json:"change,omitempty"`
}

// PairResult is a figure measured through the operator and, side by side, the floor: the
// `pulumi up` engine run of a raw stack.Manager.Up of the same change (figures 1 and 5) or a
// whole raw up to the same event (figure 4), in seconds per sample.
type PairResult struct {
	Operator       []float64  `json:"operatorSeconds"`
	Floor          []float64  `json:"floorSeconds"`
	FloorCPU       []float64  `json:"floorCPUSeconds,omitempty"`
	OperatorMedian float64    `json:"operatorMedian"`
	FloorMedian    float64    `json:"floorMedian"`
	Ratio          float64    `json:"ratio"`
	Breakdown      *Breakdown `json:"breakdown,omitempty"`
}

func (p *PairResult) finish() {
	p.OperatorMedian, p.FloorMedian = median(p.Operator), median(p.Floor)
	if p.FloorMedian > 0 {
		p.Ratio = p.OperatorMedian / p.FloorMedian
	}
}

// Breakdown splits the operator's time (medians, seconds) using its log: before its
// "running up" line (informer, workqueue, finalizer), the up (Reconciling status write, the
// stack.Manager up), and after "stack up to date" (live read, status write, until the bench's
// watch sees Ready).
type Breakdown struct {
	BeforeUp float64 `json:"beforeUp"`
	Up       float64 `json:"up"`
	AfterUp  float64 `json:"afterUp"`
	Samples  int     `json:"samples"`
}

// BurstResult is figure 2 at one worker count.
type BurstResult struct {
	Workers int `json:"workers"`
	// EngineHost says the operator ran with --engine-host (stack.EngineHost): its ups in that
	// one process, not a pulumi CLI process each.
	EngineHost bool    `json:"engineHost,omitempty"`
	CRs        int     `json:"crs"`
	Ready      int     `json:"ready"`
	Seconds    float64 `json:"seconds"`
	// RoundSeconds are the seconds of each round with --burst-rounds above 1 (this result is
	// the median round's), in the order they ran.
	RoundSeconds       []float64 `json:"roundSeconds,omitempty"`
	FloorSeconds       float64   `json:"cpuFloorSeconds"`
	Ratio              float64   `json:"ratio"`
	OperatorCPUSeconds float64   `json:"operatorTreeCPUSeconds"`
	// OperatorSelfCPUSeconds is the operator process alone, without its pulumi processes.
	OperatorSelfCPUSeconds float64 `json:"operatorSelfCPUSeconds"`
	PeakTreeRSSMiB         float64 `json:"peakTreeRSSMiB"`
	PeakOperatorRSSMiB     float64 `json:"peakOperatorRSSMiB"`
	PeakProcesses          int     `json:"peakProcesses"`
	Ups                    int     `json:"ups"`
	ReconcileErrors        float64 `json:"reconcileErrors"`
	ReconcileLocked        float64 `json:"reconcileLocked"`
	// APIRequests is how many Kubernetes API requests the operator made during the burst
	// (rest_client_requests_total).
	APIRequests float64 `json:"apiRequests,omitempty"`
	// Where the machine's CPU went during the burst: the operator's tree (above), the
	// cluster's processes, the bench itself, and everything else (other people's work).
	MachineBusyCPUSeconds float64 `json:"machineBusyCPUSeconds"`
	ClusterCPUSeconds     float64 `json:"clusterCPUSeconds"`
	BenchCPUSeconds       float64 `json:"benchCPUSeconds"`
	OtherCPUSeconds       float64 `json:"otherCPUSeconds"`
	Error                 string  `json:"error,omitempty"`
}

// cpuPerUp is the CPU the operator's tree spent per up (seconds).
func (b BurstResult) cpuPerUp() float64 {
	if b.Ups == 0 {
		return 0
	}
	return b.OperatorCPUSeconds / float64(b.Ups)
}

// IdleResult is figure 3.
type IdleResult struct {
	Target        int     `json:"target"`
	CRs           int     `json:"crs"`
	Reduced       bool    `json:"reduced"`
	ReducedReason string  `json:"reducedReason,omitempty"`
	Workers       int     `json:"workers"`
	Existing      int     `json:"reusedFromBursts"`
	RestartUps    int     `json:"upsAtStartOverExisting"`
	Created       int     `json:"created"`
	CreateSeconds float64 `json:"createSeconds"`
	CreateUps     int     `json:"createUps"`
	// AloneAfterSeconds is how long after the last create the operator's tree was the operator
	// alone (its engine host stopped), when the first window began.
	AloneAfterSeconds float64      `json:"aloneAfterSeconds,omitempty"`
	Windows           []IdleWindow `json:"windows"`
	// Compare are windows of other operator builds over the same objects (--idle-compare).
	Compare []IdleWindow `json:"compare,omitempty"`
}

// IdleWindow is one stretch of 3 resyncs.
type IdleWindow struct {
	Label      string  `json:"label"`
	Seconds    float64 `json:"seconds"`
	Resyncs    int     `json:"resyncs"`
	Ups        int     `json:"ups"`
	Reconciles float64 `json:"reconciles"`
	// APIRequests is how many Kubernetes API requests the operator made in the window
	// (rest_client_requests_total).
	APIRequests float64 `json:"apiRequests,omitempty"`
	CPUSeconds  float64 `json:"cpuSeconds"`
	CPUPercent  float64 `json:"cpuPercentOfOneCore"`
	PeakRSSMiB  float64 `json:"peakRSSMiB"`
	MeanRSSMiB  float64 `json:"meanRSSMiB"`
	// PeakTreeRSSMiB is the operator and every process below it (an engine host that has not
	// stopped yet); PeakProcesses how many there were at most.
	PeakTreeRSSMiB float64 `json:"peakTreeRSSMiB,omitempty"`
	PeakProcesses  int     `json:"peakProcesses,omitempty"`
	// Rounds is how many windows, each from a start of its own, this one is the median of
	// (--idle-rounds); 0 for a single window.
	Rounds int `json:"rounds,omitempty"`
}

// rss is the window's peak resident memory: of the operator's whole tree where the results have
// it (PeakTreeRSSMiB), else of the operator process.
func (w IdleWindow) rss() float64 { return max(w.PeakRSSMiB, w.PeakTreeRSSMiB) }

// rssNote says what rss counted.
func (w IdleWindow) rssNote() string {
	if w.PeakTreeRSSMiB == 0 {
		return "the operator process"
	}
	return fmt.Sprintf("the operator and its child processes (at most %d processes; the operator alone %.0f MiB)", w.PeakProcesses, w.PeakRSSMiB)
}

// PreviousRun is what the report keeps of an earlier run: where and when, and its figures.
type PreviousRun struct {
	Commit string    `json:"commit"`
	Date   time.Time `json:"date"`
	// Go and PulumiCLI: the earlier run's Go release and pulumi CLI version, as Versions has them.
	Go        string   `json:"go,omitempty"`
	PulumiCLI string   `json:"pulumiCLI,omitempty"`
	Figures   []Figure `json:"figures"`
}

// readResults reads a results.json and judges its figures again (figures), as the doc shows
// them. Errors: the file cannot be read or is not a results.json.
func readResults(path string) (*Results, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Figures = r.figures()
	if r.Beside != nil {
		r.Beside.Figures = r.besideFigures()
	}
	return &r, nil
}

// loadPrevious reads an earlier run's results.json into r.Previous.
func (r *Results) loadPrevious(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var prev Results
	if err := json.Unmarshal(raw, &prev); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	r.Previous = &PreviousRun{Commit: prev.Versions.Operator, Date: prev.Date, Go: prev.Versions.Go, PulumiCLI: prev.Versions.PulumiCLI, Figures: prev.Figures}
	return nil
}

// CLIStart is the cost of starting the pulumi CLI at all: `pulumi version` with the GOGC the
// stack Manager gives the CLI, median of Samples; and KeyDerivation, the seconds one derivation
// of the passphrase secrets provider's key takes (the SDK's config.NewSymmetricCrypterFromPassphrase,
// PBKDF2-SHA256 with 1,000,000 iterations, which every CLI run that opens a stack does), median
// of Samples; zero in a results.json without it.
type CLIStart struct {
	Wall          float64 `json:"wallSeconds"`
	CPU           float64 `json:"cpuSeconds"`
	Samples       int     `json:"samples"`
	KeyDerivation float64 `json:"keyDerivationSeconds,omitempty"`
	// GOGC is the GOGC the CLI ran with (stack.ChildGOGC unless the bench's environment set
	// one); empty in a results.json without it.
	GOGC string `json:"gogc,omitempty"`
}

// ProfileRun is one operation with every pulumi CLI run it made.
type ProfileRun struct {
	Label        string    `json:"label"`
	TotalSeconds float64   `json:"totalSeconds"`
	CLI          []CLIStep `json:"cli"`
	CLIWall      float64   `json:"cliWallSeconds"`
	CLICPU       float64   `json:"cliCPUSeconds"`
}

// CLIStep is one pulumi CLI run.
type CLIStep struct {
	Command string  `json:"command"`
	Wall    float64 `json:"wall"`
	CPU     float64 `json:"cpu"`
	Exit    int     `json:"exit"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// judge sets f's status: MET when ok, else NOT MET.
func judge(f Figure, ok bool) Figure {
	if ok {
		f.Status = "MET"
	} else {
		f.Status = "NOT MET"
	}
	return f
}

// failed is the row of a figure that could not be measured, and why.
func failed(id, name, target, why string) Figure {
	return Figure{ID: id, Name: name, Target: target, Status: "FAILED", Note: why}
}

// figures turns the results into table lines, each judged against its target.
func (r *Results) figures() []Figure {
	var out []Figure
	if l := r.Latency; l != nil {
		out = append(out,
			judge(Figure{ID: "cr_ready_ratio", Name: "1. new CR to Ready vs the engine run of the same create (median)", Value: l.OperatorMedian, Unit: "s",
				Floor: l.FloorMedian, Ratio: l.Ratio, Target: "ratio <= 1.25"}, l.Ratio <= 1.25),
			judge(Figure{ID: "cr_ready", Name: "1. new CR to Ready (median)", Value: l.OperatorMedian, Unit: "s",
				Target: "< 1.6 s"}, l.OperatorMedian < 1.6))
	} else if r.phaseRan("latency") {
		out = append(out, failed("cr_ready", "1. new CR to Ready", "ratio <= 1.25, < 1.6 s", "not measured"))
	}
	out = append(out, r.burstFigures(false)...)
	out = append(out, r.burstFigures(true)...)
	if i := r.Idle; i != nil {
		if len(i.Windows) == 0 {
			out = append(out, failed("idle", i.name(), "0 runs, < 200 MiB", "not measured"))
		}
		for j, w := range i.Windows {
			out = append(out, idleWindowFigures(i.name(), w, cond(j > 0, "_restart", ""))...)
		}
	}
	if d := r.Drift; d != nil {
		out = append(out, judge(Figure{ID: "drift_repair", Name: "4. drift repair: kubectl scale to spec.replicas back (median)", Value: d.OperatorMedian, Unit: "s",
			Floor: d.FloorMedian, Ratio: d.Ratio, Target: "< 2 s", Note: "floor: the engine run of an up --refresh after the same scale"}, d.OperatorMedian < 2))
	}
	if c := r.Change; c != nil {
		out = append(out, judge(Figure{ID: "change", Name: "5. replicaCount change to Ready vs the engine run of the same change (median)", Value: c.OperatorMedian, Unit: "s",
			Floor: c.FloorMedian, Ratio: c.Ratio, Target: "ratio <= 1.2"}, c.Ratio <= 1.2))
	}
	if pg := r.Postgres; pg != nil {
		if l := pg.Latency; l != nil {
			out = append(out,
				judge(Figure{ID: "pg_cr_ready_ratio", Name: "1. PostgreSQL backend: new CR to Ready vs the engine run of the same create (median)", Value: l.OperatorMedian, Unit: "s",
					Floor: l.FloorMedian, Ratio: l.Ratio, Target: "ratio <= 1.25"}, l.Ratio <= 1.25),
				judge(Figure{ID: "pg_cr_ready", Name: "1. PostgreSQL backend: new CR to Ready (median)", Value: l.OperatorMedian, Unit: "s",
					Target: "< 1.6 s"}, l.OperatorMedian < 1.6))
		}
		if c := pg.Change; c != nil {
			out = append(out, judge(Figure{ID: "pg_change", Name: "5. PostgreSQL backend: replicaCount change to Ready vs the engine run of the same change (median)", Value: c.OperatorMedian, Unit: "s",
				Floor: c.FloorMedian, Ratio: c.Ratio, Target: "ratio <= 1.2"}, c.Ratio <= 1.2))
		}
	} else if r.phaseRan("postgres") {
		out = append(out, failed("pg_cr_ready", "1 and 5 on the PostgreSQL backend", "as on the file backend", "not measured"))
	}
	return out
}

// name is what the idle figures are called: "3. idle, 1000 unchanged CRs", marked when the
// run reduced the count.
func (i *IdleResult) name() string {
	name := fmt.Sprintf("3. idle, %d unchanged CRs", i.CRs)
	if i.Reduced {
		name += fmt.Sprintf(" (REDUCED from %d)", i.Target)
	}
	return name
}

// idleWindowFigures are the figures of one idle window: Pulumi runs, operator CPU and peak RSS,
// with IDs idle_runs, idle_cpu and idle_rss followed by suffix ("" for the first window,
// "_restart" for the one after a restart).
func idleWindowFigures(name string, w IdleWindow, suffix string) []Figure {
	return []Figure{
		judge(Figure{ID: "idle_runs" + suffix, Name: name + ", 3 resyncs " + w.Label + ": Pulumi runs", Value: float64(w.Ups), Unit: "",
			Target: "= 0"}, w.Ups == 0),
		judge(Figure{ID: "idle_cpu" + suffix, Name: name + ", 3 resyncs " + w.Label + ": operator CPU", Value: w.CPUSeconds, Unit: "CPU s",
			Target: "< 5% of a core", Note: fmt.Sprintf("%.1f%% of one core over %.0f s, %.0f reconciles", w.CPUPercent, w.Seconds, w.Reconciles)}, w.CPUPercent < 5),
		judge(Figure{ID: "idle_rss" + suffix, Name: name + ", 3 resyncs " + w.Label + ": operator RSS (peak)", Value: w.rss(), Unit: "MiB",
			Target: "< 200 MiB", Note: w.rssNote()}, w.rss() < 200),
	}
}

// reading explains the figures from the rest of the results: what limits those that miss
// their targets.
func (r *Results) reading() []string {
	var out []string
	if l := r.Latency; l != nil {
		if r.Settings.OperatorEngineHost {
			out = append(out, fmt.Sprintf("Figure 1: the operator takes %.2f s where the `pulumi up` engine run of the same create alone takes %.2f s (ratio %.2f). "+
				"The operator ran with its default, the engine host beside its binary (figures 1, 4, 5 and PostgreSQL's): its up is the same engine run without the CLI's start "+
				"and, from a stack's second up on, without the key derivation that the floor's CLI process pays, hence a ratio below 1 where the operator's own work "+
				"(informer, workqueue, finalizer, status writes, the creation of a new stack) is less than those.",
				l.OperatorMedian, l.FloorMedian, l.Ratio))
		} else {
			out = append(out, fmt.Sprintf("Figure 1: the operator takes %.2f s where the `pulumi up` engine run of the same create alone takes %.2f s (ratio %.2f): "+
				"what it adds (informer, workqueue, finalizer, status writes, the creation of a new stack) is the part before and after the up in the breakdown below.",
				l.OperatorMedian, l.FloorMedian, l.Ratio))
		}
		if up, other := cliSplit(r.Profile); up > 0 {
			out = append(out, fmt.Sprintf("Of the pulumi CLI time of the profiled operations, the `pulumi up` engine runs are %.0f%%; the other %.0f%% are the other CLI runs "+
				"(the table in Profile names them).", 100*up/(up+other), 100*other/(up+other)))
		}
	}
	if len(r.Bursts) > 0 {
		var best *BurstResult
		for i := range r.Bursts {
			b := &r.Bursts[i]
			if b.Error == "" && !b.EngineHost && (best == nil || b.Seconds < best.Seconds) {
				best = b
			}
		}
		if best != nil && r.FloorCPUSeconds > 0 && best.Seconds > 0 {
			per := best.cpuPerUp()
			cores := float64(r.Machine.CPUs)
			x := fmt.Sprintf("Figure 2 with every up a `pulumi up` process (--engine-host none): the best burst (--workers %d) took %.0f s against a CPU floor of %.0f s (%.2fx). During it the machine was %.0f%% busy: "+
				"the operator's processes used %.0f CPU s (%.2f per up, %.2fx the raw up's %.2f%s), the cluster's processes %.0f, other work %.0f. "+
				"Without other work, operator and cluster alone need %.0f s of %d cores.",
				best.Workers, best.Seconds, best.FloorSeconds, best.Ratio, 100*best.MachineBusyCPUSeconds/(best.Seconds*cores),
				best.OperatorCPUSeconds, per, per/r.FloorCPUSeconds, r.FloorCPUSeconds, selfNote(best.OperatorSelfCPUSeconds), best.ClusterCPUSeconds, best.OtherCPUSeconds,
				(best.OperatorCPUSeconds+best.ClusterCPUSeconds)/cores, r.Machine.CPUs)
			if best.Ratio > 1.25 {
				switch {
				case best.MachineBusyCPUSeconds > 0 && best.OtherCPUSeconds/best.MachineBusyCPUSeconds > 0.25:
					x += " Most of the gap is other work on the machine."
				default:
					x += " The gap is CPU per up above the raw up's (many pulumi processes at once on few cores) and the cluster's own CPU, which the floor leaves out."
				}
			}
			out = append(out, x)
		}
	}
	var host *BurstResult
	for i := range r.Bursts {
		if b := &r.Bursts[i]; b.Error == "" && b.EngineHost && (host == nil || b.Seconds < host.Seconds) {
			host = b
		}
	}
	if host != nil && r.FloorCPUSeconds > 0 && host.Seconds > 0 {
		per := host.cpuPerUp()
		out = append(out, fmt.Sprintf("Figure 2 with the engine host (the operator's default): the best burst (--workers %d) took %.0f s against the same CPU floor (%.2fx), "+
			"peak RSS %.0f MiB: the operator's processes used %.0f CPU s (%.2f per up, %.2fx the raw CLI up's %.2f), the cluster's %.0f. "+
			"What an up costs there is the engine run in a warm process and the provider plugin each up starts; the CLI's start and the per-run key derivation are gone.",
			host.Workers, host.Seconds, host.Ratio, host.PeakTreeRSSMiB, host.OperatorCPUSeconds, per, per/r.FloorCPUSeconds, r.FloorCPUSeconds, host.ClusterCPUSeconds))
	}
	if i := r.Idle; i != nil && len(i.Windows) > 0 {
		w := i.Windows[0]
		out = append(out, fmt.Sprintf("Figure 3: %d objects idle cost %d Pulumi runs over 3 resyncs, %.1f%% of one core (%.0f reconciles) and %.0f MiB resident.",
			i.CRs, w.Ups, w.CPUPercent, w.Reconciles, w.rss()))
	}
	if d := r.Drift; d != nil {
		out = append(out, fmt.Sprintf("Figure 4: drift is repaired %.2f s after the scale (raw `up --refresh`: %.2f s): the owned-object informer sees the change at once, and the provider patches spec.replicas early in the up.",
			d.OperatorMedian, d.FloorMedian))
	}
	return out
}

// burstFigures are figure 2's rows for the bursts without the engine host (host false) or with
// it: one per worker count, then the best (shortest) burst judged against the targets, CPU per
// up and failed reconciles over the group. None when the group did not run.
func (r *Results) burstFigures(host bool) []Figure {
	var out []Figure
	best := -1
	errs := 0.0
	ran := false
	label, id := "", ""
	if host {
		label, id = " with the engine host", "host_"
	}
	for i, b := range r.Bursts {
		if b.EngineHost != host {
			continue
		}
		ran = true
		name := fmt.Sprintf("2. burst of %d CRs%s, --workers %d", b.CRs, label, b.Workers)
		fid := fmt.Sprintf("burst_%sw%d", id, b.Workers)
		if b.Error != "" {
			out = append(out, failed(fid, name, "", b.Error))
			continue
		}
		errs += b.ReconcileErrors
		out = append(out, Figure{ID: fid, Name: name, Value: b.Seconds, Unit: "s",
			Floor: b.FloorSeconds, Ratio: b.Ratio, Status: "INFO",
			Note: fmt.Sprintf("peak RSS %.0f MiB (operator %.0f MiB); CPU s: operator tree %.0f, cluster %.0f, other work %.0f",
				b.PeakTreeRSSMiB, b.PeakOperatorRSSMiB, b.OperatorCPUSeconds, b.ClusterCPUSeconds, b.OtherCPUSeconds)})
		if best < 0 || b.Seconds < r.Bursts[best].Seconds {
			best = i
		}
	}
	if !ran || best < 0 {
		return out
	}
	b := r.Bursts[best]
	perUp := r.burstCPUPerUp(host)
	return append(out,
		judge(Figure{ID: "burst_" + id + "best", Name: fmt.Sprintf("2. burst%s, best (--workers %d) vs CPU floor", label, b.Workers), Value: b.Seconds, Unit: "s",
			Floor: b.FloorSeconds, Ratio: b.Ratio, Target: "ratio <= 1.25"}, b.Ratio > 0 && b.Ratio <= 1.25),
		judge(Figure{ID: "burst_" + id + "best_seconds", Name: fmt.Sprintf("2. burst%s, best (--workers %d)", label, b.Workers), Value: b.Seconds, Unit: "s",
			Target: "< 60 s"}, b.Seconds > 0 && b.Seconds < 60),
		judge(Figure{ID: "burst_" + id + "best_rss", Name: fmt.Sprintf("2. burst%s, best (--workers %d): peak RSS of the operator's process tree", label, b.Workers), Value: b.PeakTreeRSSMiB, Unit: "MiB",
			Target: "< 1024 MiB"}, b.PeakTreeRSSMiB > 0 && b.PeakTreeRSSMiB < 1024),
		Figure{ID: "burst_" + id + "cpu_per_up", Name: fmt.Sprintf("2. burst%s: operator CPU per up vs raw up CPU (all worker counts)", label), Value: perUp, Unit: "CPU s",
			Floor: r.FloorCPUSeconds, Ratio: perUp / max(r.FloorCPUSeconds, 1e-9), Status: "INFO",
			Note: "the wall-time ratio without contention from other work"},
		judge(Figure{ID: "burst_" + id + "errors", Name: fmt.Sprintf("2. burst%s: failed reconciles (all worker counts)", label), Value: errs, Unit: "",
			Target: "= 0"}, errs == 0))
}

// burstCPUPerUp is the operator tree's CPU per up over every burst without the engine host
// (host false) or with it.
func (r *Results) burstCPUPerUp(host bool) float64 {
	cpu, ups := 0.0, 0
	for _, b := range r.Bursts {
		if b.Error == "" && b.EngineHost == host {
			cpu += b.OperatorCPUSeconds
			ups += b.Ups
		}
	}
	if ups == 0 {
		return 0
	}
	return cpu / float64(ups)
}

func (r *Results) phaseRan(p string) bool {
	return slices.Contains(strings.Split(r.Settings.Phases, ","), p)
}

func fmtValue(v float64, unit string) string {
	switch {
	case unit == "":
		return fmt.Sprintf("%.0f", v)
	case unit == "MiB":
		return fmt.Sprintf("%.0f MiB", v)
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

func fmtFloor(f Figure) (floor, ratio string) {
	if f.Floor > 0 {
		floor = fmtValue(f.Floor, f.Unit)
	}
	if f.Ratio > 0 {
		ratio = fmt.Sprintf("%.2fx", f.Ratio)
	}
	return floor, ratio
}

// printTable writes the figures as an aligned table.
func (r *Results) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tFLOOR\tRATIO\tTARGET\tSTATUS\tNOTE")
	for _, f := range r.Figures {
		floor, ratio := fmtFloor(f)
		v := fmtValue(f.Value, f.Unit)
		if f.Status == "FAILED" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, v, floor, ratio, f.Target, f.Status, f.Note)
	}
	tw.Flush()
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func jsonDecoder(r io.Reader) *json.Decoder { return json.NewDecoder(r) }

// docSkeleton is the skeleton of docs/benchmarks.md, a text/template that markdown fills with a
// docData.
//
//go:embed benchmarks.md.tmpl
var docSkeleton string

// docTemplate is docSkeleton parsed.
var docTemplate = template.Must(template.New("benchmarks.md.tmpl").Parse(docSkeleton))

// docData is what benchmarks.md.tmpl renders: the results, with what the doc shows of them
// computed here (formatted cells, Markdown-escaped text, sums and shares).
type docData struct {
	*Results
	// Plots are the run's plots (plotsFor), files in PlotsDir beside the doc (writePlots).
	Plots    []plotRef
	PlotsDir string
	// Generated is the run's date as the doc's first paragraph gives it, RunDate as the table
	// of versions does (both UTC); Minutes is how long the run took.
	Generated, RunDate string
	Minutes            float64
	// Rows are the lines of the table of figures, NoteLines and BrokenLines the notes below
	// it, escaped for Markdown.
	Rows                   []figureRow
	NoteLines, BrokenLines []string
	TwoRuns                *twoRuns
	// SideBySide is this build beside another measured in turn in the same run (--beside).
	SideBySide *twoRuns
	WorseBy    float64
	Reading    []string
	// The tables of the figures measured against a floor; nil where a figure was not measured.
	LatencyTable, DriftTable, ChangeTable, PgLatencyTable, PgChangeTable *pairView
	ProfileTable                                                         *profileView
	// HelperWall is the median wall time of the stack-init helper's runs in the profile, 0
	// when none ran.
	HelperWall  float64
	BurstRows   []burstRow
	IdleWindows []IdleWindow // the idle windows, then those of --idle-compare
	// PoolLabel and StackInitLabel are the names the doc quotes of the idle objects' label and
	// of the stack-init helper's runs in the profile.
	PoolLabel, StackInitLabel string
}

// figureRow is a Figure as the doc's table shows it.
type figureRow struct {
	Name, Value, Floor, Ratio, Target, Status, Note string
}

// twoRuns compares the figures of this run with those of an earlier one (--previous).
type twoRuns struct {
	// SameCommit: both runs measured the same commit. A "-dirty" tree (git describe's mark) is
	// the same code when only this doc differed; the mark stays in Commit, so a reader can tell.
	SameCommit   bool
	Commit, Date string
	// Versions: the earlier run's Go release and pulumi CLI when either differs from this run's
	// ("go1.26.8, pulumi CLI v3.255.0"), else "".
	Versions string
	Rows     []twoRunsRow
	// Worse counts the rows where this build is worse by more than worseBy percent (the
	// side-by-side table of --beside only).
	Worse int
}

// twoRunsRow is a figure both runs have, formatted, and how far apart they are (percent of
// the earlier run's value).
type twoRunsRow struct {
	Name, This, Other string
	Percent           float64
	// Unlike says the two figures are of different things (a "best" burst at another worker
	// count in each): shown, never marked worse.
	Unlike bool
}

// Marked says the row is worse than the other build by more than worseBy percent, of the
// same thing.
func (r twoRunsRow) Marked() bool { return r.Percent > worseBy && !r.Unlike }

// pairView is a PairResult as its table shows it: the samples joined, the floor's CPU only
// where the figure shows it ("" otherwise).
type pairView struct {
	*PairResult
	OperatorSamples, FloorSamples, FloorCPUSamples string
	FloorCPUMedian                                 float64
}

// profileView is the CLI profile: one column per operation (Runs), one row per CLI command.
type profileView struct {
	Runs  []ProfileRun
	Rows  []profileRow
	Split *cliShare // nil when no `pulumi up` ran
	Start *CLIStart
}

// profileRow is one CLI command with, per operation, its runs ("; "-joined, "" when none).
type profileRow struct {
	Command string
	Cells   []string
}

// cliShare is the share of the profile's CLI wall time spent in `pulumi up` and in the other
// CLI runs, in percent.
type cliShare struct{ UpPercent, OtherPercent float64 }

// burstRow is a burst's row: its worker count, marked when with the engine host, and why it
// failed (Markdown-escaped) or its figures.
type burstRow struct {
	BurstResult
	Label, Failure string
	CPUPerUp       float64
	// Rounds are the seconds of every round ("33.0 s, 30.0 s, 27.0 s") when there was more
	// than one, else "".
	Rounds string
}

// markdown renders docs/benchmarks.md from benchmarks.md.tmpl. Errors: the template does not fit
// docData.
func (r *Results) markdown() (string, error) {
	var s strings.Builder
	if err := docTemplate.Execute(&s, r.docData()); err != nil {
		return "", fmt.Errorf("render benchmarks.md.tmpl: %w", err)
	}
	return s.String(), nil
}

// docData computes what the doc shows of r.
func (r *Results) docData() *docData {
	d := &docData{
		Results:        r,
		Plots:          plotsFor(r),
		PlotsDir:       plotsDir,
		Generated:      r.Date.UTC().Format("2006-01-02 15:04 MST"),
		RunDate:        r.Date.UTC().Format(time.RFC3339),
		Minutes:        r.Seconds / 60,
		Reading:        r.reading(),
		PoolLabel:      PoolLabel,
		StackInitLabel: stackInitLabel,
	}
	for _, f := range r.Figures {
		floor, ratio := fmtFloor(f)
		row := figureRow{Name: f.Name, Value: fmtValue(f.Value, f.Unit), Floor: floor, Ratio: ratio, Target: f.Target, Status: f.Status, Note: mdEscape(f.Note)}
		if f.Status == "FAILED" {
			row.Value = "-"
		}
		if f.Status == "MET" || f.Status == "NOT MET" || f.Status == "FAILED" {
			row.Status = "**" + f.Status + "**"
		}
		d.Rows = append(d.Rows, row)
	}
	for _, n := range r.Notes {
		d.NoteLines = append(d.NoteLines, mdEscape(n))
	}
	for _, n := range r.Broken {
		d.BrokenLines = append(d.BrokenLines, mdEscape(n))
	}
	if pr := r.Previous; pr != nil {
		d.TwoRuns = r.compare(pr)
	}
	d.SideBySide, d.WorseBy = r.sideBySide(), worseBy
	d.LatencyTable = newPairView(r.Latency, true)
	d.DriftTable = newPairView(r.Drift, false)
	d.ChangeTable = newPairView(r.Change, true)
	if pg := r.Postgres; pg != nil {
		d.PgLatencyTable = newPairView(pg.Latency, true)
		d.PgChangeTable = newPairView(pg.Change, true)
	}
	if len(r.Profile) > 0 {
		d.ProfileTable = newProfileView(r.Profile)
		d.ProfileTable.Start = r.CLIStart
		d.HelperWall = helperWall(r.Profile)
	}
	for _, b := range r.Bursts {
		row := burstRow{BurstResult: b, Label: strconv.Itoa(b.Workers), Failure: mdEscape(b.Error), CPUPerUp: b.cpuPerUp(), Rounds: roundsText(b.RoundSeconds)}
		if b.EngineHost {
			row.Label += ", engine host"
		}
		d.BurstRows = append(d.BurstRows, row)
	}
	if i := r.Idle; i != nil {
		d.IdleWindows = append(slices.Clone(i.Windows), i.Compare...)
	}
	return d
}

// compare sets this run's figures beside those of the earlier run pr; a figure either run
// lacks, or whose value is 0 in either, is left out. nil when no figure is left (an earlier
// run of other phases, such as `make bench-scale`'s): the doc then has no such section,
// rather than an empty table.
func (r *Results) compare(pr *PreviousRun) *twoRuns {
	t := &twoRuns{
		SameCommit: strings.TrimSuffix(pr.Commit, "-dirty") == strings.TrimSuffix(r.Versions.Operator, "-dirty"),
		Commit:     pr.Commit,
		Date:       pr.Date.UTC().Format("2006-01-02 15:04 MST"),
	}
	if (pr.Go != "" && pr.Go != r.Versions.Go) || (pr.PulumiCLI != "" && pr.PulumiCLI != r.Versions.PulumiCLI) {
		t.Versions = pr.Go + ", pulumi CLI " + pr.PulumiCLI
	}
	t.Rows = figureRows(r.Figures, pr.Figures)
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}

// figureRows sets each of figures beside the figure of others with its ID, in the order of
// figures; a figure others lack, or whose value is 0 in either, is left out (nothing to divide
// by, or nothing measured).
func figureRows(figures, others []Figure) []twoRunsRow {
	before := map[string]Figure{}
	for _, f := range others {
		before[f.ID] = f
	}
	var rows []twoRunsRow
	for _, f := range figures {
		b, ok := before[f.ID]
		if !ok || f.Value == 0 || b.Value == 0 {
			continue
		}
		other := fmtValue(b.Value, b.Unit)
		if b.Name != f.Name {
			// A "best" figure of another worker count ("--workers 4" there, "--workers 8"
			// here): the two values are of different runs of the burst, which the row says.
			other += " (" + b.Name + ")"
		}
		rows = append(rows, twoRunsRow{Name: f.Name, This: fmtValue(f.Value, f.Unit), Other: other, Percent: 100 * (f.Value - b.Value) / b.Value,
			Unlike: b.Name != f.Name})
	}
	return rows
}

// newPairView is pr's table, with the floor's CPU when cpu is set and pr has it; nil for a nil
// pr.
func newPairView(pr *PairResult, cpu bool) *pairView {
	if pr == nil {
		return nil
	}
	v := &pairView{PairResult: pr, OperatorSamples: joinF(pr.Operator), FloorSamples: joinF(pr.Floor)}
	if cpu && len(pr.FloorCPU) > 0 {
		v.FloorCPUSamples, v.FloorCPUMedian = joinF(pr.FloorCPU), median(pr.FloorCPU)
	}
	return v
}

// newProfileView lays the CLI runs of prs out as one row per command (in the order they first
// ran) and one column per operation; a cell holds every run of its command in its operation.
func newProfileView(prs []ProfileRun) *profileView {
	v := &profileView{Runs: prs}
	var cmds []string
	for _, pr := range prs {
		for _, c := range pr.CLI {
			if !slices.Contains(cmds, c.Command) {
				cmds = append(cmds, c.Command)
			}
		}
	}
	for _, cmd := range cmds {
		row := profileRow{Command: cmd}
		for _, pr := range prs {
			var cells []string
			for _, c := range pr.CLI {
				if c.Command != cmd {
					continue
				}
				x := fmt.Sprintf("%.2f s, %.2f CPU s", c.Wall, c.CPU)
				if c.Exit != 0 {
					x += fmt.Sprintf(" (exit %d)", c.Exit)
				}
				cells = append(cells, x)
			}
			row.Cells = append(row.Cells, strings.Join(cells, "; "))
		}
		v.Rows = append(v.Rows, row)
	}
	if up, other := cliSplit(prs); up > 0 {
		v.Split = &cliShare{UpPercent: 100 * up / (up + other), OtherPercent: 100 * other / (up + other)}
	}
	return v
}

// roundsText is xs as "33.0 s, 30.0 s, 27.0 s"; "" for fewer than two.
func roundsText(xs []float64) string {
	if len(xs) < 2 {
		return ""
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.1f s", x)
	}
	return strings.Join(parts, ", ")
}

func joinF(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// cliSplit sums the wall time of `pulumi up` and of every other CLI run in the profile.
func cliSplit(prs []ProfileRun) (up, other float64) {
	for _, pr := range prs {
		for _, c := range pr.CLI {
			if strings.HasPrefix(c.Command, "up") {
				up += c.Wall
			} else {
				other += c.Wall
			}
		}
	}
	return up, other
}

// stackInitLabel is the command under which a profile lists the runs of the stack-init helper,
// which made new stacks in operator builds that had one; the doc renders such a results.json
// with the helper's time.
const stackInitLabel = "stack-init-helper"

// helperWall is the median wall time of the stack-init helper's runs in prs; 0 when none ran.
func helperWall(prs []ProfileRun) float64 {
	var walls []float64
	for _, pr := range prs {
		for _, c := range pr.CLI {
			if c.Command == stackInitLabel {
				walls = append(walls, c.Wall)
			}
		}
	}
	if len(walls) == 0 {
		return 0
	}
	return median(walls)
}

func mdEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func selfNote(self float64) string {
	if self <= 0 {
		return ""
	}
	return fmt.Sprintf("; the operator process itself %.1f CPU s", self)
}
