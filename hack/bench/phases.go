package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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

// latencyWorkers is the operator's default --workers, used for the one-at-a-time figures.
const latencyWorkers = 2

// rusageCPU is the CPU time (user+system) of this process (RUSAGE_SELF) or of its waited-for
// children and their waited-for descendants (RUSAGE_CHILDREN).
func rusageCPU(who int) float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// rawUp runs one Automation API up through stack.Manager (what the operator calls, without
// Kubernetes around it) and returns its wall time and the CPU it cost: the pulumi CLI runs and
// the provider plugin (children, waited for) plus the inline program served by this process.
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
	return wall, cpu, nil
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
// then 4 (drift repair) and 5 (a change) on the same objects, one operator with the default
// worker count. Raw and operator samples alternate, so that load from elsewhere hits both.
func (b *bench) phaseLatency(ctx context.Context, doDrift, doChange bool) error {
	for _, ns := range []string{nsLatency, nsRaw} {
		if err := b.kube.ensureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	op, err := b.startOperator(ctx, operatorSpec{name: "latency", namespace: nsLatency, workers: latencyWorkers, resync: 10 * time.Minute})
	if err != nil {
		return err
	}
	defer b.stopOperator(op)

	n, warm := b.opts.samples, b.opts.warmup
	lat := &PairResult{}
	var starts []time.Time
	for i := range n + warm {
		name, raw := fmt.Sprintf("lat-%d", i), fmt.Sprintf("raw-%d", i)
		d, err := desiredOf(nsRaw, raw, 1)
		if err != nil {
			return err
		}
		var crSecs, rawSecs, rawCPU float64
		var t0 time.Time
		runCR := func() error { crSecs, t0, err = b.crReady(ctx, nsLatency, name); return err }
		var clusterCPU float64
		runRaw := func() error {
			c0 := b.clusterCPU()
			rawSecs, rawCPU, err = b.rawUp(ctx, b.raw, d, false)
			clusterCPU = b.clusterCPU() - c0
			return err
		}
		if err := alternate(i, runRaw, runCR); err != nil {
			return err
		}
		what := "sample"
		if i < warm {
			what = "warm-up"
		} else {
			lat.Operator = append(lat.Operator, crSecs)
			lat.Floor = append(lat.Floor, rawSecs)
			lat.FloorCPU = append(lat.FloorCPU, rawCPU)
			b.rawClusterCPU = append(b.rawClusterCPU, clusterCPU)
			starts = append(starts, t0)
		}
		b.logf("  CR to Ready %s %d: operator %.2f s, raw up %.2f s (%.2f CPU s)", what, i, crSecs, rawSecs, rawCPU)
	}
	lat.finish()
	lat.Breakdown = b.breakdown(op, nsLatency, "lat-", warm, starts, 1)
	b.res.Latency = lat

	if doDrift {
		if err := b.phaseDrift(ctx, op, n, warm); err != nil {
			return err
		}
	}
	if doChange {
		if err := b.phaseChange(ctx, op, n, warm); err != nil {
			return err
		}
	}
	return nil
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
			if l.object != obj || l.at.Before(t0.Truncate(time.Millisecond)) {
				continue
			}
			if l.msg == "running up" && l.generation == gen && run == nil {
				run = l
			}
			if l.msg == "stack up to date" && l.generation == gen && done == nil && run != nil {
				done = l
			}
		}
		ready, ok := b.kube.crs.readyAt(obj, gen)
		if run == nil || done == nil || !ok {
			continue
		}
		pre = append(pre, run.at.Sub(t0).Seconds())
		up = append(up, done.at.Sub(run.at).Seconds())
		post = append(post, ready.Sub(done.at).Seconds())
	}
	if len(pre) == 0 {
		return nil
	}
	return &Breakdown{BeforeUp: median(pre), Up: median(up), AfterUp: median(post), Samples: len(pre)}
}

