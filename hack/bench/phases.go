package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Namespaces of the run. Raw (floor) stacks live apart from the operator's objects, so no
// operator ever sees them as its own.
const (
	nsLatency = "bench-latency"
	nsRaw     = "bench-raw"
	nsProfile = "bench-profile"
	nsIdle    = "bench-idle"
)

// A site is where figures 1, 4 and 5 are measured: a state backend, with the operator's
// objects in nsOp and the floor's raw stacks (raw, a stack.Manager on the same backend whose
// CLI runs the wrapper logs) in nsRaw. The file site is the default backend; the postgres
// site repeats figures 1 and 5 on PostgreSQL, which the README recommends for teams. With
// --beside, each site has a twin for the other build: its own nsOp, the same raw stacks.
type site struct {
	name        string // siteFile or sitePostgres
	nsOp, nsRaw string
	backendURL  string // the operator's --backend-url; "" for its default (file)
	raw         *stack.Manager
	res         *SiteResults
	build       *build    // whose operator runs here
	op          *operator // that operator, while phaseLatency runs
}

const (
	siteFile     = "file"
	sitePostgres = "postgres"
)

// latencyWorkers is the operator's default --workers, used for the one-at-a-time figures.
const latencyWorkers = 2

// rawUp runs one up through stack.Manager (what the operator calls, without Kubernetes around
// it) and returns the floor: the wall time and CPU of its `pulumi up` engine run alone (the
// CLI process and the provider plugin it waited for), as the wrapper logged them when m runs
// the CLI through it (b.rawLogs names its log: the sites' managers); for another m, the whole
// Up and the CPU of this process and its children. The Up's own wall time is logged beside it.
func (b *bench) rawUp(ctx context.Context, m *stack.Manager, d api.Desired, refresh bool) (wall, cpu float64, err error) {
	s0, c0 := rusageCPU(syscall.RUSAGE_SELF), rusageCPU(syscall.RUSAGE_CHILDREN)
	t0 := time.Now()
	name, err := m.StackName(d.Namespace, d.Name)
	if err != nil {
		return 0, 0, err
	}
	_, err = m.Up(ctx, name, infra.Program(d), stack.RunOptions{Refresh: refresh})
	wall = time.Since(t0).Seconds()
	cpu = rusageCPU(syscall.RUSAGE_SELF) - s0 + rusageCPU(syscall.RUSAGE_CHILDREN) - c0
	if err != nil {
		return wall, cpu, fmt.Errorf("raw up of %s/%s: %w", d.Namespace, d.Name, err)
	}
	log := b.rawLogs[m]
	if log == "" {
		return wall, cpu, nil
	}
	runs, err := readCLIRuns(log)
	if err != nil {
		return wall, cpu, fmt.Errorf("read the floor's CLI log: %w", err)
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if r := runs[i]; !r.Start.Before(t0) && strings.HasPrefix(cmdLabel(r.Args), "up") {
			b.lastUpWall = wall
			return r.Wall, r.CPU, nil
		}
	}
	return wall, cpu, fmt.Errorf("raw up of %s/%s: no `pulumi up` run in %s", d.Namespace, d.Name, log)
}

// crReady creates a KindCustomHttp and returns the seconds until it is seen Ready.
func (b *bench) crReady(ctx context.Context, ns, name string) (float64, time.Time, error) {
	t0 := time.Now()
	if err := b.kube.createCR(ctx, crObject(ns, name, 1, false)); err != nil {
		return 0, t0, err
	}
	at, _, err := b.kube.crs.waitAll(ctx, []string{ns + "/" + name}, 1, 5*time.Minute)
	if err != nil {
		return 0, t0, err
	}
	return at.Sub(t0).Seconds(), t0, nil
}

