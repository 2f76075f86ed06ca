package report

import (
	"bytes"
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

// A workload of controllers is judged on what it leaves behind and on its throughput against
// the pre-made claims run, from the first pod made; the table shows both ratios.
func TestControllersChecks(t *testing.T) {
	s := controllersScenario(t)
	pre := controllerRun(runner.ModePremade, 40, 40, 0, 0)
	pre.PremadeClaims, pre.ClaimCreatesPerPod = 4, 0

	good := Build(s, "w.yaml", []*runner.RunResult{controllerRun(runner.ModeGPU, 38, 30, 0, 0), pre}, time.Unix(0, 0), time.Minute)
	if !good.Passed() {
		t.Errorf("a clean run at 0.95x failed: %+v", good.Checks)
	}
	var b bytes.Buffer
	good.Table(&b)
	for _, want := range []string{
		"throughput with claim templates / with pre-made claims: 0.95x from the first pod made, 0.75x from the first controller created",
		"1.00 (from the templates)",
		"0.00 (+ 4 made before the clock, not counted)",
		"GpuClaims / pods left after the workload was deleted",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}

	leaky := Build(s, "w.yaml", []*runner.RunResult{controllerRun(runner.ModeGPU, 38, 30, 2, 1), pre}, time.Unix(0, 0), time.Minute)
	if leaky.Passed() {
		t.Errorf("a run that left 2 claims and 1 pod passed")
	}
	if c := check(t, leaky, "GpuClaims left"); c.Pass || c.Got != "2" {
		t.Errorf("claims check %+v, want a failure with 2", c)
	}
	if c := check(t, leaky, "pods left"); c.Pass || c.Got != "1" {
		t.Errorf("pods check %+v, want a failure with 1", c)
	}

	slow := Build(s, "w.yaml", []*runner.RunResult{controllerRun(runner.ModeGPU, 30, 30, 0, 0), pre}, time.Unix(0, 0), time.Minute)
	if c := check(t, slow, "throughput with claim templates"); c.Pass || c.Got != "0.75x" {
		t.Errorf("throughput check %+v, want a failure at 0.75x", c)
	}
	alone := Build(s, "w.yaml", []*runner.RunResult{controllerRun(runner.ModeGPU, 38, 30, 0, 0)}, time.Unix(0, 0), time.Minute)
	if c := check(t, alone, "throughput with claim templates"); c.Pass {
		t.Errorf("throughput check passed without a pre-made run: %+v", c)
	}
}
