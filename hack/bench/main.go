// Command bench measures pulumi-operator against a local simulated cluster: a new CR to Ready,
// bursts of 100 CRs at several worker counts, an idle operator over many unchanged CRs, drift
// repair and a change, each against a floor measured side by side in the same run (the same
// program through stack.Manager.Up, or its CPU cost). It prints a table of every figure against
// its target (MET / NOT MET), writes the results as JSON and renders docs/benchmarks.md from
// benchmarks.md.tmpl (--render alone renders it again from a results.json).
//
// It and the soak (soak/) are a module of their own (go.mod here), which replaces the operator's
// module with the checkout it sits in: what only they use (procfs, expfmt) is no dependency of
// the operator's.
//
// `make bench` runs it through hack/bench/run.sh, which starts a cluster of its own and
// builds the operator. Exit codes: 0 the run finished (whatever the figures), 1 something
// broke, 2 bad usage, 3 SKIP (the Kubernetes provider plugin is not installed).
//
// Run as `pulumi` (through a symlink) with PULUMI_BENCH_REAL_CLI set, it is instead a wrapper
// around the real CLI that logs every run's command, wall time and CPU (see phaseProfile).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Exit codes.
const (
	exitOK     = 0
	exitBroken = 1
	exitUsage  = 2
	exitSkip   = 3
)

// allPhases in the order they run: those of `make bench`.
var allPhases = []string{"latency", "drift", "change", "postgres", "profile", "burst", "idle"}

// scalePhases run only when asked (`make bench-scale`): the cost curve and the shards.
var scalePhases = []string{"scale", "shards", "wave"}

type options struct {
	samples, warmup, burst, idle, idleWorkers int
	burstWorkers                              []int
	hostWorkers                               []int  // bursts again with --engine-host at these
	engineHost                                string // the engine host beside --pulumi, "" if none
	resync, budget                            time.Duration
	phases                                    map[string]bool
	keepState                                 bool
	postgresURL                               string
	idleCompare                               []candidate
	burstRounds                               int // each burst this many times (the median's row)
	idleRounds                                int // idle windows after a restart (the median's figures)
	besideDir, besideCommit                   string
	scaleBursts, scaleIdle                    []int  // phase scale
	scaleBackend                              string // phase scale: "postgres" or "file"
	shards, shardObjects                      int    // phase shards
	waveObjects                               int    // phase wave
}

// candidate is another operator build to measure over the idle objects.
type candidate struct{ label, binary string }

func main() {
	if real := os.Getenv(wrapperReal); real != "" && filepath.Base(os.Args[0]) == "pulumi" {
		os.Exit(runWrapper(real))
	}
	os.Exit(run())
}