// phaseLatency measures figure 1 (a fresh CR to Ready, against a raw up of the same program),
// then 4 (drift repair) and 5 (a change) on the same objects, one operator per site (sts: the
// build under test's, then the one beside it, if any) with the default worker count. All sites
// share sts[0]'s raw stacks, the floor. The raw and the operators' samples take turns (inTurn),
// so that load from elsewhere hits every one of them alike.
func (b *bench) phaseLatency(ctx context.Context, sts []*site, doDrift, doChange bool) error {
	raw0 := sts[0]
	if err := b.kube.ensureNamespace(ctx, raw0.nsRaw); err != nil {
		return err
	}
	for _, st := range sts {
		if err := b.kube.ensureNamespace(ctx, st.nsOp); err != nil {
			return err
		}
		op, err := b.startOperator(ctx, operatorSpec{name: "latency-" + st.name + st.build.suffix, namespace: st.nsOp, backendURL: st.backendURL,
			workers: latencyWorkers, resync: 10 * time.Minute, binary: st.build.operator, pulumi: st.build.pulumi, stateDir: st.build.stateDir})
		if err != nil {
			return err
		}
		defer b.stopOperator(op)
		st.op = op
	}

	n, warm := b.opts.samples, b.opts.warmup
	lats := make([]*PairResult, len(sts))
	starts := make([][]time.Time, len(sts))
	for j := range sts {
		lats[j] = &PairResult{}
	}
	for i := range n + warm {
		name, raw := fmt.Sprintf("lat-%d", i), fmt.Sprintf("raw-%d", i)
		d, err := desiredOf(raw0.nsRaw, raw, 1)
		if err != nil {
			return err
		}
		var rawSecs, rawCPU, clusterCPU float64
		crSecs, t0s := make([]float64, len(sts)), make([]time.Time, len(sts))
		steps := []func() error{func() error {
			c0 := b.clusterCPU()
			rawSecs, rawCPU, err = b.rawUp(ctx, raw0.raw, d, false)
			clusterCPU = b.clusterCPU() - c0
			return err
		}}
		for j, st := range sts {
			steps = append(steps, func() error {
				var err error
				crSecs[j], t0s[j], err = b.crReady(ctx, st.nsOp, name)
				return err
			})
		}
		if err := inTurn(i, steps...); err != nil {
			return err
		}
		what := "sample"
		if i < warm {
			what = "warm-up"
		} else {
			for j := range sts {
				lats[j].Operator = append(lats[j].Operator, crSecs[j])
				lats[j].Floor = append(lats[j].Floor, rawSecs)
				lats[j].FloorCPU = append(lats[j].FloorCPU, rawCPU)
				starts[j] = append(starts[j], t0s[j])
			}
			if raw0.name == siteFile {
				b.rawClusterCPU = append(b.rawClusterCPU, clusterCPU)
			}
		}
		b.logf("  CR to Ready %s %d: operator %.2f s%s, engine run %.2f s (%.2f CPU s; stack.Manager.Up %.2f s)", what, i, crSecs[0], besideText(crSecs), rawSecs, rawCPU, b.lastUpWall)
	}
	for j, st := range sts {
		lats[j].finish()
		lats[j].Breakdown = b.breakdown(st.op, st.nsOp, "lat-", warm, starts[j], 1)
		st.res.Latency = lats[j]
	}
	if doDrift {
		if err := b.phaseDrift(ctx, sts, n, warm); err != nil {
			return err
		}
	}
	if doChange {
		if err := b.phaseChange(ctx, sts, n, warm); err != nil {
			return err
		}
	}
	return nil
}

// besideText is ", beside 0.71 s" for the second of secs (the build beside), "" when there is
// none: how a sample's log line shows the other build.
func besideText(secs []float64) string {
	if len(secs) < 2 {
		return ""
	}
	return fmt.Sprintf(", beside %.2f s", secs[1])
}

