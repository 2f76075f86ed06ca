package report

import (
	"fmt"
	"hash/fnv"
	"html/template"
	"math"
	"os"
	"strings"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
)

// mapNodes bounds the GPU map: beyond this many nodes per run the map shows the first ones.
const mapNodes = 120

var colours = map[string]string{runner.ModeGPU: "#1f77b4", runner.ModeStock: "#d62728", runner.ModeDRA: "#2ca02c", runner.ModeStockAffinity: "#ff7f0e", runner.ModePremade: "#9467bd", runner.ModeTemplatedBare: "#8c564b"}

// utilizationSVG draws utilization (solid) and fragmentation (dashed) of every run over time.
func utilizationSVG(runs []*runner.RunResult) template.HTML {
	const w, h, left, bottom = 720.0, 260.0, 50.0, 30.0
	var end time.Duration
	for _, x := range runs {
		if n := len(x.Metrics.Samples); n > 0 {
			end = max(end, x.Metrics.Samples[n-1].At)
		}
	}
	if end == 0 {
		end = time.Second
	}
	px := func(t time.Duration) float64 { return left + (w-left-10)*float64(t)/float64(end) }
	py := func(v float64) float64 { return (h - bottom) - (h-bottom-10)*v }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="11" font-family="sans-serif">`, w, h)
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%.0f%%</text>`,
			left, w-10, py(v), py(v), left-4, py(v)+4, v*100)
	}
	for i := 0; i <= 5; i++ {
		t := end * time.Duration(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, px(t), h-10, t.Round(time.Second))
	}
	for _, x := range runs {
		for _, frag := range []bool{false, true} {
			var pts []string
			for _, s := range x.Metrics.Samples {
				v := s.Utilization
				if frag {
					v = s.Fragmentation
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.At), py(v)))
			}
			dash := ""
			if frag {
				dash = ` stroke-dasharray="4 3" stroke-opacity="0.6"`
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`, colours[x.Mode], dash, strings.Join(pts, " "))
		}
	}
	y := 14.0
	for _, x := range runs {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s: utilization (solid), fragmentation (dashed)</text>`, left+10, y, colours[x.Mode], runner.ModeTitle(x.Mode))
		y += 14
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// allocationSVG draws a fill run's GPU allocation rate (y) against the GPUs the arrivals asked
// for (x), both over the cluster's GPUs, for every run; the grey diagonal is perfect packing
// and a ring marks the first pod that could not be placed.
func allocationSVG(runs []*runner.RunResult) template.HTML {
	const w, h, left, bottom, top = 720.0, 300.0, 50.0, 30.0, 40.0
	// The x axis ends a little after the last arrival that raised any run's allocation: later
	// arrivals only found the cluster full.
	xmax := 1.0
	for _, x := range runs {
		if x.Fill == nil {
			continue
		}
		last := 0.0
		for i, p := range x.Fill.Curve {
			if i == 0 || p.Allocation > x.Fill.Curve[i-1].Allocation {
				last = p.Requested
			}
		}
		if n := len(x.Fill.Curve); n > 0 {
			xmax = max(xmax, min(last*1.25, x.Fill.Curve[n-1].Requested))
		}
	}
	xmax = math.Ceil(xmax*4) / 4
	px := func(v float64) float64 { return left + (w-left-10)*min(v, xmax)/xmax }
	py := func(v float64) float64 { return (h - bottom) - (h-bottom-top)*v }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="11" font-family="sans-serif">`, w, h)
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%.0f%%</text>`,
			left, w-10, py(v), py(v), left-4, py(v)+4, v*100)
	}
	for i := 0; i <= 5; i++ {
		v, anchor := xmax*float64(i)/5, "middle"
		if i == 5 {
			anchor = "end" // inside the picture
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="%s">%.0f%%</text>`, px(v), h-10, anchor, v*100)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end" fill="#555">GPUs asked by the arrivals / GPUs in the cluster</text>`, w-10, h-bottom-4)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#aaa" stroke-dasharray="3 3"/>`, px(0), py(0), px(1), py(1))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#aaa" stroke-dasharray="3 3"/>`, px(1), py(1), px(xmax), py(1))
	y := 14.0
	for _, x := range runs {
		if x.Fill == nil {
			continue
		}
		pts := []string{fmt.Sprintf("%.1f,%.1f", px(0), py(0))}
		for _, p := range x.Fill.Curve {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.Requested), py(p.Allocation)))
			if p.Requested > xmax {
				break
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2.5" points="%s"/>`, colours[x.Mode], strings.Join(pts, " "))
		if i := x.Fill.FirstUnplaced; i > 0 && i <= len(x.Fill.Curve) {
			p := x.Fill.Curve[i-1]
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="none" stroke="%s" stroke-width="2"/>`, px(p.Requested), py(x.Fill.AllocationAtFirstUnplaced), colours[x.Mode])
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s: %.1f%% allocated at the end; ring: first pod not placed</text>`, left+10, y, colours[x.Mode], runner.ModeTitle(x.Mode), x.Fill.Allocation*100)
		y += 14
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// islandHue gives each island of a node its own hue.
func islandHue(islands []string, isl string) int {
	seen := map[string]int{}
	for _, i := range islands {
		if _, ok := seen[i]; !ok {
			seen[i] = len(seen)
		}
	}
	return (seen[isl] * 67) % 360
}

func holderLightness(holder string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(holder))
	return 30 + int(h.Sum32()%25)
}

