package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// nsScale is the namespace of the cost curve's idle objects; its largest burst is created
// there, so that the idle curve's first point reuses it.
const nsScale = "bench-scale"

// ScaleResult is the cost curve (phase scale, `make bench-scale`): bursts of growing size
// with the engine host, and an idle operator over a growing number of unchanged objects.
type ScaleResult struct {
	// Workers is the --workers of the bursts (with the engine host); IdleWorkers that of the
	// idle operator, which also creates the objects the idle points add.
	Workers     int `json:"workers"`
	IdleWorkers int `json:"idleWorkers"`
	// Backend is the operators' backend: "postgres" (a table of its own on the run's
	// PostgreSQL server) or "file"; "" in results from before it was recorded (file).
	Backend string        `json:"backend,omitempty"`
	Bursts  []BurstResult `json:"bursts"`
	Idle    []ScalePoint  `json:"idle"`
	// Floors are the CPU of a raw up of a new stack (the bench's floor: a `pulumi up` process
	// and its provider plugin, no operator) measured before each burst and after the idle
	// curve, with the KindCustomHttps the cluster held then: whether an up itself costs more
	// in a fuller cluster.
	Floors []ScaleFloor `json:"floors,omitempty"`
	// BaseRSSMiB is the resident memory of an operator over no objects (3 s after it is ready).
	BaseRSSMiB float64 `json:"baseRSSMiB"`
	// Reduced says which points were left out and why (the run's budget).
	Reduced []string `json:"reduced,omitempty"`
	// Notes are what a reader should know to read the figures (added by hand to the results
	// when a run shows something the bench does not measure).
	Notes []string `json:"notes,omitempty"`
	// Commit is the operator commit the curve was measured on (git describe).
	Commit string    `json:"commit"`
	Date   time.Time `json:"date"`
}

// ScalePoint is the idle cost at CRs objects: one operator (namespace-scoped to nsScale) over
// them through 3 resyncs, then a new operator process over the same objects (a restart).
type ScalePoint struct {
	CRs int `json:"crs"`
	// Created objects were added for this point, in CreateSeconds (their ups included).
	Created       int     `json:"created"`
	CreateSeconds float64 `json:"createSeconds"`
	// Windows are "steady" (the operator that created the objects, once its engine host has
	// stopped) and "after a restart" (a new process, caches listed again).
	Windows []IdleWindow `json:"windows"`
	// RestartSeconds is from starting the new process until it had reconciled every object
	// and its queue was empty (the relist's cost); RestartUps the ups it ran meanwhile (0).
	RestartSeconds float64 `json:"restartSeconds"`
	RestartUps     int     `json:"restartUps"`
	// Cluster is what the local cluster's processes used at this point (end of the steady
	// window): which part bends first.
	Cluster []ComponentUse `json:"cluster"`
	// EtcdDBMiB is the size of etcd's database file.
	EtcdDBMiB float64 `json:"etcdDBMiB"`
}

// ScaleFloor is one measurement of ScaleResult.Floors.
type ScaleFloor struct {
	Objects    int     `json:"objects"`
	CPUSeconds float64 `json:"cpuSeconds"`
}

// floorNow measures a ScaleFloor with the objects the cluster holds now (objects).
func (b *bench) floorNow(ctx context.Context, res *ScaleResult, objects int) {
	cpu, _, err := b.rawFloorCPU(ctx, fmt.Sprintf("scale-floor-%d", len(res.Floors)))
	if err != nil {
		b.logf("  raw up at %d objects: %v", objects, err)
		return
	}
	res.Floors = append(res.Floors, ScaleFloor{Objects: objects, CPUSeconds: cpu})
	b.logf("  raw up of a new stack with %d KindCustomHttps in the cluster: %.2f CPU s", objects, cpu)
}

// ComponentUse is one process of the local cluster: resident memory at the end of a window
// and CPU seconds during it.
type ComponentUse struct {
	Name       string  `json:"name"`
	RSSMiB     float64 `json:"rssMiB"`
	CPUSeconds float64 `json:"cpuSeconds"`
}

// perObjectKiB is the steady window's peak RSS per object, in KiB.
func (p ScalePoint) perObjectKiB() float64 {
	if p.CRs == 0 || len(p.Windows) == 0 {
		return 0
	}
	return p.Windows[0].rss() * 1024 / float64(p.CRs)
}

// clusterUse reads the CPU seconds (self) and resident memory of each process of the local
// cluster (CLUSTER_DIR/pids/<component>.pid), keyed by component.
func (b *bench) clusterUse() map[string]ComponentUse {
	out := map[string]ComponentUse{}
	if b.clusterDir == "" {
		return out
	}
	files, _ := filepath.Glob(filepath.Join(b.clusterDir, "pids", "*.pid"))
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			continue
		}
		c, err := b.host.cpu(pid)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		out[name] = ComponentUse{Name: name, RSSMiB: mib(b.host.rss(pid)), CPUSeconds: c.self}
	}
	return out
}