// phaseDrift measures figure 4: `kubectl scale` of a managed Deployment to the moment its
// spec.replicas is back, against a raw `up --refresh` after the same scale.
func (b *bench) phaseDrift(ctx context.Context, op *operator, n, warm int) error {
	res := &PairResult{}
	for i := range n {
		name, raw := fmt.Sprintf("lat-%d", warm+i), fmt.Sprintf("raw-%d", warm+i)
		d, err := desiredOf(nsRaw, raw, 1)
		if err != nil {
			return err
		}
		var opSecs, rawSecs float64
		runOp := func() error {
			t0 := time.Now()
			g, err := b.kube.scale(ctx, nsLatency, name, 3)
			if err != nil {
				return err
			}
			at, err := b.kube.deps.waitReplicas(ctx, nsLatency+"/"+name, g+1, 1, 2*time.Minute)
			if err != nil {
				return err
			}
			opSecs = at.Sub(t0).Seconds()
			// Let the repair up finish before the next sample.
			_, err = op.waitLog(ctx, "stack up to date", nsLatency+"/"+name, t0.Truncate(time.Millisecond), 2*time.Minute)
			return err
		}
		runRaw := func() error {
			t0 := time.Now()
			g, err := b.kube.scale(ctx, nsRaw, raw, 3)
			if err != nil {
				return err
			}
			if _, _, err := b.rawUp(ctx, b.raw, d, true); err != nil {
				return err
			}
			at, err := b.kube.deps.waitReplicas(ctx, nsRaw+"/"+raw, g+1, 1, time.Minute)
			if err != nil {
				return err
			}
			rawSecs = at.Sub(t0).Seconds()
			return nil
		}
		if err := alternate(i, runRaw, runOp); err != nil {
			return err
		}
		res.Operator = append(res.Operator, opSecs)
		res.Floor = append(res.Floor, rawSecs)
		b.logf("  drift repair %d: operator %.2f s, raw up --refresh %.2f s", i, opSecs, rawSecs)
	}
	res.finish()
	b.res.Drift = res
	return nil
}

// phaseChange measures figure 5: a replicaCount change to Ready at the new generation,
// against a raw up of the same change.
func (b *bench) phaseChange(ctx context.Context, op *operator, n, warm int) error {
	res := &PairResult{}
	var starts []time.Time
	for i := range n {
		name, raw := fmt.Sprintf("lat-%d", warm+i), fmt.Sprintf("raw-%d", warm+i)
		d, err := desiredOf(nsRaw, raw, 2)
		if err != nil {
			return err
		}
		var opSecs, rawSecs, rawCPU float64
		var t0 time.Time
		runOp := func() error {
			t0 = time.Now()
			if err := b.kube.patchReplicas(ctx, nsLatency, name, 2); err != nil {
				return err
			}
			at, _, err := b.kube.crs.waitAll(ctx, []string{nsLatency + "/" + name}, 2, 5*time.Minute)
			opSecs = at.Sub(t0).Seconds()
			return err
		}
		runRaw := func() error { rawSecs, rawCPU, err = b.rawUp(ctx, b.raw, d, false); return err }
		if err := alternate(i, runRaw, runOp); err != nil {
			return err
		}
		res.Operator = append(res.Operator, opSecs)
		res.Floor = append(res.Floor, rawSecs)
		res.FloorCPU = append(res.FloorCPU, rawCPU)
		starts = append(starts, t0)
		b.logf("  change %d: operator %.2f s, raw up %.2f s", i, opSecs, rawSecs)
	}
	res.finish()
	res.Breakdown = b.breakdown(op, nsLatency, "lat-", warm, starts, 2)
	b.res.Change = res
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
		resync: 10 * time.Minute, pulumi: self, env: map[string]string{wrapperLog: opLog}})
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

