package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	nsShards = "bench-shards"
	// ShardLabel is the label the shards' --label-selector picks: s0, s1, ...
	ShardLabel = "bench.measutosh.dev/shard"
)

// ShardResult is the run of several operators sharded by label selector over one PostgreSQL
// backend (phase shards): objects spread round-robin over the shards, created at once; then
// every object changed, one shard killed (SIGKILL) while it works, and started again.
type ShardResult struct {
	Shards  int `json:"shards"`
	Objects int `json:"objects"`
	Workers int `json:"workersPerShard"`
	// CreateSeconds is from creating the objects until all were Ready.
	CreateSeconds float64 `json:"createSeconds"`
	// Ups is the ups each shard ran while the objects were created (one per object of its own).
	Ups []int `json:"ups"`
	// Foreign counts ups a shard ran for an object of another shard's label; Duplicated the
	// objects more than one shard ran an up for (both 0 when sharding holds).
	Foreign    int `json:"foreign"`
	Duplicated int `json:"duplicated"`
	// Locked and Errors are each shard's reconciles that met a locked stack or failed, over
	// the create and the change (the killed shard's until the kill).
	Locked []float64 `json:"locked"`
	Errors []float64 `json:"errors"`
	// PeakRSSMiB is each shard's peak resident memory (its whole tree) during the create.
	PeakRSSMiB []float64 `json:"peakRSSMiB"`
	// The change: every object's replicas 1 -> 2; the killed shard (Killed) is SIGKILLed once it
	// has started KilledAfterUps ups of the change.
	Killed         int `json:"killedShard"`
	KilledAfterUps int `json:"killedAfterUps"`
	// OthersSeconds is from the change until every object of the other shards was Ready at the
	// new generation, with one shard down.
	OthersSeconds float64 `json:"othersSeconds"`
	// DownSeconds is how long the killed shard stayed down; TouchedWhileDown the ups other
	// shards ran meanwhile for its objects (0), DoneBeforeKill how many of its objects were
	// Ready at the new generation when it was killed.
	DownSeconds      float64 `json:"downSeconds"`
	TouchedWhileDown int     `json:"touchedWhileDown"`
	DoneBeforeKill   int     `json:"doneBeforeKill"`
	// ResumeSeconds is from starting the killed shard again until all its objects were Ready
	// at the new generation; ResumeUps the ups it ran; ResumeLocked the reconciles of it that met
	// a lock (its own, left by the kill); ResumeErrors those that failed.
	ResumeSeconds float64 `json:"resumeSeconds"`
	ResumeUps     int     `json:"resumeUps"`
	ResumeLocked  float64 `json:"resumeLocked"`
	ResumeErrors  float64 `json:"resumeErrors"`
	// StaleLocksCancelled is how many locks left by the kill the shard found and cancelled
	// when it came back ("cancelled stale lock" in its log).
	StaleLocksCancelled int `json:"staleLocksCancelled"`
	// The PostgreSQL server after the run: what its database grew by over the phase, its
	// connections at most (sampled), and the CPU of its processes over the whole phase.
	PGDatabaseMiB float64   `json:"pgDatabaseMiB"`
	PGConnections int       `json:"pgConnectionsPeak"`
	PGCPUSeconds  float64   `json:"pgCPUSeconds"`
	OperatorsCPU  float64   `json:"operatorsCPUSeconds"`
	ClusterCPU    float64   `json:"clusterCPUSeconds"`
	Commit        string    `json:"commit"`
	Date          time.Time `json:"date"`
}