// clusterDelta is end's memory and the CPU spent from start to end, per component, sorted by
// name.
func clusterDelta(start, end map[string]ComponentUse) []ComponentUse {
	var out []ComponentUse
	for name, e := range end {
		e.CPUSeconds -= start[name].CPUSeconds
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b ComponentUse) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// etcdDBMiB is the size of the local cluster's etcd database file (CLUSTER_DIR/etcd/member/snap/db).
func (b *bench) etcdDBMiB() float64 {
	st, err := os.Stat(filepath.Join(b.clusterDir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0
	}
	return mib(st.Size())
}

// scaleTable is the PostgreSQL table of the cost curve's stacks, apart from the shard run's.
const scaleTable = "scale_stacks"

// withTable is the postgres:// URL raw with its table parameter set to table (the table the
// PostgreSQL backend keeps its stacks in).
func withTable(raw, table string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--postgres-url: %w", err)
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// phaseScale measures the cost curve: a burst of each size of --scale-bursts (ascending; the
// largest one in nsScale), then the idle cost at each count of --scale-idle (ascending),
// creating the missing objects in nsScale before each point (real ups, through the idle
// operator). Every operator of the phase is on --scale-backend. A point the run's budget
// cannot pay for is left out, with the reason.
func (b *bench) phaseScale(ctx context.Context) error {
	workers := 2
	if len(b.opts.hostWorkers) > 0 {
		workers = b.opts.hostWorkers[0]
	}
	res := &ScaleResult{Workers: workers, IdleWorkers: workers, Backend: b.opts.scaleBackend, Commit: b.res.Versions.Operator, Date: time.Now()}
	b.res.Scale = res
	backendURL := ""
	if res.Backend == "postgres" {
		var err error
		if backendURL, err = withTable(b.opts.postgresURL, scaleTable); err != nil {
			return err
		}
	}
	if b.opts.engineHost == "" {
		return fmt.Errorf("the cost curve needs the engine host beside --pulumi (`make build`)")
	}
	// An operator over no objects: where the memory curve starts.
	if err := b.kube.ensureNamespace(ctx, nsScale+"-empty"); err != nil {
		return err
	}
	empty, err := b.startOperator(ctx, operatorSpec{name: "scale-empty", namespace: nsScale + "-empty", workers: b.opts.idleWorkers, resync: b.opts.resync})
	if err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	res.BaseRSSMiB = mib(b.host.rss(empty.pid()))
	b.stopOperator(empty)
	b.logf("cost curve: an operator over no objects: %.0f MiB", res.BaseRSSMiB)
	sizes := b.opts.scaleBursts
	inCluster := 0 // KindCustomHttps the curve has created
	for i, n := range sizes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.floorNow(ctx, res, inCluster)
		inCluster += n
		ns, name := fmt.Sprintf("bench-scale-burst-%d", n), fmt.Sprintf("scale-burst-%d", n)
		if i == len(sizes)-1 {
			ns = nsScale
		}
		b.logf("cost curve: burst of %d CRs at --workers %d with the engine host", n, workers)
		b.load(fmt.Sprintf("scale burst %d, start", n))
		r := b.burst(ctx, burstSpec{crs: n, namespace: ns, name: name, workers: workers, engineHost: b.opts.engineHost, backendURL: backendURL, pool: true})
		res.Bursts = append(res.Bursts, r)
		if r.Error != "" {
			return fmt.Errorf("burst of %d: %s", n, r.Error)
		}
	}
	if len(b.opts.scaleIdle) == 0 {
		return nil
	}
	if err := b.kube.ensureNamespace(ctx, nsScale); err != nil {
		return err
	}
	existing := 0
	if len(sizes) > 0 {
		existing = sizes[len(sizes)-1]
	}
	// The bursts' worker count, which creates objects fastest: on a machine the size of the
	// bench's, more workers only add contention (docs/benchmarks.md, figure 2 by --workers).
	start := func(label string) (*operator, error) {
		return b.startOperator(ctx, operatorSpec{name: "scale-" + label, namespace: nsScale, labelSelector: PoolLabel + "=idle",
			workers: workers, resync: b.opts.resync, backendURL: backendURL})
	}
	op, err := start("idle-" + strconv.Itoa(existing))
	if err != nil {
		return err
	}
	defer func() { b.stopOperator(op) }()
	if err := waitSettled(ctx, op, existing); err != nil {
		return err
	}
	defer func() { b.floorNow(ctx, res, inCluster) }()
	for _, n := range b.opts.scaleIdle {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p := ScalePoint{CRs: n}
		if create := n - existing; create > 0 {
			if reason := b.scaleAffordable(create, len(b.opts.scaleIdle)); reason != "" {
				res.Reduced = append(res.Reduced, fmt.Sprintf("idle at %d objects not measured: %s", n, reason))
				b.logf("  %s", res.Reduced[len(res.Reduced)-1])
				break
			}
			objs := make([]*unstructured.Unstructured, create)
			keys := make([]string, create)
			for i := range objs {
				objs[i] = crObject(nsScale, fmt.Sprintf("s-%05d", existing+i), 1, true)
				keys[i] = nsScale + "/" + objs[i].GetName()
			}
			b.logf("cost curve: creating %d more objects (%d in all)", create, n)
			t0 := time.Now()
			if err := b.kube.createMany(ctx, objs, 20); err != nil {
				return err
			}
			timeout := time.Duration(float64(create)/max(b.bestRate(), 0.05)*3)*time.Second + 10*time.Minute
			last, ready, err := b.kube.crs.waitAll(ctx, keys, 1, timeout)
			if err != nil {
				return fmt.Errorf("cost curve: %d of %d new objects Ready: %w", ready, create, err)
			}
			p.Created, p.CreateSeconds = create, last.Sub(t0).Seconds()
			existing = n
			inCluster += create
			b.logf("  created %d objects in %.0f s (%.2f s each)", create, p.CreateSeconds, p.CreateSeconds/float64(create))
			if err := waitSettled(ctx, op, n); err != nil {
				return err
			}
		}
		// The steady state: the engine host that ran the creates has stopped.
		t0 := time.Now()
		for len(b.host.tree(op.pid())) > 1 && time.Since(t0) < 2*time.Minute && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
		}
		c0 := b.clusterUse()
		w, err := b.idleWindow(ctx, op, fmt.Sprintf("%d objects, steady", n))
		if err != nil {
			return err
		}
		p.Cluster, p.EtcdDBMiB = clusterDelta(c0, b.clusterUse()), b.etcdDBMiB()
		p.Windows = append(p.Windows, w)
		b.stopOperator(op)
		t1 := time.Now()
		if op, err = start("restart-" + strconv.Itoa(n)); err != nil {
			return err
		}
		if err := waitSettled(ctx, op, n); err != nil {
			return err
		}
		p.RestartSeconds = time.Since(t1).Seconds()
		p.RestartUps = op.countMsg("running up", time.Time{})
		w, err = b.idleWindow(ctx, op, fmt.Sprintf("%d objects, after a restart", n))
		if err != nil {
			return err
		}
		p.Windows = append(p.Windows, w)
		res.Idle = append(res.Idle, p)
		b.logf("  %d objects: settled %.1f s after a restart (%d ups); %.1f KiB per object; cluster: %s; etcd db %.0f MiB",
			n, p.RestartSeconds, p.RestartUps, p.perObjectKiB(), fmtCluster(p.Cluster), p.EtcdDBMiB)
		b.load(fmt.Sprintf("scale idle %d, end", n))
	}
	return nil
}

// scaleAffordable returns "" when the run's budget can pay for creating create more objects
// (at the best burst rate, with room for the windows of points left), else why not.
func (b *bench) scaleAffordable(create, points int) string {
	// The largest burst's rate: the best one (the smallest burst's) promised half the time
	// adding thousands of objects to a fuller cluster took.
	rate := b.bestRate()
	if n := len(b.res.Scale.Bursts); n > 0 && b.res.Scale.Bursts[n-1].Seconds > 0 {
		last := b.res.Scale.Bursts[n-1]
		rate = float64(last.CRs) / last.Seconds
	}
	if b.opts.budget == 0 || rate == 0 {
		return ""
	}
	need := time.Duration(float64(create)/rate*1.3) * time.Second
	left := b.opts.budget - time.Since(b.start) - time.Duration(points)*(2*(3*b.opts.resync+5*time.Second)+time.Minute)
	if b.opts.phases["shards"] {
		// The shard run comes after the curve: its objects' create and change, a kill and a
		// resume (about two ups per object at the burst rate, and some margin).
		left -= time.Duration(float64(2*b.opts.shardObjects)/rate*1.5)*time.Second + 2*time.Minute
	}
	if need <= left {
		return ""
	}
	return fmt.Sprintf("creating %d more objects would take about %.0f min at the largest burst's rate (%.2f objects/s, +30%%) and the run's budget (%s) leaves %.0f min",
		create, need.Minutes(), rate, b.opts.budget, max(left.Minutes(), 0))
}

func fmtCluster(cs []ComponentUse) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %.0f MiB %.1f CPU s", c.Name, c.RSSMiB, c.CPUSeconds))
	}
	return strings.Join(parts, ", ")
}
