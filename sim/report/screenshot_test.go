package report

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// fillRun makes a fill run whose allocation climbs with the arrivals (slope) until it levels
// off at plateau, and whose utilization follows the same shape over 60 seconds.
func fillRun(mode string, slope, plateau float64) *runner.RunResult {
	x := &runner.RunResult{Mode: mode, Fill: &metrics.Fill{TotalGPUs: 96, FirstUnplaced: 40, FirstUnplacedGPUs: 8}}
	for i := 1; i <= 100; i++ {
		req := float64(i) * 0.02
		x.Fill.Curve = append(x.Fill.Curve, metrics.FillPoint{Arrived: i, Requested: req, Allocation: min(slope*req, plateau)})
		x.Metrics.Samples = append(x.Metrics.Samples, metrics.Sample{At: time.Duration(i) * 600 * time.Millisecond, Utilization: min(slope*req, plateau)})
	}
	x.Fill.Allocation, x.Fill.AllocatedGPU = plateau, int(plateau*96)
	x.Fill.AllocationAtFirstUnplaced = min(0.8, plateau)
	x.Phases = []runner.Phase{{Name: "starting the control plane", Duration: 4 * time.Second}, {Name: "workload", Duration: time.Minute}}
	x.Unschedulable = map[string]int{"0/12 nodes are available: 12 Insufficient GPUs.": 60}
	return x
}

// screenshot renders the HTML file with headless Chromium (Debian package chromium) and
// returns the picture.
func screenshot(t *testing.T, html string) (image.Image, []byte) {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("headless Chromium renders the report in this test: install it (apt-get install -y chromium; .ci/run does): %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+out, "--window-size=1280,2000", "file://"+html)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	img, err := png.Decode(strings.NewReader(string(data)))
	if err != nil {
		t.Fatalf("decoding the screenshot: %v", err)
	}
	return img, data
}

// pixels counts the pixels within 40 per channel of the colour #rrggbb, and the non-white ones.
func pixels(img image.Image, hex string) (near, ink int) {
	var want [3]int
	for i := range want {
		v := 0
		for _, c := range hex[1+2*i : 3+2*i] {
			v = v*16 + strings.IndexRune("0123456789abcdef", c)
		}
		want[i] = v
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			got := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			if got != [3]int{255, 255, 255} {
				ink++
			}
			close := true
			for i := range got {
				if d := got[i] - want[i]; d > 40 || d < -40 {
					close = false
				}
			}
			if close {
				near++
			}
		}
	}
	return near, ink
}

// TestHTMLRendersOffline: the report of a fill run with both schedulers, opened by headless
// Chromium with no network, shows a page (not blank) with the allocation and utilization
// curves of both schedulers in their colours; with only the gpu-scheduler run, the stock
// colour is gone, so the count tells the curves apart.
func TestHTMLRendersOffline(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "render"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 12, Topology: "dgx-a100", GPUsPerNode: 8}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	dir := t.TempDir()
	render := func(name string, runs ...*runner.RunResult) (blue, red, ink int) {
		r := Build(s, "render.yaml", runs, time.Unix(0, 0), time.Minute)
		html := filepath.Join(dir, name+".html")
		if err := r.WriteHTML(html); err != nil {
			t.Fatal(err)
		}
		page, err := os.ReadFile(html)
		if err != nil {
			t.Fatal(err)
		}
		// (The SVG namespace is a name, not a fetch.)
		for _, remote := range []string{`src="http`, `href="http`, `src="//`, `href="//`, "<script", "@import", "url(", "<link"} {
			if strings.Contains(string(page), remote) {
				t.Errorf("%s.html contains %q: the report must open with no network", name, remote)
			}
		}
		img, _ := screenshot(t, html)
		blue, ink = pixels(img, colours[runner.ModeGPU])
		red, _ = pixels(img, colours[runner.ModeStock])
		return blue, red, ink
	}
	blue, red, ink := render("both", fillRun(runner.ModeGPU, 1, 0.95), fillRun(runner.ModeStock, 0.8, 0.7))
	t.Logf("both runs: %d gpu-scheduler pixels, %d stock pixels, %d non-white", blue, red, ink)
	// A 2.5-pixel curve across the 660-pixel-wide chart alone is well over 1,000 pixels.
	if ink < 20000 {
		t.Errorf("the page is nearly blank: %d non-white pixels", ink)
	}
	if blue < 1000 || red < 1000 {
		t.Errorf("both schedulers' curves should show: %d pixels in the gpu-scheduler colour, %d in the stock colour (want >= 1000 each)", blue, red)
	}
	blue1, red1, _ := render("ours", fillRun(runner.ModeGPU, 1, 0.95))
	t.Logf("gpu-scheduler only: %d gpu-scheduler pixels, %d stock pixels", blue1, red1)
	if blue1 < 1000 || red1 > red/10 {
		t.Errorf("with only the gpu-scheduler run: %d gpu-scheduler pixels (want >= 1000), %d stock pixels (want at most %d)", blue1, red1, red/10)
	}
}