// breakdown splits the operator's samples, using its log: creation (or patch) to the
// "running up" line, that line to "stack up to date", and that to Ready seen by the bench.
func (b *bench) breakdown(op *operator, ns, prefix string, first int, starts []time.Time, gen int64) *Breakdown {
	lines := op.logLines()
	var pre, up, post []float64
	for i, t0 := range starts {
		obj := fmt.Sprintf("%s/%s%d", ns, prefix, first+i)
		var run, done *logLine
		for j := range lines {
			l := &lines[j]
			if l.Object != obj || l.At.Before(t0.Truncate(time.Millisecond)) {
				continue
			}
			if l.Msg == "running up" && l.Generation == gen && run == nil {
				run = l
			}
			if l.Msg == "stack up to date" && l.Generation == gen && done == nil && run != nil {
				done = l
			}
		}
		ready, ok := b.kube.crs.readyAt(obj, gen)
		if run == nil || done == nil || !ok {
			continue
		}
		pre = append(pre, run.At.Sub(t0).Seconds())
		up = append(up, done.At.Sub(run.At).Seconds())
		post = append(post, ready.Sub(done.At).Seconds())
	}
	if len(pre) == 0 {
		return nil
	}
	return &Breakdown{BeforeUp: median(pre), Up: median(up), AfterUp: median(post), Samples: len(pre)}
}

// phaseDrift measures figure 4: `kubectl scale` of a managed Deployment to the moment its
// spec.replicas is back, against a raw `up --refresh` after the same scale; at each site of
// sts (sharing sts[0]'s raw stacks), in turn.
func (b *bench) phaseDrift(ctx context.Context, sts []*site, n, warm int) error {
	raw0 := sts[0]
	res := make([]*PairResult, len(sts))
	for j := range sts {
		res[j] = &PairResult{}
	}
	for i := range n {
		name, raw := fmt.Sprintf("lat-%d", warm+i), fmt.Sprintf("raw-%d", warm+i)
		d, err := desiredOf(raw0.nsRaw, raw, 1)
		if err != nil {
			return err
		}
		var rawSecs float64
		opSecs := make([]float64, len(sts))
		steps := []func() error{func() error {
			t0 := time.Now()
			g, err := b.kube.scale(ctx, raw0.nsRaw, raw, 3)
			if err != nil {
				return err
			}
			if _, _, err := b.rawUp(ctx, raw0.raw, d, true); err != nil {
				return err
			}
			at, err := b.kube.deps.waitReplicas(ctx, raw0.nsRaw+"/"+raw, g+1, 1, time.Minute)
			if err != nil {
				return err
			}
			rawSecs = at.Sub(t0).Seconds()
			return nil
		}}
		for j, st := range sts {
			steps = append(steps, func() error {
				t0 := time.Now()
				g, err := b.kube.scale(ctx, st.nsOp, name, 3)
				if err != nil {
					return err
				}
				at, err := b.kube.deps.waitReplicas(ctx, st.nsOp+"/"+name, g+1, 1, 2*time.Minute)
				if err != nil {
					return err
				}
				opSecs[j] = at.Sub(t0).Seconds()
				// Let the repair up finish before the next sample.
				_, err = st.op.waitLog(ctx, "stack up to date", st.nsOp+"/"+name, t0.Truncate(time.Millisecond), 2*time.Minute)
				return err
			})
		}
		if err := inTurn(i, steps...); err != nil {
			return err
		}
		for j := range sts {
			res[j].Operator = append(res[j].Operator, opSecs[j])
			res[j].Floor = append(res[j].Floor, rawSecs)
		}
		b.logf("  drift repair %d: operator %.2f s%s, raw up --refresh %.2f s", i, opSecs[0], besideText(opSecs), rawSecs)
	}
	for j, st := range sts {
		res[j].finish()
		st.res.Drift = res[j]
	}
	return nil
}

