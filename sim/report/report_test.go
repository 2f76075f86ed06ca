package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
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

// The floor under gpu-scheduler's CPU per pod is the stock run's plus g lease creates and one
// claim status write, at the prices measured in gpu-scheduler's run.
func TestContractFloor(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "floor"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 2, Topology: "dgx-h100", GPUsPerNode: 8}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	run := func(mode string, tput, cpu float64) *runner.RunResult {
		x := &runner.RunResult{Mode: mode, WorkloadCPUTotal: cpu}
		x.Metrics.Throughput, x.Metrics.Bound, x.Metrics.Pods = tput, 100, 100
		return x
	}
	ours, stock := run(runner.ModeGPU, 80, 1.8), run(runner.ModeStock, 100, 1.2) // 18 and 12 ms per pod
	ours.MeanGPUsPerPod = 2.5
	ours.ContractWriteCPU = &runner.ContractWriteCPU{Objects: 1000,
		LeaseCreate: map[string]float64{"kube-apiserver": 0.0008, "etcd": 0.0002}, // 1 ms
		ClaimStatus: map[string]float64{"kube-apiserver": 0.0012, "etcd": 0.0003}} // 1.5 ms
	r := Build(s, "floor.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute)
	// 12 + 2.5 x 1 + 1.5 = 16 ms: 1.33x stock's, a ceiling of 0.75x.
	for k, want := range map[string]float64{"cpuFloorVsStock": 16.0 / 12, "throughputCeilingVsStock": 12.0 / 16, "cpuVsStock": 1.5} {
		if got := r.Ratios[k]; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %g, want %g", k, got, want)
		}
	}
	var b bytes.Buffer
	r.Table(&b)
	want := "stock's 12.0 ms + 2.50 GPU lease creates x 1.00 ms + one GpuClaim status write 1.50 ms = 16.0 ms, 1.33x stock's (a throughput ceiling of 0.75x while both runs are CPU-bound); gpu-scheduler used 18.0 ms, 1.50x"
	if !strings.Contains(b.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, b.String())
	}
	// With the idle background measured in both runs, the floor stands on the work per pod:
	// 0.5 cores idle; stock ran 1 s, ours 1.25 s for 100 pods each.
	ours.BackgroundCPU, stock.BackgroundCPU = map[string]float64{"kube-apiserver": 0.4, "kwok": 0.1}, map[string]float64{"kube-apiserver": 0.4, "kwok": 0.1}
	stock.Workload, ours.Workload = time.Second, 1250*time.Millisecond
	r = Build(s, "floor.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute)
	// stock (1.2 - 0.5) / 100 = 7 ms; ours (1.8 - 0.625) / 100 = 11.75 ms; floor 7 + 2.5 + 1.5 = 11 ms.
	for k, want := range map[string]float64{"cpuFloorVsStock": 11.0 / 7, "throughputCeilingVsStock": 7.0 / 11, "cpuVsStock": 11.75 / 7} {
		if got := r.Ratios[k]; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("less the background: %s = %g, want %g", k, got, want)
		}
	}
	b.Reset()
	r.Table(&b)
	for _, want := range []string{"gpu-scheduler's CPU per bound pod less the idle background, measured in this run: stock's 7.0 ms", "11.8 ms (0.50)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
	ours.ContractWriteCPU = nil
	if r := Build(s, "floor.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute); r.Ratios["cpuFloorVsStock"] != 0 {
		t.Errorf("a floor without measured writes: %v", r.Ratios)
	}
}

