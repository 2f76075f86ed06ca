package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// TestTableFill: a fill run's table has the fill rows and the phases, and the pods never bound
// take one line per run however many distinct scheduler messages they got.
func TestTableFill(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "fill"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 12, Topology: "dgx-a100", GPUsPerNode: 8}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	ours, stock := fillRun(runner.ModeGPU, 1, 0.95), fillRun(runner.ModeStock, 0.8, 0.7)
	ours.Unschedulable = map[string]int{}
	for _, name := range []string{"p1", "p2", "p3"} {
		ours.Unschedulable["no node has 8 free GPUs for GpuClaim sim/"+name] = 1
	}
	ours.Unschedulable["no node has 4 free GPUs for GpuClaim sim/p9"] = 2
	var b bytes.Buffer
	Build(s, "fill.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute).Table(&b)
	out := b.String()
	for _, want := range []string{
		"fill: GPU allocation rate at the end",
		"95.0% (91 of 96 GPUs)",
		"arrival #40 (8 GPUs) at 80.0% allocated",
		"unscheduled (gpu-scheduler): 5 pods (2 kinds of message, all in report.json); most common (3 pods): no node has 8 free GPUs for GpuClaim sim/<claim>",
		"unscheduled (kube-scheduler): 60 pods: 0/12 nodes are available: 12 Insufficient GPUs.",
		"phases (gpu-scheduler): starting the control plane 4s, workload 1m0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "unscheduled ("); n != 2 {
		t.Errorf("%d unscheduled lines, want one per run:\n%s", n, out)
	}
}

// With the DRA baseline the table has three columns, the DRA ratio and the DRA run's notes.
func TestTableThreeWay(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "three"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 2, Topology: "dgx-h100", GPUsPerNode: 8}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	run := func(mode string, tput float64) *runner.RunResult {
		x := &runner.RunResult{Mode: mode}
		x.Metrics.Throughput, x.Metrics.Bound, x.Metrics.Pods = tput, 10, 10
		return x
	}
	withDRA := run(runner.ModeDRA, 5)
	withDRA.Notes = []string{"DRA cannot express: gangs (2 pods in 1 gangs)"}
	withDRA.DRAPodsWithoutIDs = 2
	var b bytes.Buffer
	Build(s, "three.yaml", []*runner.RunResult{run(runner.ModeGPU, 20), run(runner.ModeStock, 10), withDRA}, time.Unix(0, 0), time.Minute).Table(&b)
	out := b.String()
	for _, want := range []string{
		"throughput gpu-scheduler / stock: 2.00x",
		"throughput gpu-scheduler / stock + DRA: 4.00x",
		"note (kube-scheduler-dra): DRA cannot express: gangs",
		"note: The stock + DRA run:",
		"FAIL  stock + DRA: bound pods whose GPUs were read from their ResourceClaim: want all 10, got 8",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	for _, re := range []string{`gpu-scheduler +stock \+ nvidia\.com/gpu +stock \+ DRA\n`, `leases left after pods gone +0 +n/a \(no leases\) +n/a \(no leases\)\n`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the table lacks a line like %s:\n%s", re, out)
		}
	}
}