// gpuMapSVG draws each node as a row of GPU cells: hue = island, dark = held (shade by pod),
// pale = free, red border = unhealthy.
func gpuMapSVG(m []metrics.NodeMap) template.HTML {
	n := min(len(m), mapNodes)
	const cell, gap, label = 11.0, 2.0, 110.0
	cols := 2
	perCol := (n + cols - 1) / cols
	maxGPUs := 0
	for _, nm := range m[:n] {
		maxGPUs = max(maxGPUs, len(nm.Islands))
	}
	colW := label + float64(maxGPUs)*(cell+gap) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="9" font-family="monospace">`,
		colW*float64(cols), float64(perCol)*(cell+gap)+4)
	for i, nm := range m[:n] {
		x0 := float64(i/max(perCol, 1)) * colW
		y := float64(i%max(perCol, 1)) * (cell + gap)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f">%s</text>`, x0, y+cell-2, template.HTMLEscapeString(nm.Name))
		for g, isl := range nm.Islands {
			hue := islandHue(nm.Islands, isl)
			fill := fmt.Sprintf("hsl(%d,45%%,88%%)", hue)
			title := fmt.Sprintf("%s GPU %d, island %s, free", nm.Name, g, isl)
			if h := nm.Holders[g]; h != "" {
				fill = fmt.Sprintf("hsl(%d,70%%,%d%%)", hue, holderLightness(h))
				title = fmt.Sprintf("%s GPU %d, island %s, held by %s", nm.Name, g, isl, h)
			}
			stroke := "#fff"
			if g < len(nm.Unhealthy) && nm.Unhealthy[g] {
				stroke = "#e00"
				title += ", Unhealthy"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.0f" fill="%s" stroke="%s"><title>%s</title></rect>`,
				x0+label+float64(g)*(cell+gap), y, cell, cell, fill, stroke, template.HTMLEscapeString(title))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"shift":  func(v int64) int64 { return v >> 20 },
	"title":  runner.ModeTitle,
	"pct100": func(v float64) float64 { return 100 * v },
	"unscheduled": func(r *Report, mode string) string {
		if x := r.Run(mode); x != nil {
			return "unscheduled " + unscheduledLine(x)
		}
		return ""
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>gpu-sim {{.R.Scenario}}</title>
<style>
body{font-family:sans-serif;margin:2em;max-width:1500px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
th{background:#f3f3f3}.pass{color:#080;font-weight:bold}.fail{color:#c00;font-weight:bold}
.side{display:flex;gap:2em;flex-wrap:wrap}.note{color:#555;font-size:13px;max-width:900px}
</style></head><body>
<h1>Scenario {{.R.Scenario}}</h1>
<p>{{.R.Description}}</p>
<p class="note">{{.R.File}}: {{.R.Nodes}} nodes, {{.R.GPUs}} GPUs, {{.R.Pods}} pods asking for {{.R.Workload.GPUs}} GPUs, seed {{.R.Seed}}. Started {{.R.Started.Format "2006-01-02 15:04:05"}}, wall time {{.Wall}}.</p>
{{if .R.Checks}}<h2>Expectations (gpu-scheduler run; stock + DRA and the templated bare pods where named)</h2><table><tr><th>check</th><th>want</th><th>got</th><th></th></tr>
{{range .R.Checks}}<tr><td>{{.Name}}</td><td>{{.Want}}</td><td>{{.Got}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}PASS{{else}}FAIL{{end}}</td></tr>{{end}}</table>{{end}}
<h2>gpu-scheduler vs the stock kube-scheduler</h2>
<table><tr><th></th>{{range .R.Runs}}<th>{{title .Mode}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
{{range .Ratios}}<p>{{.}}</p>{{end}}
{{range .R.Notes}}<p class="note">{{.}}</p>{{end}}
{{range .R.Runs}}{{$m := .Mode}}{{range .Notes}}<p class="note">{{title $m}}: {{.}}</p>{{end}}{{end}}
{{range .R.Runs}}{{$m := .Mode}}{{with .Unschedulable}}<p class="note">{{title $m}}: {{unscheduled $.R $m}}</p>{{end}}{{end}}
{{if .Alloc}}<h2>GPU allocation rate as the arrivals grow (fill)</h2>
{{.Alloc}}
<p class="note">Pods arrive in trace order and never leave. A point is the cluster after an arrival: the share of its GPUs allocated to the pods that arrived so far (y) against the share their requests add up to (x). The dashed line is perfect packing.</p>{{end}}
<h2>GPU utilization and fragmentation over time</h2>
{{.Util}}
<h2>GPU map at peak utilization</h2>
<p class="note">One row per node, one cell per GPU. Hue: NVLink island within the node; dark: held (shade tells pods apart; hover for the pod), pale: free; red border: Unhealthy. {{if .Truncated}}The first {{.MapNodes}} nodes are shown.{{end}}</p>
<div class="side">{{range .Maps}}<div><h3>{{title .Mode}} (at {{.At}})</h3>{{.SVG}}</div>{{end}}</div>
<h2>API writes during the workload</h2>
<div class="side">{{range .R.Runs}}<div><h3>{{title .Mode}}</h3><table><tr><th>request</th><th>count</th><th>scheduling</th></tr>
{{range .Writes}}<tr><td>{{.Key}}</td><td>{{printf "%.0f" .Count}}</td><td>{{if .Scheduling}}yes{{end}}</td></tr>{{end}}</table></div>{{end}}</div>
<p class="note">Scheduling writes: pod bindings, GPU lease creates (conflicts included), GpuClaim writes and pod patches. Lease deletes (releases), the workload's own creates, kwok's status updates and node heartbeats, events, the agent's GpuNodeStatus writes and its liveness lease writes (the rows marked "(agent liveness)": counted by the agents, taken out of the lease rows) are listed but not counted as scheduling writes.</p>
<h2>Peak memory by process</h2>
<div class="side">{{range .R.Runs}}<div><h3>{{title .Mode}}</h3><table>{{range $k, $v := .PeakRSSByProcess}}<tr><td>{{$k}}</td><td>{{printf "%d MiB" (shift $v)}}</td></tr>{{end}}</table></div>{{end}}</div>
<h2>CPU time during the workload by process</h2>
<div class="side">{{range .R.Runs}}<div><h3>{{title .Mode}}</h3><table>{{range $k, $v := .WorkloadCPUSeconds}}<tr><td>{{$k}}</td><td>{{printf "%.1f s" $v}}</td></tr>{{end}}<tr><th>all</th><th>{{printf "%.1f s" .WorkloadCPUTotal}}</th></tr></table></div>{{end}}</div>
<p class="note">Everything runs on one machine, so a process's CPU time is taken from the others: on a small machine the kube-apiserver's CPU per bound pod bounds the throughput.</p>
{{if .Causes}}<h2>CPU per bound pod by cause (profiled)</h2>
<div class="side">{{range .R.Runs}}{{if .CPUCauses}}<div><h3>{{.Mode}}</h3><table><tr><th>process / cause</th><th>ms per pod</th><th>share</th></tr>{{range .CPUCauses}}<tr><th>{{.Process}}</th><th>{{printf "%.1f" .MsPerPod}}</th><th></th></tr>{{range .Shares}}<tr><td>{{.Cause}}</td><td>{{printf "%.1f" .MsPerPod}}</td><td>{{printf "%.0f %%" (pct100 .Fraction)}}</td></tr>{{end}}{{end}}</table></div>{{end}}{{end}}</div>
<p class="note">Each process's CPU time during the workload, from /proc, split in the proportions of its CPU profile's samples (gpu-sim run --profile): a sample counts for the first cause whose functions are on its stack (sim/profile).</p>{{end}}
<h2>Where the wall time went</h2>
<div class="side">{{range .R.Runs}}<div><h3>{{title .Mode}}</h3><table>{{range .Phases}}<tr><td>{{.Name}}</td><td>{{printf "%.1f s" .Duration.Seconds}}</td></tr>{{end}}</table></div>{{end}}</div>
</body></html>
`))

// WriteHTML writes the self-contained HTML report.
func (r *Report) WriteHTML(path string) error {
	type mapView struct {
		Mode string
		At   time.Duration
		SVG  template.HTML
	}
	data := struct {
		R         *Report
		Rows      [][]string
		Util      template.HTML
		Alloc     template.HTML
		Maps      []mapView
		Wall      time.Duration
		Truncated bool
		MapNodes  int
		Causes    bool
		Ratios    []string
	}{R: r, Rows: r.rows(), Ratios: r.ratioLines(), Util: utilizationSVG(r.Runs), Wall: r.Wall.Round(time.Second), MapNodes: mapNodes}
	if r.hasFill() {
		data.Alloc = allocationSVG(r.Runs)
	}
	for _, x := range r.Runs {
		data.Causes = data.Causes || len(x.CPUCauses) > 0
	}
	for _, x := range r.Runs {
		data.Maps = append(data.Maps, mapView{Mode: x.Mode, At: x.Metrics.PeakAt.Round(time.Second), SVG: gpuMapSVG(x.Metrics.Map)})
		if len(x.Metrics.Map) > mapNodes {
			data.Truncated = true
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating report %s: %w", path, err)
	}
	defer f.Close()
	if err := page.Execute(f, data); err != nil {
		return fmt.Errorf("rendering report %s: %w", path, err)
	}
	return nil
}
