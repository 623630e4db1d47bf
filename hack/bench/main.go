// Command bench measures pulumi-operator against a local simulated cluster (issue 8): a new
// CR to Ready, bursts of 100 CRs at several worker counts, an idle operator over many
// unchanged CRs, drift repair and a change, each against a floor measured side by side in the
// same run (the same program through stack.Manager.Up, or its CPU cost). It prints a table of
// every figure against its target (MET / NOT MET), writes the results as JSON and renders
// docs/benchmarks.md.
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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Exit codes.
const (
	exitOK     = 0
	exitBroken = 1
	exitUsage  = 2
	exitSkip   = 3
)

// allPhases in the order they run.
var allPhases = []string{"latency", "drift", "change", "profile", "burst", "idle"}

type options struct {
	samples, warmup, burst, idle, idleWorkers int
	burstWorkers                              []int
	resync, budget                            time.Duration
	phases                                    map[string]bool
	keepState                                 bool
	idleCompare                               []candidate
}

// candidate is another operator build to measure over the idle objects.
type candidate struct{ label, binary string }

// bench is one run.
type bench struct {
	repo, out, stateDir, rawDir string
	operatorBin, pulumi         string
	clusterDir                  string
	kube                        *kube
	raw                         *stack.Manager
	cores                       int
	floorCPU                    float64 // CPU seconds of one raw up of a new stack (median)
	rawClusterCPU               []float64
	res                         *Results
	start                       time.Time
	opts                        options
	running                     sync.Map // *operator -> struct{}
}

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
	pulumi := fs.String("pulumi", "bin/pulumi", "the pinned pulumi CLI")
	out := fs.String("out", ".local/bench", "directory for results.json, logs and state")
	docs := fs.String("docs", "docs/benchmarks.md", "Markdown file to regenerate; empty for none")
	samples := fs.Int("samples", 5, "samples of figures 1, 4 and 5 (medians)")
	warmup := fs.Int("warmup", 1, "warm-up pairs before figure 1's samples")
	burst := fs.Int("burst", 100, "CRs per burst")
	burstWorkers := fs.String("burst-workers", "1,2,4,8", "worker counts of the bursts")
	idle := fs.Int("idle", 1000, "unchanged CRs for the idle figure (fewer if the budget cannot pay for creating them)")
	idleWorkers := fs.Int("idle-workers", 8, "--workers of the idle operator")
	resync := fs.Duration("resync", 10*time.Second, "--resync of the idle operator")
	budget := fs.Duration("budget", 27*time.Minute, "time the whole run may take; the idle figure uses fewer CRs to fit (0: no limit)")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run: "+strings.Join(allPhases, ","))
	idleCompare := fs.String("idle-compare", "", "LABEL=BINARY,...: after the idle windows, one more for each of these operator builds over the same objects")
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
		resync: *resync, budget: *budget, phases: map[string]bool{}, keepState: *keep}
	for _, w := range strings.Split(*burstWorkers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: --burst-workers %q: want a list of positive integers\n", *burstWorkers)
			return exitUsage
		}
		o.burstWorkers = append(o.burstWorkers, n)
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
		if !contains(allPhases, p) {
			fmt.Fprintf(os.Stderr, "bench: unknown phase %q (want %s)\n", p, strings.Join(allPhases, ","))
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
	b := &bench{clusterDir: *clusterDir, cores: runtime.NumCPU(), start: time.Now(), opts: o}
	var err error
	for _, p := range []*string{repo, out, operatorBin, pulumi} {
		if *p, err = filepath.Abs(*p); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return exitUsage
		}
	}
	b.repo, b.out, b.operatorBin, b.pulumi = *repo, *out, *operatorBin, *pulumi
	b.stateDir, b.rawDir = filepath.Join(b.out, "state"), filepath.Join(b.out, "raw-state")
	code := b.run(ctx, *kubeconfig, *phases)
	b.stopAll()
	if !o.keepState {
		_ = os.RemoveAll(b.stateDir)
		_ = os.RemoveAll(b.rawDir)
	}
	if b.res != nil {
		b.res.Seconds = time.Since(b.start).Seconds()
		b.res.Figures = b.res.figures()
		fmt.Println()
		b.res.printTable(os.Stdout)
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
			if err := writeFile(*docs, b.res.markdown()); err != nil {
				fmt.Fprintln(os.Stderr, "bench: write docs:", err)
				code = exitBroken
			} else {
				fmt.Println("docs:", *docs)
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

// run sets up and runs the phases; a failed phase is recorded in Results.Broken and the
// others still run.
func (b *bench) run(ctx context.Context, kubeconfig, phases string) int {
	for _, f := range []string{b.operatorBin, b.pulumi} {
		if _, err := os.Stat(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v (run `make tools build`)\n", err)
			return exitUsage
		}
	}
	if err := os.Setenv(wrapperReal, b.pulumi); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitBroken
	}
	_ = os.RemoveAll(b.stateDir)
	_ = os.RemoveAll(b.rawDir)
	_ = os.RemoveAll(filepath.Join(b.out, "logs"))
	k, err := connect(kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitBroken
	}
	b.kube = k
	b.res = &Results{Date: b.start, Machine: machine(), Versions: b.versions(), Settings: Settings{
		Samples: b.opts.samples, Warmup: b.opts.warmup, LatencyWorkers: latencyWorkers, Burst: b.opts.burst,
		BurstWorkers: b.opts.burstWorkers, IdleTarget: b.opts.idle, IdleWorkers: b.opts.idleWorkers,
		Resync: b.opts.resync.String(), Budget: b.opts.budget.String(), Phases: phases}}
	b.load("start")
	b.logf("bench: %d CPUs, %s; pulumi %s; provider %s; Kubernetes %s", b.res.Machine.CPUs, b.res.Machine.CPUModel,
		b.res.Versions.PulumiCLI, b.res.Versions.ProviderPlugin, b.res.Versions.Kubernetes)

	setup := func() error {
		if err := k.installCRD(ctx, b.repo); err != nil {
			return err
		}
		if err := k.addFakeNode(ctx, "bench-node-1"); err != nil {
			return err
		}
		if err := k.startInformers(ctx); err != nil {
			return err
		}
		b.raw, err = stack.New(stack.Config{Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(b.rawDir, "backend"),
			WorkRoot: filepath.Join(b.rawDir, "workspaces"), PulumiPath: b.pulumi, ClusterName: "bench",
			Env: map[string]string{"KUBECONFIG": k.kubeconfig, "PULUMI_CONFIG_PASSPHRASE": "bench"}})
		if err != nil {
			return fmt.Errorf("create raw stack manager: %w", err)
		}
		return nil
	}
	if err := setup(); err != nil {
		b.broken("setup", err)
		return exitBroken
	}
	ph := b.opts.phases
	if ph["latency"] {
		b.logf("figure 1 (new CR to Ready)%s%s: %d samples after %d warm-up, alternating with raw ups",
			cond(ph["drift"], ", 4 (drift)", ""), cond(ph["change"], ", 5 (change)", ""), b.opts.samples, b.opts.warmup)
		if err := b.phaseLatency(ctx, ph["drift"], ph["change"]); err != nil {
			b.broken("latency/drift/change", err)
		}
		if l := b.res.Latency; l != nil {
			b.floorCPU = median(l.FloorCPU)
			b.res.FloorCPUSeconds = b.floorCPU
			if per := median(b.rawClusterCPU); per > 0 {
				b.res.ClusterCPU = map[string]any{"perUpSeconds": per,
					"floorWithClusterSeconds": (b.floorCPU + per) * float64(b.opts.burst) / float64(b.cores)}
			}
		}
		b.load("after figures 1, 4, 5")
	}
	if ph["profile"] && ctx.Err() == nil {
		b.logf("profile: pulumi CLI runs of one create and one change, operator and raw")
		if err := b.phaseProfile(ctx); err != nil {
			b.broken("profile", err)
		}
	}
	if b.floorCPU == 0 && (ph["burst"] || ph["idle"]) && ctx.Err() == nil {
		if err := b.measureFloorCPU(ctx); err != nil {
			b.broken("floor CPU", err)
		}
	}
	if ph["burst"] {
		for _, w := range b.opts.burstWorkers {
			if ctx.Err() != nil {
				break
			}
			b.logf("figure 2: burst of %d CRs at --workers %d", b.opts.burst, w)
			b.load(fmt.Sprintf("burst --workers %d, start", w))
			r := b.phaseBurst(ctx, w)
			if r.Error != "" {
				b.broken(fmt.Sprintf("burst --workers %d", w), errors.New(r.Error))
			}
			b.res.Bursts = append(b.res.Bursts, r)
			b.load(fmt.Sprintf("burst --workers %d, end", w))
		}
	}
	if ph["idle"] && ctx.Err() == nil {
		b.logf("figure 3: idle operator over up to %d unchanged CRs, 3 resyncs of %s, then a restart", b.opts.idle, b.opts.resync)
		b.load("idle, start")
		if err := b.phaseIdle(ctx); err != nil {
			b.broken("idle", err)
		}
		b.load("idle, end")
	}
	if ctx.Err() != nil {
		b.broken("run", errors.New("interrupted"))
	}
	b.load("end")
	return exitOK
}

// measureFloorCPU measures the CPU of raw ups of new stacks when figure 1 did not run.
func (b *bench) measureFloorCPU(ctx context.Context) error {
	if err := b.kube.ensureNamespace(ctx, nsRaw); err != nil {
		return err
	}
	var cpu []float64
	for i := range b.opts.samples + b.opts.warmup {
		d, err := desiredOf(nsRaw, fmt.Sprintf("floor-%d", i), 1)
		if err != nil {
			return err
		}
		_, c, err := b.rawUp(ctx, b.raw, d, false)
		if err != nil {
			return err
		}
		if i >= b.opts.warmup {
			cpu = append(cpu, c)
		}
	}
	b.floorCPU = median(cpu)
	b.res.FloorCPUSeconds = b.floorCPU
	b.logf("  raw up of a new stack: %.2f CPU s (median of %d)", b.floorCPU, len(cpu))
	return nil
}

func cond(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func (b *bench) logf(format string, a ...any) {
	fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func (b *bench) broken(what string, err error) {
	msg := what + ": " + err.Error()
	b.res.Broken = append(b.res.Broken, msg)
	b.logf("BROKEN: %s", msg)
}

// stopOperator stops o and forgets it.
func (b *bench) stopOperator(o *operator) {
	if o == nil {
		return
	}
	o.stop()
	b.running.Delete(o)
}

// stopAll stops every operator still running (after an interrupt or a failed phase).
func (b *bench) stopAll() {
	b.running.Range(func(k, _ any) bool {
		b.stopOperator(k.(*operator))
		return true
	})
}

// load records /proc/loadavg.
func (b *bench) load(phase string) {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	m := LoadMark{Phase: phase, At: time.Now()}
	if len(f) >= 3 {
		m.Load1, _ = strconv.ParseFloat(f[0], 64)
		m.Load5, _ = strconv.ParseFloat(f[1], 64)
		m.Load15, _ = strconv.ParseFloat(f[2], 64)
	}
	b.res.Load = append(b.res.Load, m)
}

// clusterCPU is the CPU time, in seconds, the cluster's processes (CLUSTER_DIR/pids) have
// used; 0 without --cluster-dir.
func (b *bench) clusterCPU() float64 {
	if b.clusterDir == "" {
		return 0
	}
	files, _ := filepath.Glob(filepath.Join(b.clusterDir, "pids", "*.pid"))
	total := 0.0
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			continue
		}
		if st, _, err := readStat(pid); err == nil {
			total += st.self
		}
	}
	return total
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					m.MemTotalMiB = kb / 1024
				}
			}
		}
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	return m
}