// phaseChange measures figure 5: a replicaCount change to Ready at the new generation,
// against a raw up of the same change; at each site of sts (sharing sts[0]'s raw stacks), in
// turn.
func (b *bench) phaseChange(ctx context.Context, sts []*site, n, warm int) error {
	raw0 := sts[0]
	res := make([]*PairResult, len(sts))
	starts := make([][]time.Time, len(sts))
	for j := range sts {
		res[j] = &PairResult{}
	}
	for i := range n {
		name, raw := fmt.Sprintf("lat-%d", warm+i), fmt.Sprintf("raw-%d", warm+i)
		d, err := desiredOf(raw0.nsRaw, raw, 2)
		if err != nil {
			return err
		}
		var rawSecs, rawCPU float64
		opSecs, t0s := make([]float64, len(sts)), make([]time.Time, len(sts))
		steps := []func() error{func() error { rawSecs, rawCPU, err = b.rawUp(ctx, raw0.raw, d, false); return err }}
		for j, st := range sts {
			steps = append(steps, func() error {
				t0s[j] = time.Now()
				if err := b.kube.patchReplicas(ctx, st.nsOp, name, 2); err != nil {
					return err
				}
				at, _, err := b.kube.crs.waitAll(ctx, []string{st.nsOp + "/" + name}, 2, 5*time.Minute)
				opSecs[j] = at.Sub(t0s[j]).Seconds()
				return err
			})
		}
		if err := inTurn(i, steps...); err != nil {
			return err
		}
		for j := range sts {
			res[j].Operator = append(res[j].Operator, opSecs[j])
			res[j].Floor = append(res[j].Floor, rawSecs)
			res[j].FloorCPU = append(res[j].FloorCPU, rawCPU)
			starts[j] = append(starts[j], t0s[j])
		}
		b.logf("  change %d: operator %.2f s%s, engine run %.2f s (stack.Manager.Up %.2f s)", i, opSecs[0], besideText(opSecs), rawSecs, b.lastUpWall)
	}
	for j, st := range sts {
		res[j].finish()
		res[j].Breakdown = b.breakdown(st.op, st.nsOp, "lat-", warm, starts[j], 2)
		st.res.Change = res[j]
	}
	return nil
}

// phaseProfile runs one create and one change through the operator and through a raw
// stack.Manager with every pulumi CLI run going through this program in wrapper mode, which
// logs each run's command, wall time and CPU: where the time of an up goes.
func (b *bench) phaseProfile(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the bench binary for wrapper mode: %w", err)
	}
	if err := b.kube.ensureNamespace(ctx, nsProfile); err != nil {
		return err
	}
	opLog, rawLog := filepath.Join(b.out, "logs", "cli-operator.jsonl"), filepath.Join(b.out, "logs", "cli-raw.jsonl")
	_ = os.Remove(opLog)
	_ = os.Remove(rawLog)
	op, err := b.startOperator(ctx, operatorSpec{name: "profile", namespace: nsProfile, workers: latencyWorkers,
		resync: 10 * time.Minute, pulumi: self, engineHost: stack.NoEngineHost, env: map[string]string{wrapperLog: opLog}})
	if err != nil {
		return err
	}
	defer b.stopOperator(op)
	raw, err := stack.New(stack.Config{Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(b.rawDir, "backend"),
		WorkRoot: filepath.Join(b.rawDir, "workspaces"), PulumiPath: self, ClusterName: "bench",
		Env: map[string]string{"KUBECONFIG": b.kube.kubeconfig, "PULUMI_CONFIG_PASSPHRASE": "bench", wrapperLog: rawLog}})
	if err != nil {
		return fmt.Errorf("create profiling stack manager: %w", err)
	}
	type window struct {
		label      string
		start, end time.Time
		log        string
	}
	var wins []window
	// Operator: create, then change.
	key := nsProfile + "/prof-0"
	t0 := time.Now()
	if err := b.kube.createCR(ctx, crObject(nsProfile, "prof-0", 1, false)); err != nil {
		return err
	}
	t1, _, err := b.kube.crs.waitAll(ctx, []string{key}, 1, 5*time.Minute)
	if err != nil {
		return err
	}
	wins = append(wins, window{"operator: new CR to Ready", t0, t1, opLog})
	time.Sleep(2 * time.Second) // the second pass over the object (finalizer event) runs no CLI
	t2 := time.Now()
	if err := b.kube.patchReplicas(ctx, nsProfile, "prof-0", 2); err != nil {
		return err
	}
	t3, _, err := b.kube.crs.waitAll(ctx, []string{key}, 2, 5*time.Minute)
	if err != nil {
		return err
	}
	wins = append(wins, window{"operator: replicaCount change to Ready", t2, t3, opLog})
	// Raw: the same two ups.
	for i, rc := range []int32{1, 2} {
		d, err := desiredOf(nsRaw, "prof-raw", rc)
		if err != nil {
			return err
		}
		s := time.Now()
		if _, _, err := b.rawUp(ctx, raw, d, false); err != nil {
			return err
		}
		label := "raw stack.Manager.Up: new stack"
		if i == 1 {
			label = "raw stack.Manager.Up: replicaCount change"
		}
		wins = append(wins, window{label, s, time.Now(), rawLog})
	}
	for _, w := range wins {
		runs, err := readCLIRuns(w.log)
		if err != nil {
			return fmt.Errorf("read CLI log %s: %w", w.log, err)
		}
		p := ProfileRun{Label: w.label, TotalSeconds: w.end.Sub(w.start).Seconds()}
		for _, r := range runs {
			if r.Start.Before(w.start) || r.Start.After(w.end) {
				continue
			}
			p.CLI = append(p.CLI, CLIStep{Command: cmdLabel(r.Args), Wall: r.Wall, CPU: r.CPU, Exit: r.Exit})
			p.CLIWall += r.Wall
			p.CLICPU += r.CPU
		}
		b.res.Profile = append(b.res.Profile, p)
		b.logf("  %s: %.2f s, of which %d pulumi CLI runs %.2f s (%.2f CPU s)", p.Label, p.TotalSeconds, len(p.CLI), p.CLIWall, p.CLICPU)
	}
	return b.measureCLIStart(ctx)
}