// phaseBurst measures figure 2 at one worker count: 100 CRs created at once, time until all
// are Ready, the peak resident memory of the operator and its pulumi processes, and the CPU
// they used. The objects stay (Ready, in the shared backend) for the idle measurement.
func (b *bench) phaseBurst(ctx context.Context, workers int) BurstResult {
	r := BurstResult{Workers: workers, CRs: b.opts.burst}
	ns := fmt.Sprintf("bench-burst-w%d", workers)
	if err := b.kube.ensureNamespace(ctx, ns); err != nil {
		r.Error = err.Error()
		return r
	}
	op, err := b.startOperator(ctx, operatorSpec{name: fmt.Sprintf("burst-w%d", workers), namespace: ns, workers: workers, resync: 10 * time.Minute})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer b.stopOperator(op)
	objs := make([]*unstructured.Unstructured, b.opts.burst)
	keys := make([]string, b.opts.burst)
	for i := range objs {
		objs[i] = crObject(ns, fmt.Sprintf("b-%03d", i), 1, true)
		keys[i] = ns + "/" + objs[i].GetName()
	}
	cpu0, _, _ := readStat(op.pid())
	busy0, cl0, self0 := machineBusy(), b.clusterCPU(), rusageCPU(syscall.RUSAGE_SELF)
	smp := startSampler(op.pid())
	t0 := time.Now()
	if err := b.kube.createMany(ctx, objs, 20); err != nil {
		smp.stop()
		r.Error = err.Error()
		return r
	}
	// w=1 runs the 100 ups one after the other: allow 20 s each.
	last, ready, err := b.kube.crs.waitAll(ctx, keys, 1, time.Duration(b.opts.burst)*20*time.Second/time.Duration(min(workers, 2)))
	peakTree, peakSelf, _, procs := smp.stop()
	cpu1, _, _ := readStat(op.pid())
	busy, cl, self := machineBusy()-busy0, b.clusterCPU()-cl0, rusageCPU(syscall.RUSAGE_SELF)-self0
	r.Ready = ready
	if err != nil {
		r.Error = err.Error()
	} else {
		r.Seconds = last.Sub(t0).Seconds()
	}
	r.OperatorCPUSeconds = cpu1.self + cpu1.children - cpu0.self - cpu0.children
	r.OperatorSelfCPUSeconds = cpu1.self - cpu0.self
	r.MachineBusyCPUSeconds, r.ClusterCPUSeconds, r.BenchCPUSeconds = busy, cl, self
	r.OtherCPUSeconds = max(busy-r.OperatorCPUSeconds-cl-self, 0)
	r.PeakTreeRSSMiB, r.PeakOperatorRSSMiB, r.PeakProcesses = mib(peakTree), mib(peakSelf), procs
	r.Ups = op.countMsg("running up", t0.Truncate(time.Millisecond))
	r.ReconcileErrors, _ = op.metric("pulumi_operator_reconciles_total", `result="error"`)
	r.ReconcileLocked, _ = op.metric("pulumi_operator_reconciles_total", `result="locked"`)
	if b.floorCPU > 0 {
		r.FloorSeconds = b.floorCPU * float64(b.opts.burst) / float64(b.cores)
		if r.Seconds > 0 {
			r.Ratio = r.Seconds / r.FloorSeconds
		}
	}
	b.logf("  burst w=%d: %d/%d Ready in %.1f s (floor %.1f s, %.2fx), peak RSS %.0f MiB (operator %.0f MiB, %d processes), %d ups, %.0f errors",
		workers, ready, b.opts.burst, r.Seconds, r.FloorSeconds, r.Ratio, r.PeakTreeRSSMiB, r.PeakOperatorRSSMiB, procs, r.Ups, r.ReconcileErrors)
	b.logf("    CPU: operator tree %.0f s (the operator process itself %.1f s), cluster %.0f s, bench %.0f s, other work on the machine %.0f s, of %.0f s busy",
		r.OperatorCPUSeconds, r.OperatorSelfCPUSeconds, cl, self, r.OtherCPUSeconds, busy)
	return r
}