// The wait rows: how many pods waited, for capacity or beside a free fit, and the like-for-like
// latency; a run where no pod waited shows dashes, not zeros that read as measured.
func TestTableWaits(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "waits"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 2, Topology: "dgx-h100", GPUsPerNode: 8}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	ours, stock := &runner.RunResult{Mode: runner.ModeGPU}, &runner.RunResult{Mode: runner.ModeStock}
	ours.Metrics.Waits = metrics.WaitFigures{Waited: 7, WithFreeFit: 2, ForCapacity: 5,
		AvoidableP50: 30 * time.Millisecond, AvoidableP99: 1200 * time.Millisecond, AvoidableMax: 1200 * time.Millisecond,
		LatencyP99NoCapacityWait: 15 * time.Millisecond,
		Avoidable:                []metrics.Wait{{Pod: "pod-332", Avoidable: 1200 * time.Millisecond, FitFree: 400 * time.Millisecond}}}
	stock.Metrics.Waits.LatencyP99NoCapacityWait = 12 * time.Millisecond
	ours.SchedulerStages = &metrics.Stages{PreBind: &metrics.Stage{Count: 9, Mean: 4 * time.Millisecond, P50: 3 * time.Millisecond, P99: 25 * time.Millisecond}, Bind: &metrics.Stage{Count: 9, Mean: 3 * time.Millisecond, P50: 2 * time.Millisecond, P99: 6 * time.Millisecond},
		Queued:   &metrics.Stage{Count: 9, Mean: 2 * time.Second, P50: time.Second, P99: 204800 * time.Microsecond, P99Above: true},
		Requests: map[string]*metrics.Stage{"POST": {Count: 30, Mean: 7 * time.Millisecond, P50: 5 * time.Millisecond, P99: 40 * time.Millisecond}}}
	stock.SchedulerStages = &metrics.Stages{Bind: &metrics.Stage{Count: 9, Mean: 2500 * time.Microsecond, P50: 2 * time.Millisecond, P99: 5 * time.Millisecond}}
	ours.Waterfall = []metrics.Span{{Name: metrics.SpanPlayer, P50: 0, P99: 700 * time.Millisecond, Mean: 50 * time.Millisecond},
		{Name: metrics.SpanCreate, P50: 4 * time.Millisecond, P99: 9 * time.Millisecond, Mean: 5 * time.Millisecond},
		{Name: metrics.SpanLeases, P50: 10 * time.Millisecond, P99: 80 * time.Millisecond, Mean: 20 * time.Millisecond}}
	stock.Waterfall = []metrics.Span{{Name: metrics.SpanToBound, P50: 12 * time.Millisecond, P99: 30 * time.Millisecond, Mean: 14 * time.Millisecond}}
	var b bytes.Buffer
	Build(s, "waits.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute).Table(&b)
	out := b.String()
	for _, re := range []string{
		`waited \(unschedulable, or bound > median \+ 100 ms\) / of them for capacity first +7 / 5 +0 / 0\n`,
		`waited while a fit was free > 100 ms +2 \(longest pod-332: 1\.2s after a fit came free, free 400ms of it\) +0\n`,
		`avoidable wait \(bound - first fit free\) p50 / p99 / max +30ms / 1\.2s / 1\.2s +-\n`,
		`latency p99 of pods that never waited for capacity +15ms +12ms\n`,
		`note: Waits: a bound pod waited when`,
		`\n  PreBind \(ours: the GPU leases; DRA: the claim's allocation\) +3ms / 25ms \(mean 4ms\) +-\n`,
		`\n  Bind +2ms / 6ms \(mean 3ms\) +2ms / 5ms \(mean 2\.5ms\)\n`,
		`\nin the scheduler, p50 / p99 \(mean\): queue entry to bound +1s / > 204\.8ms \(mean 2s\) +-\n`,
		`\n  API request POST, as the scheduler timed it +5ms / 40ms \(mean 7ms\) +-\n`,
		`\nsimulator's create backlog, p50 / p99 \(mean\): planned arrival -> create call \(the simulator's create workers; not in the latency\) +0s / 700ms \(mean 50ms\) +-\n` +
			`waterfall, p50 / p99 \(mean\), from each pod's timeline: create call -> pod seen \(API write, webhooks, watch\) +4ms / 9ms \(mean 5ms\) +-\n`,
		`\n  PreBind began -> GPU leases seen \(lease creates\) +10ms / 80ms \(mean 20ms\) +-\n`,
		`\n  pod seen -> pod seen bound \(no steps seen: the stock scheduler\) +- +12ms / 30ms \(mean 14ms\)\n`,
		`note: In the scheduler: each scheduler's own histograms`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the table lacks a line like %s:\n%s", re, out)
		}
	}
}

