package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

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
	start := func(name, binary, pulumi string) (*operator, error) {
		return b.startOperator(ctx, operatorSpec{name: name, labelSelector: sel, workers: b.opts.idleWorkers, resync: b.opts.resync, binary: binary, pulumi: pulumi})
	}
	op, err := start("idle", "", "")
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
	// Idle is the steady state: the engine host that ran the creates stops after its idle time
	// (stack.engineHostIdle), and the window, which counts the whole tree's memory, starts once
	// the operator runs alone.
	t0 := time.Now()
	for len(b.host.tree(op.pid())) > 1 && time.Since(t0) < 2*time.Minute && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	res.AloneAfterSeconds = time.Since(t0).Seconds()
	b.logf("  the operator ran alone %.0f s after the last create (%d processes in its tree now)", res.AloneAfterSeconds, len(b.host.tree(op.pid())))
	w, err := b.idleWindow(ctx, op, "after creating them")
	if err != nil {
		return err
	}
	res.Windows = append(res.Windows, w)
	// The windows after a restart: --idle-rounds of them, each from a fresh start, the build
	// beside (--beside) taking turns with this one over the same objects and state. A window's
	// peak memory is one moment of the garbage collector's cycle; their median is the figure.
	builds := []*build{b.under}
	if b.beside != nil {
		builds = append(builds, b.beside)
	}
	restarts := make([][]IdleWindow, len(builds))
	for round := range b.opts.idleRounds {
		var steps []func() error
		for j, bd := range builds {
			steps = append(steps, func() error {
				b.stopOperator(op)
				var err error
				if op, err = start("idle-restart"+bd.suffix+cond(round > 0, fmt.Sprintf("-%d", round), ""), bd.operator, bd.pulumi); err != nil {
					return err
				}
				w, err := b.idleWindow(ctx, op, "after a restart"+cond(bd.suffix != "", " (beside)", ""))
				w.Label = "after a restart"
				restarts[j] = append(restarts[j], w)
				return err
			})
		}
		if err := inTurn(round, steps...); err != nil {
			return err
		}
	}
	res.Windows = append(res.Windows, medianWindow(restarts[0]))
	if b.beside != nil {
		w := medianWindow(restarts[1])
		b.res.Beside.Idle = &w
	}
	// Candidate builds over the same objects (--idle-compare), each a fresh start.
	for _, c := range b.opts.idleCompare {
		b.stopOperator(op)
		if op, err = start("idle-"+c.label, c.binary, ""); err != nil {
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

// medianWindow is ws as one window: the median of each of its figures over them, except the
// Pulumi runs, which are their sum (any run is one too many); Rounds is how many there were.
// ws[0] itself when it is the only one.
func medianWindow(ws []IdleWindow) IdleWindow {
	if len(ws) == 1 {
		return ws[0]
	}
	w := IdleWindow{Label: fmt.Sprintf("%s (median of %d starts)", ws[0].Label, len(ws)), Resyncs: ws[0].Resyncs, Rounds: len(ws)}
	of := func(f func(IdleWindow) float64) float64 {
		xs := make([]float64, len(ws))
		for i, x := range ws {
			xs[i] = f(x)
		}
		return median(xs)
	}
	for _, x := range ws {
		w.Ups += x.Ups
		w.PeakProcesses = max(w.PeakProcesses, x.PeakProcesses)
	}
	w.Seconds = of(func(x IdleWindow) float64 { return x.Seconds })
	w.Reconciles = of(func(x IdleWindow) float64 { return x.Reconciles })
	w.APIRequests = of(func(x IdleWindow) float64 { return x.APIRequests })
	w.CPUSeconds = of(func(x IdleWindow) float64 { return x.CPUSeconds })
	w.CPUPercent = of(func(x IdleWindow) float64 { return x.CPUPercent })
	w.PeakRSSMiB = of(func(x IdleWindow) float64 { return x.PeakRSSMiB })
	w.MeanRSSMiB = of(func(x IdleWindow) float64 { return x.MeanRSSMiB })
	w.PeakTreeRSSMiB = of(func(x IdleWindow) float64 { return x.PeakTreeRSSMiB })
	return w
}

// waitSettled waits until the operator has reconciled at least n objects and its queue is
// empty.
func waitSettled(ctx context.Context, op *operator, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		done, err1 := op.metric("pulumi_operator_reconciles_total", nil)
		depth, err2 := op.metric("workqueue_depth", nil)
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
	rec0, _ := op.metric("pulumi_operator_reconciles_total", nil)
	req0, _ := op.metric("rest_client_requests_total", nil)
	cpu0, err := b.host.cpu(op.pid())
	if err != nil {
		return w, fmt.Errorf("read operator CPU: %w", err)
	}
	smp := startSampler(b.host, op.pid())
	t0 := time.Now()
	select {
	case <-ctx.Done():
		smp.stop()
		return w, ctx.Err()
	case <-time.After(3*b.opts.resync + 2*time.Second):
	}
	peakTree, peak, mean, procs := smp.stop()
	cpu1, _ := b.host.cpu(op.pid())
	w.Seconds = time.Since(t0).Seconds()
	w.Ups = op.countMsg("running up", t0.Truncate(time.Millisecond))
	w.CPUSeconds = cpu1.self - cpu0.self
	w.CPUPercent = 100 * w.CPUSeconds / w.Seconds
	w.PeakRSSMiB, w.MeanRSSMiB = mib(peak), mib(mean)
	w.PeakTreeRSSMiB, w.PeakProcesses = mib(peakTree), procs
	rec1, _ := op.metric("pulumi_operator_reconciles_total", nil)
	w.Reconciles = rec1 - rec0
	req1, _ := op.metric("rest_client_requests_total", nil)
	w.APIRequests = req1 - req0
	b.logf("  idle %s: %.0f s, %d ups, %.2f CPU s (%.1f%% of a core), %.0f reconciles, %.0f API requests, RSS peak %.0f MiB",
		label, w.Seconds, w.Ups, w.CPUSeconds, w.CPUPercent, w.Reconciles, w.APIRequests, w.PeakRSSMiB)
	return w, nil
}

func (b *bench) bestRate() float64 {
	r := 0.0
	all := b.res.Bursts
	if b.res.Scale != nil {
		all = append(slices.Clip(all), b.res.Scale.Bursts...)
	}
	for _, br := range all {
		if br.Seconds > 0 {
			r = max(r, float64(br.CRs)/br.Seconds)
		}
	}
	return r
}