// idleCount decides how many objects the idle measurement can afford: the target, less when
// the run's budget cannot pay for the ups that create the missing ones (at the best rate the
// bursts reached), with the reason.
func (b *bench) idleCount(existing int) (int, string) {
	target := b.opts.idle
	if target <= existing {
		return target, ""
	}
	rate := 0.0 // CRs per second
	for _, br := range b.res.Bursts {
		if br.Seconds > 0 {
			rate = max(rate, float64(br.CRs)/br.Seconds)
		}
	}
	if rate == 0 && b.floorCPU > 0 {
		rate = float64(b.cores) / (b.floorCPU * 1.3)
	}
	if rate == 0 || b.opts.budget == 0 {
		return target, ""
	}
	// What is left of the budget after the idle windows (two of 3 resyncs), starting and
	// stopping operators, and writing results.
	fixed := 2*(3*b.opts.resync+5*time.Second) + 90*time.Second
	left := b.opts.budget - time.Since(b.start) - fixed
	affordable := int(left.Seconds() * rate * 0.9)
	if existing+affordable >= target {
		return target, ""
	}
	n := max(existing+max(affordable, 0), min(target, 100))
	return n, fmt.Sprintf("REDUCED: idle measured with %d objects instead of %d: creating the other %d would cost as many real ups, about %.0f s at the best burst rate (%.2f CRs/s), and the run's budget (%s) leaves %.0f s",
		n, target, target-existing, float64(target-existing)/rate, rate, b.opts.budget, max(left.Seconds(), 0))
}

// phaseIdle measures figure 3: an operator over N unchanged objects through 3 resyncs. The
// burst objects are reused (they are Ready, in the same backend); the rest are created here,
// each costing one real up. A restart of the operator and 3 more resyncs follow.
func (b *bench) phaseIdle(ctx context.Context) error {
	sel := PoolLabel + "=idle"
	l, err := b.kube.dyn.Resource(api.GroupVersionResource).List(ctx, listOpts(sel))
	if err != nil {
		return fmt.Errorf("list pool objects: %w", err)
	}
	var keys []string
	for _, u := range l.Items {
		if _, ok := b.kube.crs.readyAt(u.GetNamespace()+"/"+u.GetName(), 1); ok {
			keys = append(keys, u.GetNamespace()+"/"+u.GetName())
		}
	}
	existing := len(keys)
	n, reason := b.idleCount(existing)
	res := &IdleResult{Target: b.opts.idle, CRs: n, Existing: min(existing, n), Workers: b.opts.idleWorkers}
	if reason != "" {
		res.Reduced, res.ReducedReason = true, reason
		b.res.Notes = append(b.res.Notes, reason)
		b.logf("  %s", reason)
	}
	b.res.Idle = res
	if err := b.kube.ensureNamespace(ctx, nsIdle); err != nil {
		return err
	}
	start := func(name, binary string) (*operator, error) {
		return b.startOperator(ctx, operatorSpec{name: name, labelSelector: sel, workers: b.opts.idleWorkers, resync: b.opts.resync, binary: binary})
	}
	op, err := start("idle", "")
	if err != nil {
		return err
	}
	defer func() { b.stopOperator(op) }()
	// The existing objects, seen by a new process: a restart, which must run no up either.
	if err := waitSettled(ctx, op, existing); err != nil {
		return err
	}
	res.RestartUps = op.countMsg("running up", time.Time{})
	b.logf("  idle operator started over %d Ready objects: %d ups", existing, res.RestartUps)

	if create := n - existing; create > 0 {
		objs := make([]*unstructured.Unstructured, create)
		for i := range objs {
			objs[i] = crObject(nsIdle, fmt.Sprintf("i-%04d", i), 1, true)
			keys = append(keys, nsIdle+"/"+objs[i].GetName())
		}
		t0 := time.Now()
		if err := b.kube.createMany(ctx, objs, 20); err != nil {
			return err
		}
		timeout := time.Duration(float64(create)/max(b.bestRate(), 0.05)*2)*time.Second + 5*time.Minute
		last, ready, err := b.kube.crs.waitAll(ctx, keys, 1, timeout)
		if err != nil {
			return fmt.Errorf("idle: %d of %d objects Ready: %w", ready, len(keys), err)
		}
		res.Created, res.CreateSeconds = create, last.Sub(t0).Seconds()
		res.CreateUps = op.countMsg("running up", t0.Truncate(time.Millisecond))
		b.logf("  created %d more objects in %.0f s (%d ups)", create, res.CreateSeconds, res.CreateUps)
	}
	w, err := b.idleWindow(ctx, op, "after creating them")
	if err != nil {
		return err
	}
	res.Windows = append(res.Windows, w)
	b.stopOperator(op)
	if op, err = start("idle-restart", ""); err != nil {
		return err
	}
	w, err = b.idleWindow(ctx, op, "after a restart")
	if err != nil {
		return err
	}
	res.Windows = append(res.Windows, w)
	// Candidate builds over the same objects (--idle-compare), each a fresh start.
	for _, c := range b.opts.idleCompare {
		b.stopOperator(op)
		if op, err = start("idle-"+c.label, c.binary); err != nil {
			return err
		}
		w, err = b.idleWindow(ctx, op, "after a restart, "+c.label+" ("+c.binary+")")
		if err != nil {
			return err
		}
		res.Compare = append(res.Compare, w)
	}
	return nil
}

