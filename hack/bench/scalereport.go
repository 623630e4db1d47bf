package main

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The markers of the section `make bench-scale` writes into docs/benchmarks.md; `make bench`
// keeps it (keepSections), as it keeps the soak's.
const (
	scaleBegin = "<!-- scale: written by make bench-scale; make bench keeps it -->"
	scaleEnd   = "<!-- /scale -->"
)

// Targets of the cost curve (issue "Grows with its users"): time per object of a burst of
// 1,000 at most 1.2 times that of a burst of 100; 10,000 idle objects under 1 GiB of RSS and
// under 10 % of a core.
const (
	scaleBurstRatioTarget = 1.2
	scaleIdleObjects      = 10000
	scaleIdleRSSTargetMiB = 1024
	scaleIdleCPUTarget    = 10.0 // percent of one core
	sizingObjects         = 100000
)

//go:embed scale.md.tmpl
var scaleSkeleton string

var scaleTemplate = template.Must(template.New("scale.md.tmpl").Parse(scaleSkeleton))

// scaleData is what scale.md.tmpl renders.
type scaleData struct {
	*ScaleResult
	Shards                                       *ShardResult
	Machine                                      Machine
	Generated                                    string
	Minutes                                      float64
	Targets                                      []scaleTarget
	Bursts                                       []scaleBurstRow
	FirstBurst                                   int
	Idle                                         []scaleIdleRow
	IdleWorkers                                  int
	Resync                                       string
	ComponentNames                               []string
	ShardLabel                                   string
	ShardPerObject, PGKiBPerStack                float64
	ShardUps, ShardLocked, ShardErrors, ShardRSS string
	Sizing                                       []string
	Plots                                        []plotRef
	PlotsDir                                     string
}

type scaleTarget struct{ Name, Value, Status string }

type scaleBurstRow struct {
	BurstResult
	PerObject, Ratio, CPUPerUp, ClusterPerObject, APIPerObject float64
}

type scaleIdleRow struct {
	ScalePoint
	SteadyRSS, RestartRSS, KiBPerObject         float64
	SteadyCPUPerResync, RestartCPUPerResync     float64
	SteadyPercent, RestartPercent, APIPerResync float64
	Ups                                         int
	ClusterCells                                []string
}

// scaleSection renders r's cost curve and shard run (nil parts left out) for docs/benchmarks.md.
func (r *Results) scaleSection() (string, error) {
	d := r.scaleData()
	var s strings.Builder
	if err := scaleTemplate.Execute(&s, d); err != nil {
		return "", fmt.Errorf("render scale.md.tmpl: %w", err)
	}
	return s.String(), nil
}