func (b *bench) versions() Versions {
	v := Versions{Go: runtime.Version(), Kubernetes: b.kube.serverVersion()}
	cmd := exec.Command(b.pulumi, "version")
	cmd.Env = append(os.Environ(), "PULUMI_SKIP_UPDATE_CHECK=true")
	if out, err := cmd.Output(); err == nil {
		v.PulumiCLI = strings.TrimSpace(string(out))
	}
	if p, err := stack.FindKubernetesPluginFor(b.pulumi); err == nil {
		v.ProviderPlugin = "v" + stack.KubernetesPluginVersion + " (" + p + ")"
	}
	cmd = exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = b.repo
	if out, err := cmd.Output(); err == nil {
		v.Operator = strings.TrimSpace(string(out))
	}
	return v
}

func listOpts(selector string) metav1.ListOptions { return metav1.ListOptions{LabelSelector: selector} }

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// renderOnly prints the table of a results.json and writes docs from it.
func renderOnly(path, docs string) int {
	raw, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitUsage
	}
	var r Results
	if err := json.Unmarshal(raw, &r); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", path, err)
		return exitUsage
	}
	r.Figures = r.figures()
	r.printTable(os.Stdout)
	if docs != "" {
		if err := writeFile(docs, r.markdown()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: write docs:", err)
			return exitBroken
		}
		fmt.Println("docs:", docs)
	}
	return exitOK
}