func notifySignals(c chan<- os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

func run() int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	repo := fs.String("repo", ".", "repository root (config/crd, Pulumi.yaml)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster to measure on (its own: the bench fills it with objects)")
	clusterDir := fs.String("cluster-dir", "", "the cluster's CLUSTER_DIR, to count its processes' CPU (optional)")
	operatorBin := fs.String("operator", "bin/pulumi-operator", "the operator binary")
	operatorCommit := fs.String("operator-commit", "", "the commit --operator was built from, for the doc (default: its build information, else git describe of --repo)")
	pulumi := fs.String("pulumi", "bin/pulumi", "the pinned pulumi CLI")
	out := fs.String("out", ".local/bench", "directory for results.json, logs and state")
	docs := fs.String("docs", "docs/benchmarks.md", "Markdown file to regenerate; empty for none")
	samples := fs.Int("samples", 5, "samples of figures 1, 4 and 5 (medians)")
	warmup := fs.Int("warmup", 1, "warm-up pairs before figure 1's samples")
	burst := fs.Int("burst", 100, "CRs per burst")
	burstWorkers := fs.String("burst-workers", "1,2,4,8", "worker counts of the bursts with --engine-host none; empty for none")
	hostWorkers := fs.String("engine-host-workers", "2,4", "worker counts of the bursts run again with --engine-host (the pulumi-operator-engine beside --pulumi); empty for none")
	idle := fs.Int("idle", 1000, "unchanged CRs for the idle figure (fewer if the budget cannot pay for creating them)")
	idleWorkers := fs.Int("idle-workers", 8, "--workers of the idle operator")
	resync := fs.Duration("resync", 10*time.Second, "--resync of the idle operator")
	budget := fs.Duration("budget", 50*time.Minute, "time the whole run may take; the idle figure uses fewer CRs to fit (0: no limit)")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run: "+strings.Join(allPhases, ",")+"; or "+strings.Join(scalePhases, ",")+" (make bench-scale)")
	scaleBursts := fs.String("scale-bursts", "100,300,1000", "phase scale: burst sizes, ascending (the largest is the idle curve's first objects)")
	scaleIdle := fs.String("scale-idle", "1000,3000,10000", "phase scale: idle object counts, ascending")
	scaleBackend := fs.String("scale-backend", "postgres", "phase scale: the operators' backend: postgres (--postgres-url, a table of its own) or file (the default backend, whose lookups list every stack: README, \"Which backend for a team\")")
	shardCount := fs.Int("shards", 3, "phase shards: operators, one label selector each, on the PostgreSQL backend")
	shardObjects := fs.Int("shard-objects", 1000, "phase shards: objects spread over the shards")
	waveObjects := fs.Int("wave-objects", 1000, "phase wave: the objects whose stacks the program upgrade reaches")
	idleCompare := fs.String("idle-compare", "", "LABEL=BINARY,...: after the idle windows, one more for each of these operator builds over the same objects")
	postgresURL := fs.String("postgres-url", os.Getenv("PULUMI_TEST_POSTGRES_URL"), "postgres:// backend of the postgres phase (figures 1 and 5 again); run.sh starts one")
	previous := fs.String("previous", "", "results.json of an earlier run: the doc shows how far apart the two runs are")
	beside := fs.String("beside", "", "bin/ directory of another build (pulumi-operator, pulumi, the engine host): measured in this run in turn with --operator, sample for sample and burst for burst, and set beside it figure by figure")
	besideCommit := fs.String("beside-commit", "", "the commit --beside was built from, for the doc (default: its build information)")
	idleRounds := fs.Int("idle-rounds", 1, "idle windows after a restart, each from a start of its own (with --beside: each build in turn); the figures are their medians")
	burstRounds := fs.Int("burst-rounds", 1, "run each burst this many times (with --beside: each build in turn); a burst's figures are its median round's")
	keep := fs.Bool("keep-state", false, "keep the operator's and the raw stacks' state directories")
	preflight := fs.Bool("preflight", false, "only check that the Kubernetes provider plugin is installed")
	render := fs.String("render", "", "only render: read this results.json, print the table and write --docs")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return exitUsage
	}
	if *render != "" {
		return renderOnly(*render, *docs)
	}
	// Every pulumi run of the bench, through the operator, the raw managers or the timing
	// wrapper, uses the Pulumi home where `make plugins` put the provider.
	if home := stack.DefaultPulumiHome(*pulumi); home != "" {
		_ = os.Setenv("PULUMI_HOME", home)
	}
	if p, err := stack.FindKubernetesPluginFor(*pulumi); err != nil {
		fmt.Printf("SKIP: the benchmarks need the Kubernetes provider plugin: %v\n", err)
		return exitSkip
	} else if *preflight {
		fmt.Println("bench: Kubernetes provider plugin:", p)
		return exitOK
	}
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "bench: --kubeconfig is required (hack/bench/run.sh starts a cluster and passes it)")
		return exitUsage
	}
	o := options{samples: *samples, warmup: *warmup, burst: *burst, idle: *idle, idleWorkers: *idleWorkers,
		resync: *resync, budget: *budget, phases: map[string]bool{}, keepState: *keep, postgresURL: *postgresURL,
		burstRounds: *burstRounds, idleRounds: *idleRounds, besideDir: *beside, besideCommit: *besideCommit}
	if err := checkRounds(o.burstRounds, o.idleRounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitUsage
	}
	for _, w := range strings.Split(*burstWorkers, ",") {
		if strings.TrimSpace(w) == "" {
			continue // "" runs no --engine-host none bursts (a scale run of the engine host only)
		}
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: --burst-workers %q: want a list of positive integers\n", *burstWorkers)
			return exitUsage
		}
		o.burstWorkers = append(o.burstWorkers, n)
	}
	for _, w := range strings.Split(*hostWorkers, ",") {
		if strings.TrimSpace(w) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: --engine-host-workers %q: want a list of positive integers\n", *hostWorkers)
			return exitUsage
		}
		o.hostWorkers = append(o.hostWorkers, n)
	}
	var err error
	if o.scaleBursts, err = positiveInts(*scaleBursts); err != nil {
		fmt.Fprintf(os.Stderr, "bench: --scale-bursts: %v\n", err)
		return exitUsage
	}
	if o.scaleIdle, err = positiveInts(*scaleIdle); err != nil {
		fmt.Fprintf(os.Stderr, "bench: --scale-idle: %v\n", err)
		return exitUsage
	}
	o.scaleBackend = *scaleBackend
	if err := checkScaleBackend(o.scaleBackend, o.postgresURL, slices.Contains(strings.Split(*phases, ","), "scale")); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return exitUsage
	}
	o.shards, o.shardObjects = *shardCount, *shardObjects
	o.waveObjects = *waveObjects
	if o.waveObjects < 4 {
		fmt.Fprintln(os.Stderr, "bench: --wave-objects must be at least 4 (the mid-wave objects come after a quarter)")
		os.Exit(exitUsage)
	}
	if o.shards < 1 || o.shardObjects < o.shards {
		fmt.Fprintln(os.Stderr, "bench: --shards must be positive and --shard-objects at least --shards")
		return exitUsage
	}
	for _, c := range strings.Split(*idleCompare, ",") {
		if c == "" {
			continue
		}
		label, bin, ok := strings.Cut(c, "=")
		abs, err := filepath.Abs(bin)
		if !ok || err != nil {
			fmt.Fprintf(os.Stderr, "bench: --idle-compare %q: want LABEL=BINARY\n", c)
			return exitUsage
		}
		o.idleCompare = append(o.idleCompare, candidate{label, abs})
	}
	for _, p := range strings.Split(*phases, ",") {
		if !contains(allPhases, p) && !contains(scalePhases, p) {
			fmt.Fprintf(os.Stderr, "bench: unknown phase %q (want %s)\n", p, strings.Join(append(slices.Clip(allPhases), scalePhases...), ","))
			return exitUsage
		}
		o.phases[p] = true
	}
	if o.samples < 1 || o.burst < 1 || o.idle < 0 {
		fmt.Fprintln(os.Stderr, "bench: --samples and --burst must be positive")
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h, err := newHost(procfs.DefaultMountPoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitBroken
	}
	b := &bench{clusterDir: *clusterDir, host: h, cores: runtime.NumCPU(), start: time.Now(), opts: o}
	for _, p := range []*string{repo, out, operatorBin, pulumi} {
		if *p, err = filepath.Abs(*p); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return exitUsage
		}
	}
	b.repo, b.out, b.operatorBin, b.pulumi = *repo, *out, *operatorBin, *pulumi
	b.operatorCommit = *operatorCommit
	if len(b.opts.hostWorkers) > 0 {
		p := filepath.Join(filepath.Dir(b.pulumi), stack.EngineHost)
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "bench: no engine host beside the pulumi CLI (%v): the bursts with --engine-host are left out (`make build` builds it, or pass --engine-host-workers '')\n", err)
			b.opts.hostWorkers = nil
		}
		b.opts.engineHost = p
	}
	b.stateDir, b.rawDir = filepath.Join(b.out, "state"), filepath.Join(b.out, "raw-state")
	b.under = &build{operator: b.operatorBin, pulumi: b.pulumi, engineHost: b.opts.engineHost}
	if o.besideDir != "" {
		if b.beside, err = besideBuild(o.besideDir, b.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return exitUsage
		}
	}
	code := b.run(ctx, *kubeconfig, *phases)
	b.stopAll()
	if !o.keepState {
		b.removeState()
	}
	if b.res != nil {
		b.res.Seconds = time.Since(b.start).Seconds()
		b.res.Figures = b.res.figures()
		if b.res.Beside != nil {
			b.res.Beside.Figures = b.res.besideFigures()
		}
		if *previous != "" {
			if err := b.res.loadPrevious(*previous); err != nil {
				fmt.Fprintln(os.Stderr, "bench: --previous:", err)
			}
		}
		fmt.Println()
		b.res.printTable(os.Stdout)
		b.res.printSideBySide(os.Stdout)
		for _, n := range b.res.Notes {
			fmt.Println("note:", n)
		}
		for _, n := range b.res.Broken {
			fmt.Println("BROKEN:", n)
		}
		jsonPath := filepath.Join(b.out, "results.json")
		if err := writeJSON(jsonPath, b.res); err != nil {
			fmt.Fprintln(os.Stderr, "bench: write results:", err)
			code = exitBroken
		} else {
			fmt.Println("results:", jsonPath)
		}
		if *docs != "" && b.res.Latency != nil {
			if err := writeDoc(*docs, b.res); err != nil {
				fmt.Fprintln(os.Stderr, "bench: write docs:", err)
				code = exitBroken
			} else {
				fmt.Println("docs:", *docs)
			}
		}
		if *docs != "" && b.res.Wave != nil {
			if err := writeWaveDoc(*docs, b.res); err != nil {
				fmt.Fprintln(os.Stderr, "bench: write docs:", err)
				code = exitBroken
			} else {
				fmt.Println("docs (wave section):", *docs)
			}
		}
		if *docs != "" && (b.res.Scale != nil || b.res.Shards != nil) {
			if err := writeScaleDoc(*docs, b.res); err != nil {
				fmt.Fprintln(os.Stderr, "bench: write docs:", err)
				code = exitBroken
			} else {
				fmt.Println("docs (scale section):", *docs)
			}
		}
		if len(b.res.Broken) > 0 {
			code = exitBroken
		}
	}
	fmt.Printf("bench: done in %.1f minutes\n", time.Since(b.start).Minutes())
	return code
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func cond(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// writeDoc renders r into the Markdown file at path, keeping its soak and scale sections
// (keepSections).
func writeDoc(path string, r *Results) error {
	md, err := r.markdown()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if _, err := writePlots(r, filepath.Join(filepath.Dir(path), plotsDir)); err != nil {
		return err
	}
	old, _ := os.ReadFile(path)
	if r.Scale != nil || r.Shards != nil {
		section, err := r.scaleSection()
		if err != nil {
			return err
		}
		if _, err := writeScalePlots(r, filepath.Join(filepath.Dir(path), plotsDir)); err != nil {
			return err
		}
		old = []byte(spliceSection(string(old), scaleBegin, scaleEnd, section))
	}
	return os.WriteFile(path, []byte(keepSections(string(old), md)), 0o644)
}

// The markers of the section `make soak` (hack/bench/soak) writes into docs/benchmarks.md. Their
// text is matched as it stands in docs/benchmarks.md: the same constants are in soak/main.go.
const (
	soakBegin = "<!-- soak: written by make soak (hack/soak); make bench keeps it -->"
	soakEnd   = "<!-- /soak -->"
	// The partition section: TestPartition's figures (make e2e-real), written from its log.
	partitionBegin = "<!-- partition: from make e2e-real (TestPartition); make bench keeps it -->"
	partitionEnd   = "<!-- /partition -->"
	// The tenants section: test/tenants' figures (the flood of look-alikes, the fair share),
	// written from their logs.
	tenantsBegin = "<!-- tenants: from test/tenants (TestFloodOfLookAlikes, TestFloodOfLabelledLookAlikes, TestFairShare); make bench keeps it -->"
	tenantsEnd   = "<!-- /tenants -->"
)

// keepSections is content with the scale, wave, soak, partition and tenants sections of old (the doc
// as it was), those it has, appended: a bench run regenerates its own figures and keeps those of
// `make bench-scale`, `make soak`, TestPartition and test/tenants, which take runs of their own.
// A section is found by its begin marker's name (markerName), so that a marker whose
// description was edited in the doc still keeps its section.
func keepSections(old, content string) string {
	content = strings.TrimRight(content, "\n") + "\n"
	for _, m := range [][2]string{{scaleBegin, scaleEnd}, {waveBegin, waveEnd}, {soakBegin, soakEnd}, {partitionBegin, partitionEnd}, {tenantsBegin, tenantsEnd}} {
		i, j := strings.Index(old, markerName(m[0])), strings.Index(old, m[1])
		if i < 0 || j < i {
			continue
		}
		content += "\n" + old[i:j+len(m[1])] + "\n"
	}
	return content
}

// markerName is the fixed part of a begin marker, "<!-- tenants:": the words after the colon
// describe the section.
func markerName(begin string) string {
	name, _, _ := strings.Cut(begin, ":")
	return name + ":"
}

// renderOnly prints the table of a results.json and writes docs from it.
func renderOnly(path, docs string) int {
	r, err := readResults(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitUsage
	}
	r.printTable(os.Stdout)
	r.printSideBySide(os.Stdout)
	if docs != "" && r.Latency == nil && (r.Scale != nil || r.Shards != nil) {
		// A make bench-scale run: only its section of the doc.
		if err := writeScaleDoc(docs, r); err != nil {
			fmt.Fprintln(os.Stderr, "bench: write docs:", err)
			return exitBroken
		}
		fmt.Println("docs (scale section):", docs)
	} else if docs != "" {
		if err := writeDoc(docs, r); err != nil {
			fmt.Fprintln(os.Stderr, "bench: write docs:", err)
			return exitBroken
		}
		fmt.Println("docs:", docs)
	}
	return exitOK
}

// positiveInts parses a comma-separated list of positive integers in ascending order; ""
// is the empty list.
func positiveInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("%q: want positive integers in ascending order", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// checkScaleBackend returns an error saying what to pass when --scale-backend is neither
// postgres nor file, or is postgres with no --postgres-url while phase scale runs.
func checkScaleBackend(backend, postgresURL string, scale bool) error {
	switch {
	case backend != "postgres" && backend != "file":
		return fmt.Errorf("--scale-backend %q: want postgres or file", backend)
	case backend == "postgres" && postgresURL == "" && scale:
		return errors.New("--scale-backend postgres needs --postgres-url (run.sh starts one), or pass --scale-backend file")
	}
	return nil
}

// checkRounds returns an error saying what to pass when --burst-rounds or --idle-rounds is
// below 1.
func checkRounds(burst, idle int) error {
	if burst < 1 {
		return fmt.Errorf("--burst-rounds %d: want 1 or more (the times each burst runs)", burst)
	}
	if idle < 1 {
		return fmt.Errorf("--idle-rounds %d: want 1 or more (the idle windows after a restart)", idle)
	}
	return nil
}