func (r *Results) scaleData() *scaleData {
	sc := r.Scale
	if sc == nil {
		sc = &ScaleResult{}
	}
	d := &scaleData{ScaleResult: sc, Shards: r.Shards, Machine: r.Machine, Generated: r.Date.UTC().Format("2006-01-02 15:04 UTC"),
		Minutes: r.Seconds / 60, IdleWorkers: sc.IdleWorkers, Resync: r.Settings.Resync, ShardLabel: ShardLabel, PlotsDir: plotsDir}
	if d.IdleWorkers == 0 { // results from before ScaleResult.IdleWorkers: the idle operator's --idle-workers
		d.IdleWorkers = r.Settings.IdleWorkers
	}
	if sc.Commit == "" && r.Shards != nil {
		d.ScaleResult.Commit = r.Shards.Commit
	}
	// Bursts.
	var first float64
	for i, b := range sc.Bursts {
		if b.Error != "" || b.Seconds <= 0 || b.CRs == 0 {
			continue
		}
		row := scaleBurstRow{BurstResult: b, PerObject: b.Seconds / float64(b.CRs), CPUPerUp: b.cpuPerUp(),
			ClusterPerObject: b.ClusterCPUSeconds / float64(b.CRs), APIPerObject: b.APIRequests / float64(b.CRs)}
		if i == 0 || first == 0 {
			first, d.FirstBurst = row.PerObject, b.CRs
		}
		row.Ratio = row.PerObject / first
		d.Bursts = append(d.Bursts, row)
	}
	if n := len(d.Bursts); n > 1 {
		last := d.Bursts[n-1]
		d.Targets = append(d.Targets, scaleTarget{
			Name:   fmt.Sprintf("burst: time per object at %d new objects vs at %d, at most %.1fx", last.CRs, d.FirstBurst, scaleBurstRatioTarget),
			Value:  fmt.Sprintf("%.2fx (%.3f s vs %.3f s)", last.Ratio, last.PerObject, first),
			Status: d.burstStatus(last.Ratio <= scaleBurstRatioTarget)})
	}
	// Idle points.
	names := map[string]bool{}
	prevRSS, prevN := sc.BaseRSSMiB, 0
	for _, p := range sc.Idle {
		row := scaleIdleRow{ScalePoint: p, Ups: p.RestartUps}
		resyncs := 3.0
		if len(p.Windows) > 0 {
			w := p.Windows[0]
			row.SteadyRSS, row.SteadyCPUPerResync, row.SteadyPercent, row.APIPerResync = w.rss(), w.CPUSeconds/resyncs, w.CPUPercent, w.APIRequests/resyncs
			row.Ups += w.Ups
		}
		if len(p.Windows) > 1 {
			w := p.Windows[1]
			row.RestartRSS, row.RestartCPUPerResync, row.RestartPercent = w.rss(), w.CPUSeconds/resyncs, w.CPUPercent
			row.Ups += w.Ups
		}
		if p.CRs > prevN {
			row.KiBPerObject = (row.SteadyRSS - prevRSS) * 1024 / float64(p.CRs-prevN)
		}
		prevRSS, prevN = row.SteadyRSS, p.CRs
		for _, c := range p.Cluster {
			names[c.Name] = true
		}
		d.Idle = append(d.Idle, row)
	}
	for n := range names {
		d.ComponentNames = append(d.ComponentNames, n)
	}
	slices.Sort(d.ComponentNames)
	for i := range d.Idle {
		for _, n := range d.ComponentNames {
			cell := "-"
			for _, c := range d.Idle[i].Cluster {
				if c.Name == n {
					cell = fmt.Sprintf("%.0f MiB, %.1f CPU s", c.RSSMiB, c.CPUSeconds)
				}
			}
			d.Idle[i].ClusterCells = append(d.Idle[i].ClusterCells, cell)
		}
	}
	if len(d.Idle) > 0 {
		d.Targets = append(d.Targets, d.idleTargets()...)
	}
	if sh := r.Shards; sh != nil {
		d.ShardPerObject = sh.CreateSeconds / float64(max(sh.Objects, 1))
		d.PGKiBPerStack = sh.PGDatabaseMiB * 1024 / float64(max(sh.Objects, 1))
		d.ShardUps, d.ShardLocked, d.ShardErrors = joinAny(sh.Ups), joinAny(sh.Locked), joinAny(sh.Errors)
		d.ShardRSS = joinAny(roundAll(sh.PeakRSSMiB)) + " MiB"
		lockedSum := 0.0
		for _, l := range sh.Locked {
			lockedSum += l
		}
		d.Targets = append(d.Targets,
			scaleTarget{fmt.Sprintf("shards: each of %d objects reconciled by exactly one shard", sh.Objects),
				fmt.Sprintf("%d ups of another shard's object, %d objects with ups by two shards", sh.Foreign, sh.Duplicated), metOrNot(sh.Foreign == 0 && sh.Duplicated == 0)},
			scaleTarget{"shards: a killed shard's objects untouched by the others", fmt.Sprintf("%d ups of them while it was down", sh.TouchedWhileDown), metOrNot(sh.TouchedWhileDown == 0)},
			scaleTarget{"shards: a killed shard's objects resumed when it returns", fmt.Sprintf("all Ready %.0f s after its start", sh.ResumeSeconds), metOrNot(sh.ResumeSeconds > 0)},
			scaleTarget{"shards: no lock contention between shards", fmt.Sprintf("%.0f reconciles met a lock", lockedSum), metOrNot(lockedSum == 0)})
	}
	d.Sizing = d.sizing()
	d.Plots = scalePlotsFor(r)
	return d
}