// phaseShards runs ShardResult's scenario on --postgres-url.
func (b *bench) phaseShards(ctx context.Context) error {
	if b.opts.postgresURL == "" {
		return errors.New("the shard run needs a PostgreSQL backend: pass --postgres-url (run.sh starts one)")
	}
	n, objects := b.opts.shards, b.opts.shardObjects
	res := &ShardResult{Shards: n, Objects: objects, Workers: 1, Commit: b.res.Versions.Operator, Date: time.Now()}
	b.res.Shards = res
	if err := b.kube.ensureNamespace(ctx, nsShards); err != nil {
		return err
	}
	pg := newPGStats(b, b.opts.postgresURL)
	defer pg.stop()
	pgCPU0, pgSize0 := pg.cpu(), pg.size(ctx)
	cl0 := b.clusterCPU()
	ops := make([]*operator, n)
	defer func() {
		for _, op := range ops {
			b.stopOperator(op)
		}
	}()
	start := func(i int, label string) (*operator, error) {
		return b.startOperator(ctx, operatorSpec{name: fmt.Sprintf("shard-s%d%s", i, label), namespace: nsShards,
			labelSelector: fmt.Sprintf("%s=s%d", ShardLabel, i), workers: res.Workers, resync: 10 * time.Minute,
			backendURL: b.opts.postgresURL, stateDir: filepath.Join(b.stateDir, fmt.Sprintf("shard-s%d", i))})
	}
	var opCPU0 []float64
	for i := range ops {
		op, err := start(i, "")
		if err != nil {
			return err
		}
		ops[i] = op
		c, _ := b.host.treeCPU(op.pid())
		opCPU0 = append(opCPU0, c)
	}
	shardOf := map[string]int{}
	objs := make([]*unstructured.Unstructured, objects)
	keys := make([]string, objects)
	byShard := make([][]string, n)
	for i := range objs {
		u := crObject(nsShards, fmt.Sprintf("o-%05d", i), 1, false)
		u.SetLabels(map[string]string{ShardLabel: fmt.Sprintf("s%d", i%n)})
		objs[i], keys[i] = u, nsShards+"/"+u.GetName()
		shardOf[keys[i]] = i % n
		byShard[i%n] = append(byShard[i%n], keys[i])
	}
	smps := make([]*sampler, n)
	for i, op := range ops {
		smps[i] = startSampler(b.host, op.pid())
	}
	b.logf("shards: %d operators (--label-selector %s=s<i>, --workers %d) on PostgreSQL; creating %d objects", n, ShardLabel, res.Workers, objects)
	t0 := time.Now()
	if err := b.kube.createMany(ctx, objs, 20); err != nil {
		return err
	}
	last, ready, err := b.kube.crs.waitAll(ctx, keys, 1, time.Duration(objects)*4*time.Second+10*time.Minute)
	for _, s := range smps {
		peak, _, _, _ := s.stop()
		res.PeakRSSMiB = append(res.PeakRSSMiB, mib(peak))
	}
	if err != nil {
		return fmt.Errorf("shards: %d of %d objects Ready: %w", ready, objects, err)
	}
	res.CreateSeconds = last.Sub(t0).Seconds()
	seen := map[string]int{}
	for i, op := range ops {
		ups := 0
		for _, l := range op.logLines() {
			if l.Msg != "running up" || l.Object == "" {
				continue
			}
			ups++
			seen[l.Object]++
			if s, ok := shardOf[l.Object]; ok && s != i {
				res.Foreign++
			}
		}
		res.Ups = append(res.Ups, ups)
	}
	for _, c := range seen {
		if c > 1 {
			res.Duplicated++
		}
	}
	b.logf("  %d objects Ready in %.0f s; ups per shard %v; foreign %d, duplicated %d; peak RSS %v MiB", objects, res.CreateSeconds, res.Ups, res.Foreign, res.Duplicated, roundAll(res.PeakRSSMiB))

	// The change, and a shard killed while it works on it.
	k := 1 % n
	res.Killed = k
	res.KilledAfterUps = max(len(byShard[k])/10, 1)
	tChange := time.Now().Truncate(time.Millisecond)
	patched := make(chan error, 1)
	go func() {
		var errs []error
		for _, key := range keys {
			ns, name, _ := strings.Cut(key, "/")
			if err := b.kube.patchReplicas(ctx, ns, name, 2); err != nil {
				errs = append(errs, err)
			}
		}
		patched <- errors.Join(errs...)
	}()
	b.logf("  changing every object (replicas 1 -> 2); shard s%d is killed after %d of its ups", k, res.KilledAfterUps)
	deadline := time.Now().Add(10 * time.Minute)
	for ops[k].countMsg("running up", tChange) < res.KilledAfterUps {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("shards: s%d started fewer than %d ups of the change within 10 minutes (log %s)", k, res.KilledAfterUps, ops[k].logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Into the up (which takes the stack's lock early and runs about half a second), so the
	// kill leaves what a crash leaves: a held lock and a pending operation.
	time.Sleep(300 * time.Millisecond)
	res.Locked, res.Errors = make([]float64, n), make([]float64, n)
	res.Locked[k], _ = ops[k].metric("pulumi_operator_reconciles_total", map[string]string{"result": "locked"})
	res.Errors[k], _ = ops[k].metric("pulumi_operator_reconciles_total", map[string]string{"result": "error"})
	if c, err := b.host.treeCPU(ops[k].pid()); err == nil {
		res.OperatorsCPU += c - opCPU0[k]
	}
	ops[k].kill()
	b.running.Delete(ops[k])
	tKill := time.Now()
	ops[k] = nil
	for _, key := range byShard[k] {
		if _, ok := b.kube.crs.readyAt(key, 2); ok {
			res.DoneBeforeKill++
		}
	}
	if err := <-patched; err != nil {
		return err
	}
	var others []string
	for i := range n {
		if i != k {
			others = append(others, byShard[i]...)
		}
	}
	last, ready, err = b.kube.crs.waitAll(ctx, others, 2, time.Duration(len(others))*4*time.Second+10*time.Minute)
	if err != nil {
		return fmt.Errorf("shards: with s%d down, %d of %d objects of the others Ready at the change: %w", k, ready, len(others), err)
	}
	res.OthersSeconds = last.Sub(tChange).Seconds()
	// A little longer down, so that a shard taking over its objects would have shown.
	time.Sleep(10 * time.Second)
	for i, op := range ops {
		if op == nil {
			continue
		}
		for _, l := range op.logLines() {
			if l.Msg == "running up" && !l.At.Before(tKill) {
				if s, ok := shardOf[l.Object]; ok && s == k {
					res.TouchedWhileDown++
				}
			}
		}
		res.Locked[i], _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "locked"})
		res.Errors[i], _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "error"})
	}
	b.logf("  others Ready at the change %.0f s after it; s%d down, %d of its %d objects done before the kill, %d ups of them by other shards",
		res.OthersSeconds, k, res.DoneBeforeKill, len(byShard[k]), res.TouchedWhileDown)

	res.DownSeconds = time.Since(tKill).Seconds()
	t1 := time.Now()
	op, err := start(k, "-restart")
	if err != nil {
		return err
	}
	ops[k] = op
	last, ready, err = b.kube.crs.waitAll(ctx, byShard[k], 2, time.Duration(len(byShard[k]))*4*time.Second+10*time.Minute)
	if err != nil {
		return fmt.Errorf("shards: after s%d came back, %d of its %d objects Ready at the change: %w", k, ready, len(byShard[k]), err)
	}
	res.ResumeSeconds = last.Sub(t1).Seconds()
	res.ResumeUps = op.countMsg("running up", time.Time{})
	res.ResumeLocked, _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "locked"})
	res.ResumeErrors, _ = op.metric("pulumi_operator_reconciles_total", map[string]string{"result": "error"})
	res.StaleLocksCancelled = op.countMsg("cancelled stale lock", time.Time{})
	for i, op := range ops {
		if c, err := b.host.treeCPU(op.pid()); err == nil && i != k {
			res.OperatorsCPU += c - opCPU0[i]
		} else if err == nil {
			res.OperatorsCPU += c
		}
	}
	res.PGCPUSeconds = pg.cpu() - pgCPU0
	res.ClusterCPU = b.clusterCPU() - cl0
	res.PGDatabaseMiB, res.PGConnections = pg.size(ctx)-pgSize0, pg.peak()
	b.logf("  s%d back: its objects Ready at the change %.0f s after its start (%d ups, %d stale locks cancelled, %.0f locked, %.0f errors); PostgreSQL: %.1f MiB, %d connections at most, %.0f CPU s",
		k, res.ResumeSeconds, res.ResumeUps, res.StaleLocksCancelled, res.ResumeLocked, res.ResumeErrors, res.PGDatabaseMiB, res.PGConnections, res.PGCPUSeconds)
	return nil
}

