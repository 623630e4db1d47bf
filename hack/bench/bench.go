package main

import (
	"cmp"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// bench is one run.
type bench struct {
	repo, out, stateDir, rawDir string
	// rawLogs are the wrapper's logs of the sites' raw stack.Managers' CLI runs (see rawUp).
	rawLogs map[*stack.Manager]string
	// file and postgres are the sites of figures 1, 4 and 5 (postgres nil without a URL), each
	// followed by its twin for the build beside (--beside).
	file, postgres []*site
	// under is the build under test (--operator, --pulumi), beside the other one (--beside;
	// nil without).
	under, beside *build
	// lastUpWall is the wall time of rawUp's last whole stack.Manager.Up, for the log.
	lastUpWall          float64
	operatorBin, pulumi string
	operatorCommit      string // --operator-commit, "" to read it from the binary or git
	clusterDir          string
	kube                *kube
	host                host // /proc
	raw                 *stack.Manager
	cores               int
	floorCPU            float64 // CPU seconds of one raw up of a new stack (median)
	rawClusterCPU       []float64
	res                 *Results
	start               time.Time
	opts                options
	running             sync.Map // *operator -> struct{}
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
	b.removeState()
	_ = os.RemoveAll(filepath.Join(b.out, "logs"))
	k, err := connect(kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return exitBroken
	}
	b.kube = k
	b.res = &Results{Date: b.start, Machine: b.host.machine(), Versions: b.versions(), Settings: Settings{
		OperatorEngineHost: fileExists(filepath.Join(filepath.Dir(b.operatorBin), stack.EngineHost)),
		Samples:            b.opts.samples, Warmup: b.opts.warmup, LatencyWorkers: latencyWorkers, Burst: b.opts.burst,
		BurstWorkers: b.opts.burstWorkers, HostWorkers: b.opts.hostWorkers, IdleTarget: b.opts.idle, IdleWorkers: b.opts.idleWorkers,
		BurstRounds: b.opts.burstRounds, IdleRounds: b.opts.idleRounds, Resync: b.opts.resync.String(), Budget: b.opts.budget.String(), Phases: phases}}
	if bd := b.beside; bd != nil {
		b.res.Beside = &BesideRun{Commit: b.opts.besideCommit, Dir: filepath.Dir(bd.operator), EngineHost: bd.engineHost != ""}
		if b.res.Beside.Commit == "" {
			_, b.res.Beside.Commit = binaryVersions(bd.operator)
		}
		b.logf("bench: beside %s (%s), in turn with the build under test", filepath.Dir(bd.operator), cond(b.res.Beside.Commit != "", b.res.Beside.Commit, "commit unknown"))
	}
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
		// The raw stacks' CLI runs go through this program in wrapper mode, which logs each
		// run's wall time and CPU: the floors are the `pulumi up` engine run alone (rawUp).
		b.rawLogs = map[*stack.Manager]string{}
		if b.raw, err = b.rawManager("file://"+filepath.Join(b.rawDir, "backend"), "cli-floor.jsonl"); err != nil {
			return err
		}
		b.file = b.sites(site{name: siteFile, nsOp: nsLatency, nsRaw: nsRaw, raw: b.raw})
		if b.opts.postgresURL != "" && b.opts.phases["postgres"] {
			pg, err := b.rawManager(b.opts.postgresURL, "cli-floor-postgres.jsonl")
			if err != nil {
				return err
			}
			b.postgres = b.sites(site{name: sitePostgres, nsOp: nsLatency + "-pg", nsRaw: nsRaw + "-pg", backendURL: b.opts.postgresURL, raw: pg})
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
		if err := b.phaseLatency(ctx, b.file, ph["drift"], ph["change"]); err != nil {
			b.broken("latency/drift/change", err)
		}
		f := b.file[0].res
		b.res.Latency, b.res.Drift, b.res.Change = f.Latency, f.Drift, f.Change
		if bs := b.res.Beside; bs != nil {
			f := b.file[1].res
			bs.Latency, bs.Drift, bs.Change = f.Latency, f.Drift, f.Change
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
	if ph["postgres"] && ctx.Err() == nil {
		if b.postgres == nil {
			b.broken("postgres", errors.New("no PostgreSQL backend: pass --postgres-url (make bench starts one)"))
		} else {
			b.logf("figures 1 and 5 again on the PostgreSQL backend: %d samples after %d warm-up", b.opts.samples, b.opts.warmup)
			if err := b.phaseLatency(ctx, b.postgres, false, true); err != nil {
				b.broken("postgres", err)
			}
			b.res.Postgres = b.postgres[0].res
			if bs := b.res.Beside; bs != nil {
				bs.Postgres = b.postgres[1].res
			}
			b.load("after figures 1, 5 on PostgreSQL")
		}
	}
	if ph["profile"] && ctx.Err() == nil {
		b.logf("profile: pulumi CLI runs of one create and one change, operator and raw")
		if err := b.phaseProfile(ctx); err != nil {
			b.broken("profile", err)
		}
	}
	if b.floorCPU == 0 && (ph["burst"] || ph["idle"] || ph["scale"]) && ctx.Err() == nil {
		if err := b.measureFloorCPU(ctx); err != nil {
			b.broken("floor CPU", err)
		}
	}
	if ph["burst"] {
		for i, w := range b.opts.burstWorkers {
			b.burstsInTurn(ctx, i, w, false)
		}
		for i, w := range b.opts.hostWorkers {
			b.burstsInTurn(ctx, len(b.opts.burstWorkers)+i, w, true)
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
	if ph["scale"] && ctx.Err() == nil {
		b.logf("cost curve: bursts of %v CRs, idle operator over %v CRs, 3 resyncs of %s each", b.opts.scaleBursts, b.opts.scaleIdle, b.opts.resync)
		if err := b.phaseScale(ctx); err != nil {
			b.broken("scale", err)
		}
		b.load("scale, end")
	}
	if ph["wave"] && ctx.Err() == nil {
		if err := b.phaseWave(ctx); err != nil {
			b.broken("wave", err)
		}
		b.load("wave, end")
	}
	if ph["shards"] && ctx.Err() == nil {
		if err := b.phaseShards(ctx); err != nil {
			b.broken("shards", err)
		}
		b.load("shards, end")
	}
	if ctx.Err() != nil {
		b.broken("run", errors.New("interrupted"))
	}
	b.load("end")
	return exitOK
}

// removeState removes the state directories of the operators (the build beside's too) and of
// the raw stacks: a run starts on a new cluster, where stacks of an earlier run's objects would
// describe objects that do not exist.
func (b *bench) removeState() {
	_ = os.RemoveAll(b.stateDir)
	_ = os.RemoveAll(b.rawDir)
	if b.beside != nil {
		_ = os.RemoveAll(b.beside.stateDir)
	}
}

// sites is s for the build under test, followed by its twin for the build beside (with
// --beside): the same raw stacks, the operator's objects in a namespace of its own.
func (b *bench) sites(s site) []*site {
	under := s
	under.build, under.res = b.under, &SiteResults{}
	out := []*site{&under}
	if b.beside != nil {
		twin := s
		twin.nsOp += besideSuffix
		twin.build, twin.res = b.beside, &SiteResults{}
		out = append(out, &twin)
	}
	return out
}

// burstsInTurn measures figure 2 at workers workers (with the engine host when host is set)
// for the build under test and the one beside, --burst-rounds times each; the builds take
// turns going first (inTurn over i and the round). Each build's result is its median round,
// appended to its Bursts.
func (b *bench) burstsInTurn(ctx context.Context, i, workers int, host bool) {
	builds := []*build{b.under}
	if b.beside != nil {
		builds = append(builds, b.beside)
	}
	rounds := make([][]BurstResult, len(builds))
	label := fmt.Sprintf("--workers %d%s", workers, cond(host, " --engine-host", ""))
	for round := range b.opts.burstRounds {
		var steps []func() error
		for j, bd := range builds {
			steps = append(steps, func() error {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if host && bd.engineHost == "" {
					return nil // a build without an engine host: its row is left out
				}
				what := fmt.Sprintf("burst %s%s", label, cond(bd.suffix != "", " (beside)", ""))
				b.logf("figure 2: %s, round %d of %d", what, round+1, b.opts.burstRounds)
				b.load(what + ", start")
				r := b.phaseBurst(ctx, burstRun{workers: workers, host: host, build: bd, round: round})
				b.load(what + ", end")
				if r.Error != "" {
					b.broken(what, errors.New(r.Error))
				}
				rounds[j] = append(rounds[j], r)
				return nil
			})
		}
		if err := inTurn(i+round, steps...); err != nil {
			return
		}
	}
	for j, rs := range rounds {
		if len(rs) == 0 {
			continue
		}
		r := medianRound(rs)
		if j == 0 {
			b.res.Bursts = append(b.res.Bursts, r)
		} else {
			b.res.Beside.Bursts = append(b.res.Beside.Bursts, r)
		}
	}
}

// medianRound is the round of rs whose seconds are the median (the lower of the two middle
// ones for an even count; a failed round counts as the slowest) with RoundSeconds set to every
// round's seconds in the order they ran; rs itself when it is one round.
func medianRound(rs []BurstResult) BurstResult {
	if len(rs) == 1 {
		return rs[0]
	}
	secs := make([]float64, len(rs))
	order := make([]int, len(rs))
	for k, r := range rs {
		secs[k], order[k] = r.Seconds, k
	}
	slow := func(k int) float64 {
		if rs[k].Error != "" || rs[k].Seconds == 0 {
			return math.Inf(1)
		}
		return rs[k].Seconds
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(slow(x), slow(y)) })
	r := rs[order[(len(rs)-1)/2]]
	r.RoundSeconds = secs
	return r
}

// rawManager is a stack.Manager for the floor's raw stacks on backendURL whose CLI runs go
// through this program in wrapper mode, logged to logs/<log> (b.rawLogs).
func (b *bench) rawManager(backendURL, log string) (*stack.Manager, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the bench binary for wrapper mode: %w", err)
	}
	path := filepath.Join(b.out, "logs", log)
	_ = os.Remove(path)
	// The wrapper appends to the file but makes no directory; a run without figure 1 (e.g.
	// --phases idle) reaches its first raw up before any operator made logs/.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	ws := filepath.Join(b.rawDir, "workspaces")
	if !strings.HasPrefix(backendURL, "file://") {
		ws += "-" + strings.TrimSuffix(log, ".jsonl")
	}
	backendURL, password := splitPassword(backendURL)
	env := map[string]string{"KUBECONFIG": b.kube.kubeconfig, "PULUMI_CONFIG_PASSPHRASE": "bench", wrapperLog: path}
	if password != "" {
		env["PGPASSWORD"] = password
	}
	m, err := stack.New(stack.Config{Project: "kindcustomhttp", BackendURL: backendURL,
		WorkRoot: ws, PulumiPath: self, ClusterName: "bench", Env: env})
	if err != nil {
		return nil, fmt.Errorf("create raw stack manager: %w", err)
	}
	b.rawLogs[m] = path
	return m, nil
}

// measureFloorCPU measures the CPU of raw ups of new stacks when figure 1 did not run.
func (b *bench) measureFloorCPU(ctx context.Context) error {
	cpu, n, err := b.rawFloorCPU(ctx, "floor")
	if err != nil {
		return err
	}
	b.floorCPU = cpu
	b.res.FloorCPUSeconds = b.floorCPU
	b.logf("  raw up of a new stack: %.2f CPU s (median of %d)", b.floorCPU, n)
	return nil
}

// rawFloorCPU is the CPU of raw ups of new stacks (stacks <prefix>-<i> in nsRaw): the median
// of --samples after --warmup, and how many that was.
func (b *bench) rawFloorCPU(ctx context.Context, prefix string) (float64, int, error) {
	if err := b.kube.ensureNamespace(ctx, nsRaw); err != nil {
		return 0, 0, err
	}
	var cpu []float64
	for i := range b.opts.samples + b.opts.warmup {
		d, err := desiredOf(nsRaw, fmt.Sprintf("%s-%d", prefix, i), 1)
		if err != nil {
			return 0, 0, err
		}
		_, c, err := b.rawUp(ctx, b.raw, d, false)
		if err != nil {
			return 0, 0, err
		}
		if i >= b.opts.warmup {
			cpu = append(cpu, c)
		}
	}
	return median(cpu), len(cpu), nil
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
func (b *bench) load(phase string) { b.res.Load = append(b.res.Load, b.host.load(phase)) }

// clusterCPU is the CPU time, in seconds, the cluster's processes (CLUSTER_DIR/pids) have
// used; 0 without --cluster-dir.
func (b *bench) clusterCPU() float64 {
	if b.clusterDir == "" {
		return 0
	}
	return b.host.pidFilesCPU(filepath.Join(b.clusterDir, "pids"))
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
	// The operator binary says itself which Go built it and from which commit (Go's build
	// information), which is what counts when it is not the tree's own build (make
	// bench-upgrade runs the previous release's binaries).
	if goVersion, commit := binaryVersions(b.operatorBin); goVersion != "" {
		v.Go = goVersion
		if commit != "" {
			v.Operator = commit
		}
	}
	if b.operatorCommit != "" {
		v.Operator = b.operatorCommit
	}
	return v
}

// binaryVersions reads a Go binary's build information: the Go release that built it
// ("go1.26.11") and its commit as git describe --always --dirty gives it (7 hex digits, and
// "-dirty" when the tree had changes). Both "" when the file has no build information; commit
// "" when it was built without version control stamps.
func binaryVersions(path string) (goVersion, commit string) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if rev != "" {
		commit = rev + dirty
	}
	return bi.GoVersion, commit
}

func listOpts(selector string) metav1.ListOptions { return metav1.ListOptions{LabelSelector: selector} }

// fileExists reports whether path names something that exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