// burstStatus is the burst target's status: MET, or NOT MET with where the time per object went
// from the smallest burst to the largest, from the figures of d.Bursts and d.Floors: the
// operator tree's CPU per up and the cluster's CPU per object, and, when the run measured raw
// ups at two cluster sizes or more, whether a raw up (a backend of its own, the same cluster)
// grew too, which tells growth with the objects in the cluster from growth inside the operator.
func (d *scaleData) burstStatus(met bool) string {
	if met || len(d.Bursts) < 2 {
		return metOrNot(met)
	}
	a, b := d.Bursts[0], d.Bursts[len(d.Bursts)-1]
	why := fmt.Sprintf("from %d to %d new objects, the operator tree's CPU per up went from %.2f to %.2f s and the cluster's CPU per object from %.2f to %.2f s",
		a.CRs, b.CRs, a.CPUPerUp, b.CPUPerUp, a.ClusterPerObject, b.ClusterPerObject)
	if n := len(d.Floors); n > 1 {
		lo, hi := d.Floors[0], d.Floors[n-1]
		why += fmt.Sprintf("; a raw up with a backend of its own cost %.2f CPU s with %d objects in the cluster and %.2f with %d", lo.CPUSeconds, lo.Objects, hi.CPUSeconds, hi.Objects)
	}
	return "NOT MET: " + why
}

// idleTargets judges the largest idle point against the 10,000-object targets; below 10,000
// the targets are NOT MEASURED, with a linear extrapolation from the curve shown as such.
func (d *scaleData) idleTargets() []scaleTarget {
	last := d.Idle[len(d.Idle)-1]
	rssName := fmt.Sprintf("idle: %d objects, peak RSS under %d MiB", scaleIdleObjects, scaleIdleRSSTargetMiB)
	cpuName := fmt.Sprintf("idle: %d objects, CPU under %.0f%% of a core at the bench's --resync %s (%.0f times as often as the default, 10m)", scaleIdleObjects, scaleIdleCPUTarget, d.Resync, 600/resyncSeconds(d.Resync))
	rss := max(last.SteadyRSS, last.RestartRSS)
	cpu := max(last.SteadyPercent, last.RestartPercent)
	if last.CRs >= scaleIdleObjects {
		return []scaleTarget{
			{rssName, fmt.Sprintf("%.0f MiB at %d", rss, last.CRs), metOrNot(rss < scaleIdleRSSTargetMiB)},
			{cpuName, fmt.Sprintf("%.1f%% at %d (%.2f%% at --resync 10m)", cpu, last.CRs, cpu*resyncSeconds(d.Resync)/600), metOrNot(cpu < scaleIdleCPUTarget)},
		}
	}
	perObjRSS := (rss - d.BaseRSSMiB) / float64(last.CRs)
	perObjCPU := cpu / float64(last.CRs)
	estRSS := d.BaseRSSMiB + perObjRSS*scaleIdleObjects
	estCPU := perObjCPU * scaleIdleObjects
	why := fmt.Sprintf("measured up to %d objects", last.CRs)
	if len(d.Reduced) > 0 {
		why = "left out, see below"
	}
	return []scaleTarget{
		{rssName, fmt.Sprintf("%.0f MiB at %d; about %.0f MiB at %d by a straight line from an empty operator (%.0f MiB)", rss, last.CRs, estRSS, scaleIdleObjects, d.BaseRSSMiB), "NOT MEASURED: " + why},
		{cpuName, fmt.Sprintf("%.1f%% at %d; about %.1f%% at %d by a straight line (%.2f%% at --resync 10m)", cpu, last.CRs, estCPU, scaleIdleObjects, estCPU*resyncSeconds(d.Resync)/600), "NOT MEASURED: " + why},
	}
}

