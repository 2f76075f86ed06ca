package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

func controllersScenario(t *testing.T) *scenario.Scenario {
	t.Helper()
	s, err := scenario.Load("w.yaml", []byte(`
apiVersion: sim.gpu.scheduling/v1alpha1
kind: Scenario
metadata: {name: w}
spec:
  nodePools: [{name: a, count: 2, topology: dgx-a100}]
  workload:
    claimTemplates: [{name: one, claim: {count: 1}}]
    controllers: [{kind: Job, name: j, replicas: 4, claimTemplate: one, duration: 5s}]
  baseline: {premadeClaims: true}
  expectations: {minThroughputVsPremade: 0.9}
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func controllerRun(mode string, fromMade, fromCreate float64, claimsLeft, podsLeft int) *runner.RunResult {
	return &runner.RunResult{Mode: mode, Metrics: metrics.Result{Pods: 4, Bound: 4, Throughput: fromCreate},
		ThroughputFromMade: fromMade, ClaimsLeft: &claimsLeft, PodsLeft: &podsLeft, ClaimCreates: 4, ClaimCreatesPerPod: 1}
}

func check(t *testing.T, r *Report, prefix string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", prefix, r.Checks)
	return Check{}
}

// A workload of controllers is judged on what it leaves behind, in the gpu-scheduler run and in
// the templated bare pods run, and on the throughput of the bare pods naming the templates
// against the same bare pods naming pre-made claims, from the first pod made. The Jobs and
// Deployments' ratio to the pre-made run is shown beside it and not judged.
func TestControllersChecks(t *testing.T) {
	s := controllersScenario(t)
	pre := controllerRun(runner.ModePremade, 40, 40, 0, 0)
	pre.PremadeClaims, pre.ClaimCreatesPerPod = 4, 0
	bare := controllerRun(runner.ModeTemplatedBare, 38, 36, 0, 0)
	// The controllers' run is well below 0.9x of the pre-made one: shown, not judged.
	jobs := controllerRun(runner.ModeGPU, 28, 20, 0, 0)

	good := Build(s, "w.yaml", []*runner.RunResult{jobs, pre, bare}, time.Unix(0, 0), time.Minute)
	if !good.Passed() {
		t.Errorf("a clean run with the bare pods at 0.95x failed: %+v", good.Checks)
	}
	if c := check(t, good, "throughput with claim templates"); !c.Pass || c.Got != "0.95x" {
		t.Errorf("throughput check %+v, want a pass at 0.95x (templated bare pods / pre-made)", c)
	}
	if got := good.Ratios["controllersThroughputVsPremade"]; got != 0.7 {
		t.Errorf("controllers / pre-made ratio %g, want 0.7", got)
	}
	var b bytes.Buffer
	good.Table(&b)
	for _, want := range []string{
		"gpu-scheduler/templates, bare pods",
		"throughput with claim templates / with pre-made claims, the same bare pods: 0.95x from the first pod made, 0.90x from the first pod created",
		"throughput of the Jobs and Deployments through templates / bare pods with pre-made claims (templates and kube-controller-manager's work; not judged): 0.70x from the first pod made, 0.50x from the first controller created",
		"throughput of the Jobs and Deployments / the same pods bare, both through templates (kube-controller-manager's work alone; not judged): 0.74x from the first pod made",
		"1.00 (from the templates)",
		"0.00 (+ 4 made before the clock, not counted)",
		"GpuClaims / pods left after the workload was deleted",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
	html := filepath.Join(t.TempDir(), "report.html")
	if err := good.WriteHTML(html); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<th>gpu-scheduler/templates, bare pods</th>", "the same bare pods: 0.95x", "not judged): 0.70x"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}

	leaky := Build(s, "w.yaml", []*runner.RunResult{controllerRun(runner.ModeGPU, 38, 30, 2, 1), pre, bare}, time.Unix(0, 0), time.Minute)
	if leaky.Passed() {
		t.Errorf("a run that left 2 claims and 1 pod passed")
	}
	if c := check(t, leaky, "GpuClaims left"); c.Pass || c.Got != "2" {
		t.Errorf("claims check %+v, want a failure with 2", c)
	}
	if c := check(t, leaky, "pods left"); c.Pass || c.Got != "1" {
		t.Errorf("pods check %+v, want a failure with 1", c)
	}

	leakyBare := controllerRun(runner.ModeTemplatedBare, 38, 36, 3, 0)
	leakyBare.LeasesLeft = 2
	lb := Build(s, "w.yaml", []*runner.RunResult{jobs, pre, leakyBare}, time.Unix(0, 0), time.Minute)
	if c := check(t, lb, "gpu-scheduler/templates, bare pods: GpuClaims left"); c.Pass || c.Got != "3" {
		t.Errorf("templated bare pods claims check %+v, want a failure with 3", c)
	}
	if c := check(t, lb, "gpu-scheduler/templates, bare pods: GPU leases left"); c.Pass || c.Got != "2" {
		t.Errorf("templated bare pods leases check %+v, want a failure with 2", c)
	}
	if c := check(t, lb, "gpu-scheduler/templates, bare pods: pods left"); !c.Pass {
		t.Errorf("templated bare pods pods check %+v, want a pass with 0", c)
	}

	slowBare := controllerRun(runner.ModeTemplatedBare, 30, 30, 0, 0)
	fastJobs := controllerRun(runner.ModeGPU, 40, 40, 0, 0)
	slow := Build(s, "w.yaml", []*runner.RunResult{fastJobs, pre, slowBare}, time.Unix(0, 0), time.Minute)
	if c := check(t, slow, "throughput with claim templates"); c.Pass || c.Got != "0.75x" {
		t.Errorf("throughput check %+v, want a failure at 0.75x even with the Jobs at 1.00x", c)
	}
	for name, runs := range map[string][]*runner.RunResult{
		"no bare pods runs":      {jobs},
		"no templated bare pods": {jobs, pre},
		"no pre-made bare pods":  {jobs, bare},
	} {
		r := Build(s, "w.yaml", runs, time.Unix(0, 0), time.Minute)
		if c := check(t, r, "throughput with claim templates"); c.Pass || !strings.HasPrefix(c.Got, "no runs of bare pods") {
			t.Errorf("%s: throughput check %+v, want a failure naming the missing runs", name, c)
		}
	}
}

// The ceiling of the templated / pre-made ratio comes from the pre-made run's own CPU per bound
// pod and the CPU one GpuClaim create cost when its claims were made before the clock.
func TestCreateCeiling(t *testing.T) {
	s := controllersScenario(t)
	pre := controllerRun(runner.ModePremade, 40, 40, 0, 0)
	pre.PremadeClaims = 4
	pre.WorkloadCPUTotal = 4 * 0.012 // 12 ms per bound pod
	pre.ClaimCreateCPU = map[string]float64{"kube-apiserver": 0.0015, "etcd": 0.0002, "gpu-sim": 0.0003}
	bare := controllerRun(runner.ModeTemplatedBare, 34, 34, 0, 0)
	r := Build(s, "w.yaml", []*runner.RunResult{controllerRun(runner.ModeGPU, 30, 30, 0, 0), pre, bare}, time.Unix(0, 0), time.Minute)
	got, ok := r.Ratios["throughputVsPremadeCeiling"]
	if want := 12.0 / 14.0; !ok || got < want-1e-9 || got > want+1e-9 {
		t.Fatalf("ceiling %g (present %v), want %g: 12 ms per pod against 12 + 2 ms", got, ok, want)
	}
	var b bytes.Buffer
	r.Table(&b)
	for _, want := range []string{
		"ceiling of that ratio while the runs are CPU-bound: 0.86x, from the pre-made run's 12.0 ms of CPU per bound pod and 2.00 ms for the GpuClaim create a templated pod adds (kube-apiserver 1.50, etcd 0.20; measured on the 4 claims made before its clock; not judged)",
		"2.00 ms / 1.50 ms",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
	// Without the measurement (an older report, or a run that made no claims) there is no ceiling.
	pre.ClaimCreateCPU = nil
	if r := Build(s, "w.yaml", []*runner.RunResult{pre, bare}, time.Unix(0, 0), time.Minute); r.Ratios["throughputVsPremadeCeiling"] != 0 {
		t.Errorf("a ceiling without a measured create: %v", r.Ratios)
	}
}
