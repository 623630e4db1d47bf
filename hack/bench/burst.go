package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// burstRun is one burst of figure 2: at workers workers, with the engine host when host is
// set, of build, in round round (from 0) of --burst-rounds.
type burstRun struct {
	workers int
	host    bool
	build   *build
	round   int
}

// phaseBurst measures figure 2 at one worker count: 100 CRs created at once, time until all
// are Ready, the peak resident memory of the operator and its pulumi processes, and the CPU
// they used. With r.host the operator runs with --engine-host (its ups then run in that one
// process instead of a pulumi CLI each); without, with --engine-host none. The objects stay
// (Ready, in the shared backend); those of the first round of the build under test are the
// idle measurement's.
func (b *bench) phaseBurst(ctx context.Context, r burstRun) BurstResult {
	ns := fmt.Sprintf("bench-burst-w%d", r.workers)
	name := fmt.Sprintf("burst-w%d", r.workers)
	engineHost := ""
	if r.host {
		ns, name, engineHost = ns+"-host", name+"-host", r.build.engineHost
	}
	if r.round > 0 {
		ns, name = fmt.Sprintf("%s-r%d", ns, r.round), fmt.Sprintf("%s-r%d", name, r.round)
	}
	ns, name = ns+r.build.suffix, name+r.build.suffix
	return b.burst(ctx, burstSpec{crs: b.opts.burst, namespace: ns, name: name, workers: r.workers, engineHost: engineHost,
		build: r.build, pool: r.build == b.under && r.round == 0})
}

// burstSpec is one burst: crs new objects in namespace, created at once, reconciled by an
// operator (log operator-<name>.log) of workers workers with --engine-host engineHost (""
// for none) on backendURL.
type burstSpec struct {
	crs             int
	namespace, name string
	workers         int
	engineHost      string
	backendURL      string // the operator's --backend-url; "" for the run's file backend
	// build is whose operator runs it (nil: the build under test); pool says its objects
	// carry the idle pool's label.
	build *build
	pool  bool
}

// burst runs s and measures it (figure 2, and the bursts of the cost curve).
func (b *bench) burst(ctx context.Context, s burstSpec) BurstResult {
	r := BurstResult{Workers: s.workers, CRs: s.crs, EngineHost: s.engineHost != ""}
	ns, name, workers, engineHost := s.namespace, s.name, s.workers, s.engineHost
	if err := b.kube.ensureNamespace(ctx, ns); err != nil {
		r.Error = err.Error()
		return r
	}
	// The CLI rows say --engine-host none: the operator would otherwise use the engine host
	// beside it by default.
	flag := engineHost
	if flag == "" {
		flag = stack.NoEngineHost
	}
	bd := s.build
	if bd == nil {
		bd = b.under
	}
	op, err := b.startOperator(ctx, operatorSpec{name: name, namespace: ns, workers: workers, resync: 10 * time.Minute, engineHost: flag, backendURL: s.backendURL,
		binary: bd.operator, pulumi: bd.pulumi, stateDir: bd.stateDir})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer b.stopOperator(op)
	objs := make([]*unstructured.Unstructured, s.crs)
	keys := make([]string, s.crs)
	for i := range objs {
		objs[i] = crObject(ns, fmt.Sprintf("b-%03d", i), 1, s.pool)
		keys[i] = ns + "/" + objs[i].GetName()
	}
	// The whole tree's CPU: the engine host lives on after the burst, so its CPU (and that of
	// the provider plugins it has waited for) is not yet in the operator's children's.
	cpu0, _ := b.host.treeCPU(op.pid())
	opSelf0, _ := b.host.cpu(op.pid())
	busy0, cl0, self0 := b.host.busy(), b.clusterCPU(), rusageCPU(syscall.RUSAGE_SELF)
	req0, _ := op.metric("rest_client_requests_total", nil)
	smp := startSampler(b.host, op.pid())
	t0 := time.Now()
	if err := b.kube.createMany(ctx, objs, 20); err != nil {
		smp.stop()
		r.Error = err.Error()
		return r
	}
	// w=1 runs the 100 ups one after the other: allow 20 s each.
	last, ready, err := b.kube.crs.waitAll(ctx, keys, 1, time.Duration(s.crs)*20*time.Second/time.Duration(min(workers, 2)))
	peakTree, peakSelf, _, procs := smp.stop()
	cpu1, _ := b.host.treeCPU(op.pid())
	opSelf1, _ := b.host.cpu(op.pid())
	busy, cl, self := b.host.busy()-busy0, b.clusterCPU()-cl0, rusageCPU(syscall.RUSAGE_SELF)-self0
	r.Ready = ready
	if err != nil {
		r.Error = err.Error()
	} else {
		r.Seconds = last.Sub(t0).Seconds()
	}
	r.OperatorCPUSeconds = cpu1 - cpu0
	r.OperatorSelfCPUSeconds = opSelf1.self - opSelf0.self
	r.MachineBusyCPUSeconds, r.ClusterCPUSeconds, r.BenchCPUSeconds = busy, cl, self
	r.OtherCPUSeconds = max(busy-r.OperatorCPUSeconds-cl-self, 0)
	r.PeakTreeRSSMiB, r.PeakOperatorRSSMiB, r.PeakProcesses = mib(peakTree), mib(peakSelf), procs
	r.Ups = op.countMsg("running up", t0.Truncate(time.Millisecond))
	req1, _ := op.metric("rest_client_requests_total", nil)
	r.APIRequests = req1 - req0
	r.ReconcileErrors, _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "error"})
	r.ReconcileLocked, _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "locked"})
	if b.floorCPU > 0 {
		r.FloorSeconds = b.floorCPU * float64(s.crs) / float64(b.cores)
		if r.Seconds > 0 {
			r.Ratio = r.Seconds / r.FloorSeconds
		}
	}
	b.logf("  burst w=%d%s: %d/%d Ready in %.1f s (floor %.1f s, %.2fx), peak RSS %.0f MiB (operator %.0f MiB, %d processes), %d ups, %.0f errors",
		workers, cond(r.EngineHost, " (engine host)", ""), ready, s.crs, r.Seconds, r.FloorSeconds, r.Ratio, r.PeakTreeRSSMiB, r.PeakOperatorRSSMiB, procs, r.Ups, r.ReconcileErrors)
	b.logf("    CPU: operator tree %.0f s (the operator process itself %.1f s), cluster %.0f s, bench %.0f s, other work on the machine %.0f s, of %.0f s busy",
		r.OperatorCPUSeconds, r.OperatorSelfCPUSeconds, cl, self, r.OtherCPUSeconds, busy)
	return r
}