// sizing derives, from the curve and the shard run, what 100,000 objects would need.
func (d *scaleData) sizing() []string {
	var out []string
	if n := len(d.Idle); n > 0 {
		last := d.Idle[n-1]
		rss := max(last.SteadyRSS, last.RestartRSS)
		kib := (rss - d.BaseRSSMiB) * 1024 / float64(last.CRs)
		shards := 1
		if kib > 0 {
			per := int((scaleIdleRSSTargetMiB - d.BaseRSSMiB) * 1024 / kib)
			shards = (sizingObjects + per - 1) / max(per, 1)
			out = append(out, fmt.Sprintf("Operator memory: %.0f MiB empty plus about %.0f KiB per object (%d objects: %.0f MiB); one operator stays under 1 GiB up to about %d objects, so %d objects need at least %d shards by memory alone.",
				d.BaseRSSMiB, kib, last.CRs, rss, per, sizingObjects, shards))
		}
		if last.RestartSeconds > 0 {
			perShard := sizingObjects / shards
			out = append(out, fmt.Sprintf("Restart: a new operator process settled over %d objects in %.1f s (%.2f ms per object, no up); at %d objects per shard that is about %.0f s, during which the shard's objects are not reconciled.",
				last.CRs, last.RestartSeconds, 1000*last.RestartSeconds/float64(last.CRs), perShard, last.RestartSeconds/float64(last.CRs)*float64(perShard)))
		}
	}
	if n := len(d.Bursts); n > 0 {
		last := d.Bursts[n-1]
		hours := last.PerObject * sizingObjects / 3600
		out = append(out, fmt.Sprintf("Ups: %.3f s per object on %d cores with the cluster on the same machine (the burst of %d); a change that touches every one of %d objects (a new operator version that changes the program, say) takes about %.1f hours on these %d cores, and shards divide it by the cores they add, as long as PostgreSQL keeps up.",
			last.PerObject, d.Machine.CPUs, last.CRs, sizingObjects, hours, d.Machine.CPUs))
	}
	if sh := d.Shards; sh != nil && sh.Objects > 0 {
		ups := float64(sh.Objects*2 - sh.DoneBeforeKill) // the create, the change
		pgPerUp := sh.PGCPUSeconds / max(ups, 1)
		out = append(out, fmt.Sprintf("PostgreSQL: %.1f KiB per stack after a create and a change (two updates); %d stacks need about %.1f GiB, and more as each stack's history grows to its --keep-history (10) updates. It spent %.3f CPU s per up (%.0f ups, %.0f CPU s), so 10 ups per second need about %.2f of a core. Each shard held at most %.1f connections (%d for %d shards), so max_connections of 100 fits about %d shards.",
			d.PGKiBPerStack, sizingObjects, d.PGKiBPerStack*sizingObjects/(1<<20), pgPerUp, ups, sh.PGCPUSeconds, pgPerUp*10,
			float64(sh.PGConnections)/float64(sh.Shards), sh.PGConnections, sh.Shards, 100*sh.Shards/max(sh.PGConnections, 1)))
	}
	return out
}

// resyncSeconds parses a --resync as the results give it ("10s"); 600 (the default) when it
// does not parse.
func resyncSeconds(s string) float64 {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 600
	}
	return d.Seconds()
}

func metOrNot(ok bool) string {
	if ok {
		return "MET"
	}
	return "NOT MET"
}

func joinAny[T any](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

// writeScaleDoc writes r's scale section into the Markdown file at path (between scaleBegin
// and scaleEnd; appended when the file has none) and its plots beside it.
func writeScaleDoc(path string, r *Results) error {
	section, err := r.scaleSection()
	if err != nil {
		return err
	}
	if _, err := writeScalePlots(r, filepath.Join(filepath.Dir(path), plotsDir)); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(spliceSection(string(b), scaleBegin, scaleEnd, section)), 0o644)
}