// TestTableAPIServer: the API server's latency rows, the busiest request kind first, only
// the kinds made at least once per ten pods bound, and one row per admission webhook.
func TestTableAPIServer(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "api"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 2, Topology: "dgx-h100", GPUsPerNode: 8}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	ours, stock := &runner.RunResult{Mode: runner.ModeGPU}, &runner.RunResult{Mode: runner.ModeStock}
	ours.Metrics.Bound, stock.Metrics.Bound = 100, 100
	ms := time.Millisecond
	ours.APIServer = &metrics.APIServer{
		Requests: map[string]*metrics.Stage{
			"POST pods/binding":                   {Count: 100, Mean: 3 * ms, P50: 2 * ms, P99: 9 * ms},
			"PUT gpuclaims.gpu.scheduling/status": {Count: 100, Mean: 20 * ms, P50: 15 * ms, P99: 90 * ms},
			"GET nodes":                           {Count: 9, Mean: 500 * ms, P50: 500 * ms, P99: 500 * ms},
		},
		Webhooks: map[string]*metrics.Stage{"pods.gpu.scheduling CREATE (admit)": {Count: 100, Mean: 4 * ms, P50: 3 * ms, P99: 12 * ms}},
		Admission: map[string]*metrics.Stage{
			"ResourceQuota CREATE (validate)":   {Count: 300, Mean: 70 * ms, P50: 60 * ms, P99: 200 * ms},
			"LimitRanger CREATE (admit)":        {Count: 300, Mean: 1 * ms, P50: 1 * ms, P99: 2 * ms},
			"NamespaceLifecycle CREATE (admit)": {Count: 300, Mean: ms / 10, P50: ms / 10, P99: ms / 10},
			"AlwaysPullImages CREATE (admit)":   {Count: 300, Mean: ms / 100, P50: ms / 100, P99: ms / 100},
		},
	}
	stock.APIServer = &metrics.APIServer{Requests: map[string]*metrics.Stage{"POST pods/binding": {Count: 100, Mean: 50 * ms, P50: 40 * ms, P99: 200 * ms}}}
	var b bytes.Buffer
	Build(s, "api.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute).Table(&b)
	out := b.String()
	for _, re := range []string{
		// The stock run's Bindings took 5 s of the API server's time: the busiest kind.
		`\nin the API server, p50 / p99 \(mean\) x requests: POST pods/binding +2ms / 9ms \(mean 3ms\) x 100 +40ms / 200ms \(mean 50ms\) x 100\n` +
			`  PUT gpuclaims\.gpu\.scheduling/status +15ms / 90ms \(mean 20ms\) x 100 +-\n` +
			`  admission webhook pods\.gpu\.scheduling CREATE \(admit\) +3ms / 12ms \(mean 4ms\) x 100 +-\n` +
			// The three built-in plugins that took most time, the quota's queue first.
			`  admission plugin ResourceQuota CREATE \(validate\) +60ms / 200ms \(mean 70ms\) x 300 +-\n` +
			`  admission plugin LimitRanger CREATE \(admit\) +1ms / 2ms \(mean 1ms\) x 300 +-\n` +
			`  admission plugin NamespaceLifecycle CREATE \(admit\) +100µs / 100µs \(mean 100µs\) x 300 +-\ncontiguous multi-GPU pods`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the table lacks lines like %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "AlwaysPullImages") {
		t.Errorf("more than three admission plugins have rows:\n%s", out)
	}
	if strings.Contains(out, "GET nodes") {
		t.Errorf("a request kind made less than once per ten pods has a row:\n%s", out)
	}
}

// TestTableDomains: with gangs that state gangTopology the table has the domain rows, "-" for
// a run without the figures, and the note; without such gangs neither.
func TestTableDomains(t *testing.T) {
	s := &scenario.Scenario{Metadata: scenario.Metadata{Name: "domains"}, Spec: scenario.Spec{
		NodePools: []scenario.NodePool{{Name: "a", Count: 2, Topology: "gb200-nvl72", GPUsPerNode: 4}},
		Workload:  scenario.Workload{Trace: []scenario.TraceEntry{{Name: "p", Claim: &scenario.ClaimSpec{Count: 1}}}},
	}}
	ours, stock := &runner.RunResult{Mode: runner.ModeGPU}, &runner.RunResult{Mode: runner.ModeStock}
	ours.Metrics.Domains = &metrics.DomainFigures{Level: "nvidia.com/gpu.clique", Gangs: 10, Placed: 8, InOneDomain: 6, InOneRatio: 0.75,
		FitOnArrival: 5, FitInOne: 4, FitSplit: 1, FitInOneRate: 0.8, RequiredSplit: 0, PlaceP50: 2 * time.Second, PlaceP99: 9 * time.Second,
		StrandedMean: 1.5, StrandedMax: 7, WaitingSamples: 30}
	var b bytes.Buffer
	Build(s, "domains.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute).Table(&b)
	out := b.String()
	for _, re := range []string{
		`gangs with gangTopology placed \(every member bound\) / of +8 / 10 +-\n`,
		`placed inside one domain of the level +6 \(75\.0%\) +-\n`,
		`one domain had room when they arrived: inside one / split +4 \(80\.0%\) / 1 of 5 +-\n`,
		`time to place a gang \(first member created -> last bound\) p50 / p99 +2(\.0+)?s / 9(\.0+)?s +-\n`,
		`stranded trays while a gang waited: mean / max +1\.5 / 7 \(30 s with a gang waiting\) +-\n`,
		`note: Gangs inside one domain`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the table lacks a line like %s:\n%s", re, out)
		}
	}
	ours.Metrics.Domains = nil
	b.Reset()
	Build(s, "domains.yaml", []*runner.RunResult{ours, stock}, time.Unix(0, 0), time.Minute).Table(&b)
	if strings.Contains(b.String(), "inside one domain") {
		t.Errorf("the table has domain rows without gangTopology:\n%s", b.String())
	}
}