// kill sends SIGKILL and waits for the process (a crash: no grace, no lock released).
func (o *operator) kill() {
	if o == nil || o.cmd.Process == nil {
		return
	}
	_ = o.cmd.Process.Kill()
	<-o.done
	o.done <- nil // for a later stop
}

func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}

// pgStats reads the PostgreSQL server of --postgres-url: its processes' CPU (the postmaster
// of PG_DIR/data, as run.sh starts it, and the backends it has waited for), its database's
// size and its connections (psql, sampled every second until stop).
type pgStats struct {
	b         *bench
	url       string
	pid       int
	stopc     chan struct{}
	peakc     chan int
	once      sync.Once
	peakConns int
}

func newPGStats(b *bench, url string) *pgStats {
	p := &pgStats{b: b, url: url, stopc: make(chan struct{}), peakc: make(chan int, 1)}
	if dir := os.Getenv("PG_DIR"); dir != "" {
		raw, _ := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
		first, _, _ := strings.Cut(string(raw), "\n")
		p.pid, _ = strconv.Atoi(strings.TrimSpace(first))
	}
	go func() {
		peak := 0
		for {
			if c, err := p.query(context.Background(), "select count(*) from pg_stat_activity where datname = current_database()"); err == nil {
				if v, err := strconv.Atoi(c); err == nil {
					peak = max(peak, v)
				}
			}
			select {
			case <-p.stopc:
				p.peakc <- peak
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return p
}

func (p *pgStats) cpu() float64 {
	if p.pid == 0 {
		return 0
	}
	c, _ := p.b.host.treeCPU(p.pid)
	return c
}

func (p *pgStats) query(ctx context.Context, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "psql", p.url, "-Atc", sql).Output()
	return strings.TrimSpace(string(out)), err
}

func (p *pgStats) size(ctx context.Context) float64 {
	s, err := p.query(ctx, "select pg_database_size(current_database())")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(s, 64)
	return mib(int64(v))
}

// peak stops the sampling and returns the most connections seen.
func (p *pgStats) peak() int {
	p.once.Do(func() {
		close(p.stopc)
		p.peakConns = <-p.peakc
	})
	return p.peakConns
}

func (p *pgStats) stop() { p.peak() }