// spliceSection puts section between the markers begin and end of doc, replacing what was
// there, or appends the marked section when doc has none.
func spliceSection(doc, begin, end, section string) string {
	block := begin + "\n" + strings.TrimRight(section, "\n") + "\n" + end + "\n"
	if i, j := strings.Index(doc, begin), strings.Index(doc, end); i >= 0 && j > i {
		rest := strings.TrimPrefix(doc[j+len(end):], "\n")
		return doc[:i] + block + rest
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + block
}

// scalePlotsFor lists the scale section's plots r has data for.
func scalePlotsFor(r *Results) []plotRef {
	var refs []plotRef
	if r.Scale != nil && len(r.Scale.Bursts) > 1 {
		refs = append(refs, plotRef{"scale-burst.svg", "Cost curve: seconds per object to Ready, by burst size"})
	}
	if r.Scale != nil && len(r.Scale.Idle) > 0 {
		refs = append(refs,
			plotRef{"scale-idle-rss.svg", "Cost curve: idle operator's peak memory, by objects"},
			plotRef{"scale-idle-cpu.svg", "Cost curve: idle operator's CPU per resync, by objects"})
	}
	return refs
}

// writeScalePlots writes scalePlotsFor(r) as SVG files into dir.
func writeScalePlots(r *Results, dir string) ([]plotRef, error) {
	refs := scalePlotsFor(r)
	if len(refs) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d := r.scaleData()
	for _, ref := range refs {
		p := plot.New()
		p.Title.Text = ref.Title
		p.Y.Min = 0
		var series []struct {
			label string
			pts   plotter.XYs
		}
		add := func(label string, pts plotter.XYs) {
			series = append(series, struct {
				label string
				pts   plotter.XYs
			}{label, pts})
		}
		switch ref.File {
		case "scale-burst.svg":
			p.X.Label.Text, p.Y.Label.Text = "new objects at once", "seconds per object to Ready"
			var pts plotter.XYs
			for _, b := range d.Bursts {
				pts = append(pts, plotter.XY{X: float64(b.CRs), Y: b.PerObject})
			}
			add(fmt.Sprintf("engine host, --workers %d", d.Workers), pts)
		case "scale-idle-rss.svg", "scale-idle-cpu.svg":
			p.X.Label.Text = "idle objects"
			steady, restart := plotter.XYs{{X: 0, Y: d.BaseRSSMiB}}, plotter.XYs{}
			if ref.File == "scale-idle-cpu.svg" {
				p.Y.Label.Text = "CPU seconds per resync"
				steady = plotter.XYs{}
			} else {
				p.Y.Label.Text = "peak RSS, MiB"
			}
			for _, row := range d.Idle {
				x := float64(row.CRs)
				if ref.File == "scale-idle-cpu.svg" {
					steady = append(steady, plotter.XY{X: x, Y: row.SteadyCPUPerResync})
					restart = append(restart, plotter.XY{X: x, Y: row.RestartCPUPerResync})
				} else {
					steady = append(steady, plotter.XY{X: x, Y: row.SteadyRSS})
					restart = append(restart, plotter.XY{X: x, Y: row.RestartRSS})
				}
			}
			add("steady", steady)
			add("after a restart", restart)
		}
		for i, s := range series {
			line, points, err := plotter.NewLinePoints(s.pts)
			if err != nil {
				return nil, fmt.Errorf("plot %s: %w", ref.File, err)
			}
			line.Color, points.Color = palette[i%len(palette)], palette[i%len(palette)]
			p.Add(line, points)
			p.Legend.Add(s.label, line, points)
		}
		p.Legend.Top, p.Legend.Left = true, true
		if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, ref.File)); err != nil {
			return nil, fmt.Errorf("write plot %s: %w", ref.File, err)
		}
	}
	return refs, nil
}