// waitSettled waits until the operator has reconciled at least n objects and its queue is
// empty.
func waitSettled(ctx context.Context, op *operator, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		done, err1 := op.metric("pulumi_operator_reconciles_total")
		depth, err2 := op.metric("workqueue_depth")
		if err := errors.Join(err1, err2); err == nil && done >= float64(n) && depth == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("operator did not settle over %d objects within 5 minutes (log %s)", n, op.logPath)
}

// idleWindow watches an operator over unchanged objects for 3 resync periods (plus 2 s):
// Pulumi runs started, its CPU time and resident memory.
func (b *bench) idleWindow(ctx context.Context, op *operator, label string) (IdleWindow, error) {
	w := IdleWindow{Label: label, Resyncs: 3}
	rec0, _ := op.metric("pulumi_operator_reconciles_total")
	cpu0, _, err := readStat(op.pid())
	if err != nil {
		return w, fmt.Errorf("read operator CPU: %w", err)
	}
	smp := startSampler(op.pid())
	t0 := time.Now()
	select {
	case <-ctx.Done():
		smp.stop()
		return w, ctx.Err()
	case <-time.After(3*b.opts.resync + 2*time.Second):
	}
	_, peak, mean, _ := smp.stop()
	cpu1, _, _ := readStat(op.pid())
	w.Seconds = time.Since(t0).Seconds()
	w.Ups = op.countMsg("running up", t0.Truncate(time.Millisecond))
	w.CPUSeconds = cpu1.self - cpu0.self
	w.CPUPercent = 100 * w.CPUSeconds / w.Seconds
	w.PeakRSSMiB, w.MeanRSSMiB = mib(peak), mib(mean)
	rec1, _ := op.metric("pulumi_operator_reconciles_total")
	w.Reconciles = rec1 - rec0
	b.logf("  idle %s: %.0f s, %d ups, %.2f CPU s (%.1f%% of a core), %.0f reconciles, RSS peak %.0f MiB",
		label, w.Seconds, w.Ups, w.CPUSeconds, w.CPUPercent, w.Reconciles, w.PeakRSSMiB)
	return w, nil
}

func (b *bench) bestRate() float64 {
	r := 0.0
	for _, br := range b.res.Bursts {
		if br.Seconds > 0 {
			r = max(r, float64(br.CRs)/br.Seconds)
		}
	}
	return r
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// machineBusy is the CPU time, in seconds, all CPUs have spent on anything but idle and
// iowait since boot (/proc/stat).
func machineBusy() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	total := 0.0
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are already in user
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		total += x
	}
	return total / clockTicks
}

// alternate runs a then b for even i, b then a for odd i, stopping at the first error: the
// operator's run and its raw floor take turns going first, so neither always meets a warmer
// or colder machine.
func alternate(i int, a, b func() error) error {
	if i%2 == 1 {
		a, b = b, a
	}
	if err := a(); err != nil {
		return err
	}
	return b()
}
