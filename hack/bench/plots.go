package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotRef is one plot of a run: its file (in the plots directory beside docs/benchmarks.md) and
// what it shows, for the doc's image link.
type plotRef struct {
	File, Title string
}

// plotsDir is where the plots go, relative to docs/benchmarks.md's directory.
const plotsDir = "benchmarks"

// plotsFor lists the plots r has data for, in the doc's order: burst time and CPU per up by
// worker count (figure 2, the engine host's bursts and the --engine-host none ones), the
// distributions of the latency figures (1, 4, 5, on each backend) against their floors, and the
// idle windows' CPU and memory (figure 3).
func plotsFor(r *Results) []plotRef {
	var refs []plotRef
	if len(burstSeries(r)) > 0 {
		refs = append(refs,
			plotRef{"burst-time.svg", "Figure 2: burst of new objects to Ready, by --workers"},
			plotRef{"burst-cpu.svg", "Figure 2: CPU of the operator's process tree per up, by --workers"})
	}
	if len(latencySeries(r)) > 0 {
		refs = append(refs, plotRef{"latency.svg", "Figures 1, 4 and 5: each sample, operator against its floor"})
	}
	if r.Idle != nil && len(idleWindows(r)) > 0 {
		refs = append(refs,
			plotRef{"idle-cpu.svg", fmt.Sprintf("Figure 3: %d idle objects, operator CPU per window of 3 resyncs", r.Idle.CRs)},
			plotRef{"idle-rss.svg", fmt.Sprintf("Figure 3: %d idle objects, peak memory per window of 3 resyncs", r.Idle.CRs)})
	}
	return refs
}

// writePlots writes plotsFor(r) as SVG files into dir (made if missing) and returns them.
// Errors: a plot that cannot be drawn or written.
func writePlots(r *Results, dir string) ([]plotRef, error) {
	refs := plotsFor(r)
	if len(refs) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, ref := range refs {
		var p *plot.Plot
		var err error
		switch ref.File {
		case "burst-time.svg":
			p, err = burstPlot(r, "seconds to Ready (all objects)", func(b BurstResult) float64 { return b.Seconds })
		case "burst-cpu.svg":
			p, err = burstPlot(r, "CPU seconds per up (operator's tree)", BurstResult.cpuPerUp)
		case "latency.svg":
			p, err = latencyPlot(r)
		case "idle-cpu.svg":
			p, err = idlePlot(r, "CPU, % of one core", func(w IdleWindow) float64 { return w.CPUPercent })
		case "idle-rss.svg":
			p, err = idlePlot(r, "peak RSS, MiB (operator and its children)", IdleWindow.rss)
		}
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", ref.File, err)
		}
		p.Title.Text = ref.Title
		width := 7 * vg.Inch
		if ref.File == "latency.svg" {
			width = 10 * vg.Inch // a box per figure, site and side
		}
		if err := p.Save(width, 4*vg.Inch, filepath.Join(dir, ref.File)); err != nil {
			return nil, fmt.Errorf("write plot %s: %w", ref.File, err)
		}
	}
	return refs, nil
}

// burstSeries groups the bursts that finished by how their ups ran: label -> results by workers.
func burstSeries(r *Results) map[string][]BurstResult {
	out := map[string][]BurstResult{}
	for _, b := range r.Bursts {
		if b.Error != "" || b.Seconds <= 0 {
			continue
		}
		label := "engine host"
		if !b.EngineHost {
			label = "--engine-host none (a pulumi up process each)"
		}
		out[label] = append(out[label], b)
	}
	return out
}

// palette colours the series of a plot, in order.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// burstPlot draws y of each burst against its worker count, one line per burstSeries label.
func burstPlot(r *Results, yLabel string, y func(BurstResult) float64) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "--workers"
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top = false // the lines start high on the left
	series := burstSeries(r)
	labels := make([]string, 0, len(series))
	for l := range series {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	var ticks []plot.Tick
	for i, label := range labels {
		bs := slices.Clone(series[label])
		slices.SortFunc(bs, func(a, b BurstResult) int { return a.Workers - b.Workers })
		pts := make(plotter.XYs, len(bs))
		for j, b := range bs {
			pts[j] = plotter.XY{X: float64(b.Workers), Y: y(b)}
			ticks = append(ticks, plot.Tick{Value: float64(b.Workers), Label: fmt.Sprint(b.Workers)})
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = palette[i%len(palette)], palette[i%len(palette)]
		p.Add(line, points)
		p.Legend.Add(label, line, points)
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p, nil
}

// latencySeries is each latency figure's samples, operator and floor, as the plot's categories.
func latencySeries(r *Results) []struct {
	Name   string
	Values []float64
} {
	type series = struct {
		Name   string
		Values []float64
	}
	var out []series
	add := func(site, name string, pr *PairResult) {
		if pr == nil || len(pr.Operator) == 0 {
			return
		}
		out = append(out, series{name + "\n" + site + "operator", pr.Operator})
		if len(pr.Floor) > 0 {
			out = append(out, series{name + "\n" + site + "floor", pr.Floor})
		}
	}
	add("", "1. new CR", r.Latency)
	add("", "4. drift", r.Drift)
	add("", "5. change", r.Change)
	if pg := r.Postgres; pg != nil {
		add("PostgreSQL ", "1. new CR", pg.Latency)
		add("PostgreSQL ", "5. change", pg.Change)
	}
	return out
}

// latencyPlot draws the samples of each latency figure as a box plot, operator and floor side
// by side.
func latencyPlot(r *Results) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = "seconds per sample"
	p.Y.Min = 0
	var names []string
	for i, s := range latencySeries(r) {
		box, err := plotter.NewBoxPlot(vg.Points(18), float64(i), plotter.Values(s.Values))
		if err != nil {
			return nil, err
		}
		box.FillColor = palette[i%2]
		p.Add(box)
		names = append(names, s.Name)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Font.Size = vg.Points(8)
	return p, nil
}

// idleWindows are figure 3's windows that were measured, its compared builds' included.
func idleWindows(r *Results) []IdleWindow {
	var out []IdleWindow
	for _, w := range append(slices.Clone(r.Idle.Windows), r.Idle.Compare...) {
		if w.Seconds > 0 {
			out = append(out, w)
		}
	}
	return out
}

// idlePlot draws y of each idle window as a bar.
func idlePlot(r *Results, yLabel string, y func(IdleWindow) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	ws := idleWindows(r)
	values := make(plotter.Values, len(ws))
	names := make([]string, len(ws))
	for i, w := range ws {
		values[i], names[i] = y(w), w.Label
	}
	bars, err := plotter.NewBarChart(values, vg.Points(40))
	if err != nil {
		return nil, err
	}
	bars.Color = palette[0]
	p.Add(bars)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(ws))-0.5
	return p, nil
}