// measureCLIStart times `pulumi version` 5 times, with the GOGC the stack Manager gives the
// CLI: what any CLI run costs before its work; and 5 derivations of a passphrase key as the
// CLI does one (the SDK's own function), which every run that opens a stack pays.
func (b *bench) measureCLIStart(ctx context.Context) error {
	var wall, cpu, kdf []float64
	salt := []byte("bench-salt")
	for range 5 {
		t0 := time.Now()
		config.NewSymmetricCrypterFromPassphrase("bench", salt)
		kdf = append(kdf, time.Since(t0).Seconds())
	}
	// The GOGC the Manager gives the CLI: the bench's own when set (as a baseline run sets
	// it), else stack.ChildGOGC.
	gogc, set := os.LookupEnv("GOGC")
	if !set {
		gogc = stack.ChildGOGC
	}
	for range 5 {
		cmd := exec.CommandContext(ctx, b.pulumi, "version")
		cmd.Env = append(os.Environ(), "GOGC="+gogc)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("pulumi version: %w\n%s", err, out)
		}
		wall = append(wall, time.Since(t0).Seconds())
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if ru != nil {
			cpu = append(cpu, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Seconds())
		}
	}
	b.res.CLIStart = &CLIStart{Wall: median(wall), CPU: median(cpu), Samples: len(wall), KeyDerivation: median(kdf), GOGC: gogc}
	b.logf("  pulumi CLI start (`pulumi version`): %.2f s, %.2f CPU s (median of %d); passphrase key derivation %.2f s",
		b.res.CLIStart.Wall, b.res.CLIStart.CPU, len(wall), b.res.CLIStart.KeyDerivation)
	return nil
}

// cmdLabel names a CLI run by its subcommand: "stack select", "up", "stack output
// --show-secrets", ... (the Automation API puts --non-interactive first).
func cmdLabel(args []string) string {
	var words []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
		}
	}
	if len(words) == 0 {
		return strings.Join(args, " ")
	}
	label := words[0]
	if words[0] == "stack" && len(words) > 1 {
		label += " " + words[1]
	}
	for _, f := range []string{"--show-secrets", "--refresh"} {
		if slices.Contains(args, f) {
			label += " " + f
		}
	}
	return label
}

// inTurn runs steps one after the other, starting with steps[i mod len(steps)] and wrapping
// around, stopping at the first error: over consecutive i, each step goes first equally often
// (the operator's run and its raw floor, and the build beside), so that none always meets a
// warmer or colder machine.
func inTurn(i int, steps ...func() error) error {
	for k := range steps {
		if err := steps[(i+k)%len(steps)](); err != nil {
			return err
		}
	}
	return nil
}
