// Package report presents simulator runs: a terminal table, JSON for machines and a
// self-contained HTML page (inline SVG charts, no scripts, nothing fetched at view time).
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/sim/baseline"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// AnyNNote says how the stock scheduler's GPU IDs are read, naming the policy.
const AnyNNote = "The stock kube-scheduler only counts nvidia.com/gpu: it picks a node, not GPU IDs. Inside the node its pods get the GPUs the " + baseline.PolicyName + " would pick among the free healthy ones, run on the same mock NVML topology as the agent's. Islands are per node for both; multi-node NVLink domains (GB200 NVL72) place only gangs: gpu-scheduler's by their claims' gangTopology, the stock scheduler's only through a pod affinity (the gang podAffinity run)."

// DRANote says what the DRA run is and what it is not.
const DRANote = "The stock + DRA run: the same nodes publish resource.k8s.io/v1 ResourceSlices (one device per GPU with its index, UUID, model, memory, island, bandwidth and health from the agents' own discovery of the mock NVML; a GPU that is not Healthy carries a NoSchedule device taint), and each pod names a ResourceClaimTemplate of its claim's shape; the stock kube-scheduler's DynamicResources plugin allocates the devices and its GPU IDs are read from the ResourceClaims' allocation results. kwok runs the pods: no kubelet plugin prepares the devices, so the figures are about placement."

// StagesNote says where the "in the scheduler" rows come from.
const StagesNote = "In the scheduler: each scheduler's own histograms, read at the end of its workload (scheduler_pod_scheduling_sli_duration_seconds from the first entry into the active queue, past PreEnqueue, to bound over all attempts, scheduler_scheduling_algorithm_duration_seconds, scheduler_framework_extension_point_duration_seconds for successful PreBind and Bind). Means are exact; p99 is interpolated within buckets that double in width (the queue series' first bucket is 10 ms), as histogram_quantile does. Created -> bound adds the time before the scheduler's informer queues the pod."

// WaitNote says which pods count as having waited and what makes a wait avoidable.
// DomainNote explains the rows of gangs with gangTopology.
const DomainNote = "Gangs inside one domain (gangs whose claims state gangTopology): a gang is inside one domain when every member's node carries the level's label with one value. Fit on arrival, stranded trays: a replay of bindings and ends (GPUs per node), so GPUs that gpu-scheduler has reserved for gang members waiting in Permit for their mates read as free until the members are bound; a tray is a node of a domain with all its GPUs free, stranded while some gang waits and none of the waiting gangs' unbound members fit in its domain at once (docs/simulator.md, Gangs inside NVLink domains)."

const WaitNote = "Waits: a bound pod waited when it was seen unschedulable or was bound more than the run's median latency + 100 ms after its creation. From the moment it was seen, the GPU occupancy replay (GPUs taken when a binding is seen, free again when the pod is seen finished or deleted, as a scheduler learns of it) finds the first moment a placement for its claim was free: its selector's nodes, enough healthy GPUs free to it, in one island at the bandwidth floor only for topology Required (Preferred makes that a wish; nvidia.com/gpu can express neither). Avoidable wait = binding - that moment (an upper bound: GPUs reserved but not yet bound read as free); a pod with no fit free when seen waited for capacity first."

// Check is one expectation of the scenario, judged on the gpu-scheduler run.
type Check struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// Report is everything about one scenario run.
type Report struct {
	Scenario    string              `json:"scenario"`
	Description string              `json:"description,omitempty"`
	File        string              `json:"file"`
	Seed        int64               `json:"seed"`
	Started     time.Time           `json:"started"`
	Wall        time.Duration       `json:"wall"`
	Nodes       int                 `json:"nodes"`
	GPUs        int                 `json:"gpus"`
	Pods        int                 `json:"pods"`
	Runs        []*runner.RunResult `json:"runs"`
	Checks      []Check             `json:"checks"`
	Ratios      map[string]float64  `json:"ratios,omitempty"`
	Notes       []string            `json:"notes,omitempty"`
	Workload    scenario.Summary    `json:"workload"`
	Spec        *scenario.Scenario  `json:"spec"`
}

// Build assembles the report and judges the expectations.
func Build(s *scenario.Scenario, file string, runs []*runner.RunResult, started time.Time, wall time.Duration) *Report {
	nodes, gpus := s.TotalNodes()
	plan := scenario.Expand(s)
	r := &Report{Scenario: s.Metadata.Name, Description: s.Metadata.Description, File: file, Seed: s.Spec.Seed,
		Started: started, Wall: wall, Nodes: nodes, GPUs: gpus, Pods: len(plan), Runs: runs,
		Workload: scenario.Summarize(plan), Spec: s, Ratios: map[string]float64{}}
	ours, stock, withDRA := r.Run(runner.ModeGPU), r.Run(runner.ModeStock), r.Run(runner.ModeDRA)
	if stock != nil {
		r.Notes = append(r.Notes, AnyNNote)
		if ours != nil && stock.Metrics.Throughput > 0 {
			r.Ratios["throughput"] = ours.Metrics.Throughput / stock.Metrics.Throughput
		}
		if ours != nil && stock.Metrics.LatencyP99 > 0 {
			r.Ratios["latencyP99"] = float64(ours.Metrics.LatencyP99) / float64(stock.Metrics.LatencyP99)
		}
		if f, ok := contractFloor(ours, stock); ok {
			r.Ratios["cpuVsStock"] = f.ours / f.stock
			r.Ratios["cpuFloorVsStock"] = f.floor / f.stock
			r.Ratios["throughputCeilingVsStock"] = f.stock / f.floor
		}
	}
	if len(runs) > 0 {
		r.Notes = append(r.Notes, WaitNote)
	}
	if r.hasDomains() {
		r.Notes = append(r.Notes, DomainNote)
	}
	for _, x := range runs {
		if x.SchedulerStages != nil {
			r.Notes = append(r.Notes, StagesNote)
			break
		}
	}
	if withDRA != nil {
		r.Notes = append(r.Notes, DRANote)
		if ours != nil && withDRA.Metrics.Throughput > 0 {
			r.Ratios["throughputDRA"] = ours.Metrics.Throughput / withDRA.Metrics.Throughput
		}
	}
	if withDRA != nil && withDRA.Metrics.Bound > 0 {
		// The DRA run's placement and safety figures stand on the IDs read from the claims.
		n := withDRA.Metrics.Bound - withDRA.DRAPodsWithoutIDs
		r.Checks = append(r.Checks, Check{Name: "stock + DRA: bound pods whose GPUs were read from their ResourceClaim",
			Want: fmt.Sprintf("all %d", withDRA.Metrics.Bound), Got: fmt.Sprint(n), Pass: withDRA.DRAPodsWithoutIDs == 0})
	}
	pre, bare := r.Run(runner.ModePremade), r.Run(runner.ModeTemplatedBare)
	if pre != nil && bare != nil {
		// The yardstick (judged by minThroughputVsPremade): the same bare pods, created the same
		// way at the same times, naming a template or a pre-made claim; they differ by the
		// templates alone, the claim create inside the workload included. Both from the first pod
		// made, like the ratio of the controllers below, and from the first create beside it
		// (for bare pods the two are nearly the same).
		if pre.ThroughputFromMade > 0 {
			r.Ratios["throughputVsPremade"] = bare.ThroughputFromMade / pre.ThroughputFromMade
		}
		if pre.Metrics.Throughput > 0 {
			r.Ratios["throughputVsPremadeFromCreate"] = bare.Metrics.Throughput / pre.Metrics.Throughput
		}
		if c, _, ok := createCeiling(pre); ok {
			r.Ratios["throughputVsPremadeCeiling"] = c
		}
	}
	if pre != nil && ours != nil {
		// Informational: the Jobs and Deployments through templates against the pre-made bare
		// pods differ by kube-controller-manager's Job and ReplicaSet work as well as by the
		// templates. From the first pod made: the time a controller takes to make its first pod
		// is paid whatever its pods ask for (the stock run shows it too); from the controller's
		// create call beside it.
		if pre.ThroughputFromMade > 0 {
			r.Ratios["controllersThroughputVsPremade"] = ours.ThroughputFromMade / pre.ThroughputFromMade
		}
		if pre.Metrics.Throughput > 0 {
			r.Ratios["controllersThroughputVsPremadeFromCreate"] = ours.Metrics.Throughput / pre.Metrics.Throughput
		}
	}
	if bare != nil && ours != nil && bare.ThroughputFromMade > 0 {
		// The controllers' share alone: both runs' pods name the templates.
		r.Ratios["controllersThroughputVsTemplatedBare"] = ours.ThroughputFromMade / bare.ThroughputFromMade
	}
	if ours == nil {
		return r
	}
	e := s.Spec.Expectations
	m := ours.Metrics
	maxCheck := func(name string, limit *int, got int) {
		if limit != nil {
			r.Checks = append(r.Checks, Check{Name: name, Want: fmt.Sprintf("<= %d", *limit), Got: fmt.Sprint(got), Pass: got <= *limit})
		}
	}
	maxCheck("double-booked GPUs", e.MaxDoubleBookedGPUs, m.DoubleBookedGPUs)
	maxCheck("allocations on unhealthy GPUs", e.MaxUnhealthyAllocations, m.UnhealthyAllocations)
	maxCheck("GPU leases left after all pods are gone", e.MaxLeasesLeft, ours.LeasesLeft)
	maxCheck("over-committed GPUs (bound pods' shares, at each binding)", e.MaxOvercommittedGPUs, m.OvercommittedGPUs)
	maxCheck("over-committed GPU leases (their shares, at each change)", e.MaxOvercommittedGPUs, ours.OvercommittedLeases)
	if e.MinIslandLocalRatio != nil {
		got := m.IslandLocalRatio
		pass := got >= *e.MinIslandLocalRatio || m.IslandPossible == 0
		r.Checks = append(r.Checks, Check{Name: "island-local share of multi-GPU pods (where a free island fit)",
			Want: fmt.Sprintf(">= %.0f%%", *e.MinIslandLocalRatio*100), Got: fmt.Sprintf("%.1f%% (%d of %d)", got*100, m.IslandLocal, m.IslandPossible), Pass: pass})
	}
	maxCheck("gangs partly bound", e.MaxPartialGangs, m.GangsPartial)
	if ours.ClaimsLeft != nil {
		maxCheck("GpuClaims left after the workload was deleted", e.MaxClaimsLeft, *ours.ClaimsLeft)
	}
	if ours.PodsLeft != nil {
		maxCheck("pods left after the workload was deleted", e.MaxPodsLeft, *ours.PodsLeft)
	}
	if bare != nil {
		// What the templated bare pods leave behind is judged like the gpu-scheduler run's: a
		// claim made from a template goes with its pod, whoever made the pod.
		title := runner.ModeTitle(runner.ModeTemplatedBare) + ": "
		leftCheck := func(name string, limit, got *int) {
			if limit != nil && got != nil {
				r.Checks = append(r.Checks, Check{Name: title + name, Want: fmt.Sprintf("<= %d", *limit), Got: fmt.Sprint(*got), Pass: *got <= *limit})
			}
		}
		leftCheck("GPU leases left after all pods are gone", e.MaxLeasesLeft, &bare.LeasesLeft)
		leftCheck("GpuClaims left after the workload was deleted", e.MaxClaimsLeft, bare.ClaimsLeft)
		leftCheck("pods left after the workload was deleted", e.MaxPodsLeft, bare.PodsLeft)
	}
	if v := e.MinThroughputVsPremade; v != nil {
		got, ok := r.Ratios["throughputVsPremade"]
		c := Check{Name: "throughput with claim templates / with pre-made claims (the same bare pods, from the first pod made)", Want: fmt.Sprintf(">= %.2fx", *v), Got: fmt.Sprintf("%.2fx", got), Pass: ok && got >= *v}
		if !ok {
			c.Got = "no runs of bare pods with pre-made claims and with the templates (or the pre-made one bound nothing)"
		}
		r.Checks = append(r.Checks, c)
	}
	if v := e.MaxGangIdleGPUSeconds; v != nil {
		r.Checks = append(r.Checks, Check{Name: "GPU-seconds held waiting for gang mates", Want: fmt.Sprintf("<= %g", *v),
			Got: fmt.Sprintf("%.1f", m.GangIdleGPUSeconds), Pass: m.GangIdleGPUSeconds <= *v})
	}
	if d := e.AllScheduledWithin; d != nil {
		pass := m.Unscheduled == 0 && m.LastBound <= d.Duration
		got := fmt.Sprintf("last bound at %s", m.LastBound.Round(time.Millisecond))
		if m.Unscheduled > 0 {
			got = fmt.Sprintf("%d pods never bound", m.Unscheduled)
		}
		r.Checks = append(r.Checks, Check{Name: "every pod scheduled", Want: "by " + d.Duration.String(), Got: got, Pass: pass})
	}
	return r
}

// Run returns the run of one mode, or nil.
func (r *Report) Run(mode string) *runner.RunResult {
	for _, x := range r.Runs {
		if x.Mode == mode {
			return x
		}
	}
	return nil
}

// Passed reports whether every expectation held.
func (r *Report) Passed() bool {
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	return true
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", v*100) }

// missAges summarises how long the fitting island had been free when a pod was placed across
// islands: a few milliseconds is a release the scheduler could not know of yet.
func missAges(ages []time.Duration) string {
	if len(ages) == 0 {
		return "-"
	}
	s := slices.Clone(ages)
	slices.Sort(s)
	return fmt.Sprintf("%d pods: %s / %s", len(s), dur(s[(len(s)-1)/2]), dur(s[len(s)-1]))
}

// freeFitWaits counts the pods that waited while a fit was free, naming the longest.
func freeFitWaits(w metrics.WaitFigures) string {
	if w.WithFreeFit == 0 {
		return "0"
	}
	top := w.Avoidable[0]
	return fmt.Sprintf("%d (longest %s: %s after a fit came free, free %s of it)", w.WithFreeFit, top.Pod, dur(top.Avoidable), dur(top.FitFree))
}

// stage is one of the scheduler's stages as "p50 / p99 (mean m)", or "-" where the run has none.
func stage(x *runner.RunResult, pick func(*metrics.Stages) *metrics.Stage) string {
	if x.SchedulerStages == nil {
		return "-"
	}
	return stageText(pick(x.SchedulerStages))
}

func stageText(st *metrics.Stage) string {
	if st == nil {
		return "-"
	}
	p99 := dur(st.P99)
	if st.P99Above {
		p99 = "> " + p99
	}
	return dur(st.P50) + " / " + p99 + " (mean " + dur(st.Mean) + ")"
}

// span is one stage of a run's waterfall as "p50 / p99 (mean m)", or "-" where the run has none.
func span(x *runner.RunResult, name string) string {
	for _, sp := range x.Waterfall {
		if sp.Name == name {
			return dur(sp.P50) + " / " + dur(sp.P99) + " (mean " + dur(sp.Mean) + ")"
		}
	}
	return "-"
}

// apiRowsMax bounds the API server's request rows: the busiest request kinds are where its
// time goes; the rest are in report.json.
const apiRowsMax = 10

// admissionRowsMax bounds the rows of the API server's built-in admission plugins: the few
// that took most time (a queue such as ResourceQuota's shows there); the rest are in
// report.json.
const admissionRowsMax = 3

// busiestKeys are the keys of one of the API server's figures (request kinds, admission
// plugins) the table shows, at most n: those with at least one observation per ten pods bound
// in some run, by the API server's time spent on them (count x mean, the most in any run) first.
func (r *Report) busiestKeys(of func(*metrics.APIServer) map[string]*metrics.Stage, n int) []string {
	busy := map[string]time.Duration{}
	for _, x := range r.Runs {
		if x.APIServer == nil {
			continue
		}
		least := max(int64(x.Metrics.Bound)/10, 1)
		for k, st := range of(x.APIServer) {
			if st.Count < least {
				continue
			}
			busy[k] = max(busy[k], time.Duration(st.Count)*st.Mean)
		}
	}
	keys := slices.Collect(maps.Keys(busy))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(busy[b], busy[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	return keys
}

// webhookKeys are the admission webhooks any run's API server called, sorted.
func (r *Report) webhookKeys() []string {
	seen := map[string]bool{}
	for _, x := range r.Runs {
		if x.APIServer != nil {
			for k := range x.APIServer.Webhooks {
				seen[k] = true
			}
		}
	}
	keys := slices.Collect(maps.Keys(seen))
	slices.Sort(keys)
	return keys
}

// apiStageText is stageText with the number of requests, or "-" for none.
func apiStageText(st *metrics.Stage) string {
	if st == nil {
		return "-"
	}
	return fmt.Sprintf("%s x %d", stageText(st), st.Count)
}

// requestVerbs are the API verbs whose client-side latency the table shows.
var requestVerbs = []string{"POST", "PUT", "PATCH", "GET"}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}

// rows are the comparison table's lines: a label and one value per run.
func (r *Report) rows() [][]string {
	type f func(x *runner.RunResult) string
	items := []struct {
		label string
		f     f
	}{
		{"pods bound / created", func(x *runner.RunResult) string { return fmt.Sprintf("%d / %d", x.Metrics.Bound, x.Metrics.Pods) }},
		{"throughput (pods bound/s)", func(x *runner.RunResult) string { return fmt.Sprintf("%.1f", x.Metrics.Throughput) }},
		{"latency p50 (created -> bound)", func(x *runner.RunResult) string { return dur(x.Metrics.LatencyP50) }},
		{"latency p99", func(x *runner.RunResult) string { return dur(x.Metrics.LatencyP99) }},
		{"last pod bound at", func(x *runner.RunResult) string { return dur(x.Metrics.LastBound) }},
		{"scheduling API writes / pod", func(x *runner.RunResult) string {
			return fmt.Sprintf("%.2f (mean %.2f GPUs/pod)", x.SchedulingWritesPerPod, x.MeanGPUsPerPod)
		}},
		{"events / pod", func(x *runner.RunResult) string { return fmt.Sprintf("%.2f", x.EventsPerPod) }},
		{"agent status writes / pod", func(x *runner.RunResult) string { return fmt.Sprintf("%.2f", x.AgentWritesPerPod) }},
		{"agent liveness lease writes / pod", func(x *runner.RunResult) string {
			return fmt.Sprintf("%.2f (%.0f in all)", x.LivenessWritesPerPod, x.LivenessWrites)
		}},
		{"island-local multi-GPU pods", func(x *runner.RunResult) string {
			return fmt.Sprintf("%s (%d of %d where a free island fit; %d multi-GPU)", pct(x.Metrics.IslandLocalRatio), x.Metrics.IslandLocal, x.Metrics.IslandPossible, x.Metrics.MultiGPU)
		}},
		{"across islands while one fit: free that long (p50 / max)", func(x *runner.RunResult) string { return missAges(x.Metrics.IslandMissAges) }},
		{"waited (unschedulable, or bound > median + 100 ms) / of them for capacity first", func(x *runner.RunResult) string {
			return fmt.Sprintf("%d / %d", x.Metrics.Waits.Waited, x.Metrics.Waits.ForCapacity)
		}},
		{"waited while a fit was free > 100 ms", func(x *runner.RunResult) string { return freeFitWaits(x.Metrics.Waits) }},
		{"avoidable wait (bound - first fit free) p50 / p99 / max", func(x *runner.RunResult) string {
			w := x.Metrics.Waits
			if w.Waited == 0 {
				return "-"
			}
			return dur(w.AvoidableP50) + " / " + dur(w.AvoidableP99) + " / " + dur(w.AvoidableMax)
		}},
		{"latency p99 of pods that never waited for capacity", func(x *runner.RunResult) string {
			return dur(x.Metrics.Waits.LatencyP99NoCapacityWait)
		}},
		{"simulator's create backlog, p50 / p99 (mean): " + metrics.SpanPlayer, func(x *runner.RunResult) string { return span(x, metrics.SpanPlayer) }},
		{"waterfall, p50 / p99 (mean), from each pod's timeline: " + metrics.SpanCreate, func(x *runner.RunResult) string { return span(x, metrics.SpanCreate) }},
		{"  " + metrics.SpanSchedule, func(x *runner.RunResult) string { return span(x, metrics.SpanSchedule) }},
		{"  " + metrics.SpanLeases, func(x *runner.RunResult) string { return span(x, metrics.SpanLeases) }},
		{"  " + metrics.SpanClaim, func(x *runner.RunResult) string { return span(x, metrics.SpanClaim) }},
		{"  " + metrics.SpanBind, func(x *runner.RunResult) string { return span(x, metrics.SpanBind) }},
		{"  " + metrics.SpanToBound + " (no steps seen: the stock scheduler)", func(x *runner.RunResult) string { return span(x, metrics.SpanToBound) }},
		{"  " + metrics.SpanTotal, func(x *runner.RunResult) string { return span(x, metrics.SpanTotal) }},
		{"  " + metrics.SpanScheduled, func(x *runner.RunResult) string { return span(x, metrics.SpanScheduled) }},
		{"  " + metrics.SpanSeenLate, func(x *runner.RunResult) string { return span(x, metrics.SpanSeenLate) }},
		{"in the scheduler, p50 / p99 (mean): queue entry to bound", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.Queued })
		}},
		{"  scheduling algorithm (Filter, Score)", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.Algorithm })
		}},
		{"  PreBind (ours: the GPU leases; DRA: the claim's allocation)", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.PreBind })
		}},
		{"  Reserve", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.Reserve })
		}},
		{"  Permit", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.Permit })
		}},
		{"    of PreBind: the GPU lease creates", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.LeaseAcquire })
		}},
		{"  Bind", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.Bind })
		}},
		{"  API client rate-limiter wait, per request", func(x *runner.RunResult) string {
			return stage(x, func(s *metrics.Stages) *metrics.Stage { return s.RateLimiter })
		}},
		{"contiguous multi-GPU pods", func(x *runner.RunResult) string { return pct(x.Metrics.ContiguityRatio) }},
		{"island-local / contiguous had stock got the lowest free IDs", func(x *runner.RunResult) string {
			if x.LowestFree == nil {
				return "-"
			}
			return fmt.Sprintf("%s (%d of %d) / %s", pct(x.LowestFree.IslandLocalRatio), x.LowestFree.IslandLocal, x.LowestFree.IslandPossible, pct(x.LowestFree.ContiguityRatio))
		}},
		{"fragmentation (mean)", func(x *runner.RunResult) string { return pct(x.Metrics.MeanFragmentation) }},
		{"GPU utilization mean / peak", func(x *runner.RunResult) string {
			return pct(x.Metrics.MeanUtilization) + " / " + pct(x.Metrics.PeakUtilization)
		}},
		{"double-booked GPUs", func(x *runner.RunResult) string { return fmt.Sprint(x.Metrics.DoubleBookedGPUs) }},
		{"over-committed GPUs (pods / leases)", func(x *runner.RunResult) string {
			if runner.IsStock(x.Mode) {
				return fmt.Sprintf("%d / n/a", x.Metrics.OvercommittedGPUs)
			}
			return fmt.Sprintf("%d / %d", x.Metrics.OvercommittedGPUs, x.OvercommittedLeases)
		}},
		{"allocations on unhealthy GPUs", func(x *runner.RunResult) string { return fmt.Sprint(x.Metrics.UnhealthyAllocations) }},
		{"GPU leases left after pods gone", func(x *runner.RunResult) string {
			if runner.IsStock(x.Mode) {
				return "n/a (no leases)"
			}
			return fmt.Sprint(x.LeasesLeft)
		}},
		{"peak RSS, all processes", func(x *runner.RunResult) string { return mib(x.PeakRSSBytes) }},
		{"CPU in the workload: all / kube-apiserver", func(x *runner.RunResult) string {
			return fmt.Sprintf("%.1fs / %.1fs", x.WorkloadCPUTotal, x.WorkloadCPUSeconds[cluster.ComponentAPIServer])
		}},
		{"CPU per bound pod: all / kube-apiserver", func(x *runner.RunResult) string {
			if x.Metrics.Bound == 0 {
				return "-"
			}
			b := float64(x.Metrics.Bound)
			return fmt.Sprintf("%.1f ms / %.1f ms", 1000*x.WorkloadCPUTotal/b, 1000*x.WorkloadCPUSeconds[cluster.ComponentAPIServer]/b)
		}},
		{"CPU per bound pod less the idle background: all (idle background, cores)", func(x *runner.RunResult) string {
			if x.Metrics.Bound == 0 || len(x.BackgroundCPU) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f ms (%.2f)", 1000*netPerPod(x), backgroundCores(x))
		}},
		{"setup / workload / teardown", func(x *runner.RunResult) string {
			return dur(x.Setup) + " / " + dur(x.Workload) + " / " + dur(x.Teardown)
		}},
	}
	// The scheduler's API requests by verb, as its clients timed them, after the rate limiter.
	for i, it := range items {
		if !strings.HasPrefix(it.label, "  API client rate-limiter wait") {
			continue
		}
		var verbs []struct {
			label string
			f     f
		}
		for _, verb := range requestVerbs {
			verbs = append(verbs, struct {
				label string
				f     f
			}{"  API request " + verb + ", as the scheduler timed it", func(x *runner.RunResult) string {
				if x.SchedulerStages == nil {
					return "-"
				}
				return stageText(x.SchedulerStages.Requests[verb])
			}})
		}
		items = slices.Insert(items, i+1, verbs...)
		break
	}
	// Inside the API server: its latency for the requests the runs made most of, and its
	// admission webhooks' calls, before the placement rows.
	for i, it := range items {
		if it.label != "contiguous multi-GPU pods" {
			continue
		}
		var api []struct {
			label string
			f     f
		}
		for j, k := range r.busiestKeys(func(a *metrics.APIServer) map[string]*metrics.Stage { return a.Requests }, apiRowsMax) {
			label := "  " + k
			if j == 0 {
				label = "in the API server, p50 / p99 (mean) x requests: " + k
			}
			api = append(api, struct {
				label string
				f     f
			}{label, func(x *runner.RunResult) string {
				if x.APIServer == nil {
					return "-"
				}
				return apiStageText(x.APIServer.Requests[k])
			}})
		}
		for _, k := range r.webhookKeys() {
			api = append(api, struct {
				label string
				f     f
			}{"  admission webhook " + k, func(x *runner.RunResult) string {
				if x.APIServer == nil {
					return "-"
				}
				return apiStageText(x.APIServer.Webhooks[k])
			}})
		}
		for _, k := range r.busiestKeys(func(a *metrics.APIServer) map[string]*metrics.Stage { return a.Admission }, admissionRowsMax) {
			api = append(api, struct {
				label string
				f     f
			}{"  admission plugin " + k, func(x *runner.RunResult) string {
				if x.APIServer == nil {
					return "-"
				}
				return apiStageText(x.APIServer.Admission[k])
			}})
		}
		items = slices.Insert(items, i, api...)
		break
	}
	if r.hasControllers() {
		items = append(items, []struct {
			label string
			f     f
		}{
			{"throughput from the first pod made (pods bound/s)", func(x *runner.RunResult) string {
				return fmt.Sprintf("%.1f", x.ThroughputFromMade)
			}},
			{"GpuClaim creates / pod (counted in the writes above)", func(x *runner.RunResult) string {
				switch {
				case runner.IsStock(x.Mode):
					return "-"
				case x.PremadeClaims > 0:
					return fmt.Sprintf("%.2f (+ %d made before the clock, not counted)", x.ClaimCreatesPerPod, x.PremadeClaims)
				}
				return fmt.Sprintf("%.2f (from the templates)", x.ClaimCreatesPerPod)
			}},
			{"CPU of one GpuClaim create, measured on the claims made before the clock: all / kube-apiserver", func(x *runner.RunResult) string {
				if len(x.ClaimCreateCPU) == 0 {
					return "-"
				}
				var all float64
				for _, v := range x.ClaimCreateCPU {
					all += v
				}
				return fmt.Sprintf("%.2f ms / %.2f ms", 1000*all, 1000*x.ClaimCreateCPU[cluster.ComponentAPIServer])
			}},
			{"controller create -> pod made, p50 / p99", func(x *runner.RunResult) string {
				if x.Mode == runner.ModePremade || x.Mode == runner.ModeTemplatedBare {
					return "- (bare pods)"
				}
				return dur(x.StampP50) + " / " + dur(x.StampP99)
			}},
			{"GpuClaims / pods left after the workload was deleted", func(x *runner.RunResult) string {
				if x.ClaimsLeft == nil || x.PodsLeft == nil {
					return "n/a (cluster thrown away)"
				}
				return fmt.Sprintf("%d / %d", *x.ClaimsLeft, *x.PodsLeft)
			}},
		}...)
	}
	if r.hasFill() {
		items = append(items, []struct {
			label string
			f     f
		}{
			{"fill: GPU allocation rate at the end", func(x *runner.RunResult) string {
				if x.Fill == nil {
					return "-"
				}
				return fmt.Sprintf("%s (%d of %d GPUs)", pct(x.Fill.Allocation), x.Fill.AllocatedGPU, x.Fill.TotalGPUs)
			}},
			{"fill: allocation at arrived demand 10 %, 20 %, ... of the GPUs", func(x *runner.RunResult) string {
				if x.Fill == nil || len(x.Fill.Steps) == 0 {
					return "-"
				}
				parts := make([]string, len(x.Fill.Steps))
				for i, p := range x.Fill.Steps {
					parts[i] = fmt.Sprintf("%.1f", 100*p.Allocation)
				}
				return strings.Join(parts, " ")
			}},
			{"fill: first pod not placed", func(x *runner.RunResult) string {
				if x.Fill == nil || x.Fill.FirstUnplaced == 0 {
					return "none"
				}
				return fmt.Sprintf("arrival #%d (%d GPUs) at %s allocated", x.Fill.FirstUnplaced, x.Fill.FirstUnplacedGPUs, pct(x.Fill.AllocationAtFirstUnplaced))
			}},
			{"fill: 4-GPU / 8-GPU pods placed", func(x *runner.RunResult) string {
				if x.Fill == nil {
					return "-"
				}
				return fmt.Sprintf("%d of %d / %d of %d", x.Fill.Placed4, x.Fill.Arrived4, x.Fill.Placed8, x.Fill.Arrived8)
			}},
			{"fill: free GPUs stranded (< typical request) at the first pod not placed", func(x *runner.RunResult) string {
				if x.Fill == nil || x.Fill.FirstUnplaced == 0 {
					return "-"
				}
				return fmt.Sprintf("%s (%d of %d free; typical request %d GPUs)", pct(x.Fill.FragmentationAtFirstUnplaced), x.Fill.StrandedAtFirstUnplaced, x.Fill.FreeAtFirstUnplaced, x.Fill.TypicalRequest)
			}},
			{"fill: free GPUs stranded at the end", func(x *runner.RunResult) string {
				if x.Fill == nil {
					return "-"
				}
				if x.Fill.FreeGPUs == 0 {
					return "no GPU free"
				}
				return fmt.Sprintf("%s (%d of %d free)", pct(x.Fill.Fragmentation), x.Fill.StrandedGPUs, x.Fill.FreeGPUs)
			}},
		}...)
	}
	if r.hasGangs() {
		items = append(items, []struct {
			label string
			f     f
		}{
			{"gangs whole / partial / of", func(x *runner.RunResult) string {
				return fmt.Sprintf("%d / %d / %d", x.Metrics.GangsWhole, x.Metrics.GangsPartial, x.Metrics.Gangs)
			}},
			{"gang bind spread p50 / p99", func(x *runner.RunResult) string {
				return dur(x.Metrics.GangBindSpreadP50) + " / " + dur(x.Metrics.GangBindSpreadP99)
			}},
			{"GPU-seconds held waiting for gang mates", func(x *runner.RunResult) string {
				return fmt.Sprintf("%.0f", x.Metrics.GangIdleGPUSeconds)
			}},
		}...)
	}
	if r.hasDomains() {
		for _, d := range domainRows {
			items = append(items, struct {
				label string
				f     f
			}{d.label, d.f})
		}
	}
	var out [][]string
	for _, it := range items {
		row := []string{it.label}
		for _, x := range r.Runs {
			row = append(row, it.f(x))
		}
		out = append(out, row)
	}
	return out
}

// hasControllers tells whether the workload was Jobs and Deployments; their rows are shown
// only then.
func (r *Report) hasControllers() bool {
	return r.Spec != nil && len(r.Spec.Spec.Workload.Controllers) > 0
}

// hasFill tells whether a run was a fill run; its rows are shown only then.
func (r *Report) hasFill() bool {
	for _, x := range r.Runs {
		if x.Fill != nil {
			return true
		}
	}
	return false
}

// domainRows are the gang-topology rows (metrics.DomainFigures; the legend in
// docs/simulator.md "Gangs inside NVLink domains").
var domainRows = []struct {
	label string
	f     func(x *runner.RunResult) string
}{
	{"gangs with gangTopology placed (every member bound) / of", domainRow(func(d *metrics.DomainFigures) string {
		return fmt.Sprintf("%d / %d", d.Placed, d.Gangs)
	})},
	{"  placed inside one domain of the level", domainRow(func(d *metrics.DomainFigures) string {
		return fmt.Sprintf("%d (%s)", d.InOneDomain, pct(d.InOneRatio))
	})},
	{"  one domain had room when they arrived: inside one / split", domainRow(func(d *metrics.DomainFigures) string {
		return fmt.Sprintf("%d (%s) / %d of %d", d.FitInOne, pct(d.FitInOneRate), d.FitSplit, d.FitOnArrival)
	})},
	{"  Required gangs placed across domains", domainRow(func(d *metrics.DomainFigures) string {
		return fmt.Sprint(d.RequiredSplit)
	})},
	{"  time to place a gang (first member created -> last bound) p50 / p99", domainRow(func(d *metrics.DomainFigures) string {
		return dur(d.PlaceP50) + " / " + dur(d.PlaceP99)
	})},
	{"  stranded trays while a gang waited: mean / max", domainRow(func(d *metrics.DomainFigures) string {
		return fmt.Sprintf("%.1f / %d (%d s with a gang waiting)", d.StrandedMean, d.StrandedMax, d.WaitingSamples)
	})},
}

func domainRow(f func(d *metrics.DomainFigures) string) func(x *runner.RunResult) string {
	return func(x *runner.RunResult) string {
		if x.Metrics.Domains == nil {
			return "-"
		}
		return f(x.Metrics.Domains)
	}
}

// hasDomains tells whether a run had gangs with gangTopology; their rows are shown only then.
func (r *Report) hasDomains() bool {
	for _, x := range r.Runs {
		if x.Metrics.Domains != nil {
			return true
		}
	}
	return false
}

// hasGangs tells whether the workload had gangs; their rows are shown only then.
func (r *Report) hasGangs() bool {
	for _, x := range r.Runs {
		if x.Metrics.Gangs > 0 {
			return true
		}
	}
	return false
}

// Table writes the terminal report.
func (r *Report) Table(w io.Writer) {
	fmt.Fprintf(w, "\nScenario %s (%s): %d nodes, %d GPUs, %d pods (%d GPUs asked), seed %d; wall time %s\n",
		r.Scenario, r.File, r.Nodes, r.GPUs, r.Pods, r.Workload.GPUs, r.Seed, r.Wall.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{""}
	for _, x := range r.Runs {
		head = append(head, runner.ModeTitle(x.Mode))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, row := range r.rows() {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	for _, line := range r.ratioLines() {
		fmt.Fprintln(w, line)
	}
	for _, x := range r.Runs {
		for _, n := range x.Notes {
			fmt.Fprintf(w, "note (%s): %s\n", x.Mode, n)
		}
		if line := unscheduledLine(x); line != "" {
			fmt.Fprintf(w, "unscheduled (%s): %s\n", x.Mode, line)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	r.CauseTable(w)
	for _, x := range r.Runs {
		var parts []string
		for _, p := range x.Phases {
			parts = append(parts, fmt.Sprintf("%s %s", p.Name, p.Duration.Round(100*time.Millisecond)))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "phases (%s): %s\n", x.Mode, strings.Join(parts, ", "))
		}
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w, "expectations (gpu-scheduler run; the DRA and templated bare pods runs where named):")
		for _, c := range r.Checks {
			mark := "PASS"
			if !c.Pass {
				mark = "FAIL"
			}
			fmt.Fprintf(w, "  %s  %s: want %s, got %s\n", mark, c.Name, c.Want, c.Got)
		}
	}
}

// ratioLines are the report's ratios between runs, one sentence each (the table and the HTML
// page show them under the comparison).
func (r *Report) ratioLines() []string {
	var lines []string
	if v, ok := r.Ratios["throughput"]; ok {
		lines = append(lines, fmt.Sprintf("throughput gpu-scheduler / stock: %.2fx", v))
	}
	if f, ok := contractFloor(r.Run(runner.ModeGPU), r.Run(runner.ModeStock)); ok {
		what := "CPU per bound pod"
		if f.net {
			what = "CPU per bound pod less the idle background"
		}
		lines = append(lines, fmt.Sprintf("floor the API contract's writes put under gpu-scheduler's %s, measured in this run: stock's %.1f ms + %.2f GPU lease creates x %.2f ms + one GpuClaim status write %.2f ms = %.1f ms, %.2fx stock's (a throughput ceiling of %.2fx while both runs are CPU-bound); gpu-scheduler used %.1f ms, %.2fx (not judged)",
			what, 1000*f.stock, f.gpus, 1000*f.lease, 1000*f.status, 1000*f.floor, f.floor/f.stock, f.stock/f.floor, 1000*f.ours, f.ours/f.stock))
	}
	if v, ok := r.Ratios["throughputDRA"]; ok {
		lines = append(lines, fmt.Sprintf("throughput gpu-scheduler / stock + DRA: %.2fx", v))
	}
	if v, ok := r.Ratios["throughputVsPremade"]; ok {
		lines = append(lines, fmt.Sprintf("throughput with claim templates / with pre-made claims, the same bare pods: %.2fx from the first pod made, %.2fx from the first pod created", v, r.Ratios["throughputVsPremadeFromCreate"]))
	}
	if pre := r.Run(runner.ModePremade); pre != nil {
		if c, per, ok := createCeiling(pre); ok {
			lines = append(lines, fmt.Sprintf("ceiling of that ratio while the runs are CPU-bound: %.2fx, from the pre-made run's %.1f ms of CPU per bound pod and %.2f ms for the GpuClaim create a templated pod adds (kube-apiserver %.2f, etcd %.2f; measured on the %d claims made before its clock; not judged)",
				c, 1000*pre.WorkloadCPUTotal/float64(pre.Metrics.Bound), 1000*per,
				1000*pre.ClaimCreateCPU[cluster.ComponentAPIServer], 1000*pre.ClaimCreateCPU[cluster.ComponentEtcd], pre.PremadeClaims))
		}
	}
	if v, ok := r.Ratios["controllersThroughputVsPremade"]; ok {
		lines = append(lines, fmt.Sprintf("throughput of the Jobs and Deployments through templates / bare pods with pre-made claims (templates and kube-controller-manager's work; not judged): %.2fx from the first pod made, %.2fx from the first controller created", v, r.Ratios["controllersThroughputVsPremadeFromCreate"]))
	}
	if v, ok := r.Ratios["controllersThroughputVsTemplatedBare"]; ok {
		lines = append(lines, fmt.Sprintf("throughput of the Jobs and Deployments / the same pods bare, both through templates (kube-controller-manager's work alone; not judged): %.2fx from the first pod made", v))
	}
	return lines
}

// floor is the CPU per bound pod, in seconds, that the API contract's writes put under
// gpu-scheduler's: the stock run's, plus gpus lease creates and one claim status write at the
// prices measured in gpu-scheduler's run (runner.ContractWriteCPU); ours is what it used.
type floor struct {
	stock, ours, floor, lease, status, gpus float64
	// net: stock and ours are CPU per pod less each run's idle background (netPerPod).
	net bool
}

// backgroundCores is the CPU per second x's processes used idle (runner.RunResult.BackgroundCPU).
func backgroundCores(x *runner.RunResult) float64 {
	var t float64
	for _, v := range x.BackgroundCPU {
		t += v
	}
	return t
}

// netPerPod is x's CPU per bound pod less what its processes would have used idle over the
// workload's wall time: the work the pods themselves cost.
func netPerPod(x *runner.RunResult) float64 {
	if x.Metrics.Bound == 0 {
		return 0
	}
	return (x.WorkloadCPUTotal - backgroundCores(x)*x.Workload.Seconds()) / float64(x.Metrics.Bound)
}

// contractFloor prices the floor for ours against stock; ok is false without the measurement
// or without bound pods in either run.
func contractFloor(ours, stock *runner.RunResult) (floor, bool) {
	if ours == nil || stock == nil || ours.ContractWriteCPU == nil || ours.Metrics.Bound == 0 || stock.Metrics.Bound == 0 {
		return floor{}, false
	}
	sum := func(m map[string]float64) float64 {
		var t float64
		for _, v := range m {
			t += v
		}
		return max(t, 0)
	}
	f := floor{
		stock:  stock.WorkloadCPUTotal / float64(stock.Metrics.Bound),
		ours:   ours.WorkloadCPUTotal / float64(ours.Metrics.Bound),
		net:    len(ours.BackgroundCPU) > 0 && len(stock.BackgroundCPU) > 0,
		lease:  sum(ours.ContractWriteCPU.LeaseCreate),
		status: sum(ours.ContractWriteCPU.ClaimStatus),
		gpus:   ours.MeanGPUsPerPod,
	}
	if f.net {
		// A CPU-bound run's throughput is (cores - background) / work per pod, so the ratio of
		// two runs is the ratio of their work, and the floor is stock's work plus the writes.
		f.stock, f.ours = netPerPod(stock), netPerPod(ours)
	}
	if f.stock <= 0 {
		return floor{}, false
	}
	f.floor = f.stock + f.gpus*f.lease + f.status
	return f, true
}

// createCeiling is the highest throughput a run of templated pods can reach against the
// pre-made run pre while both are CPU-bound: pre's CPU per bound pod over the same plus the
// CPU of the one GpuClaim create a templated pod adds, as measured on pre's own claims before
// its clock (runner.RunResult.ClaimCreateCPU, all processes). perCreate is that create's CPU
// in seconds; ok is false when pre has no such measurement or bound nothing.
func createCeiling(pre *runner.RunResult) (ceiling, perCreate float64, ok bool) {
	if pre == nil || len(pre.ClaimCreateCPU) == 0 || pre.Metrics.Bound == 0 || pre.WorkloadCPUTotal <= 0 {
		return 0, 0, false
	}
	for _, v := range pre.ClaimCreateCPU {
		perCreate += v
	}
	perPod := pre.WorkloadCPUTotal / float64(pre.Metrics.Bound)
	return perPod / (perPod + max(perCreate, 0)), perCreate, true
}

// unscheduledLine sums up the pods never bound in one line: how many, and the most common of
// the scheduler's last messages (report.json has them all).
func unscheduledLine(x *runner.RunResult) string {
	// gpu-scheduler names the pod's claim in its message; without the name, pods turned away
	// for the same reason share one message.
	same := map[string]int{}
	for msg, n := range x.Unschedulable {
		same[claimName.ReplaceAllString(msg, "GpuClaim $1/<claim>")] += n
	}
	total, top, topN := 0, "", 0
	for msg, n := range same {
		total += n
		if n > topN || (n == topN && msg < top) {
			top, topN = msg, n
		}
	}
	if total == 0 {
		return ""
	}
	if topN == total {
		return fmt.Sprintf("%d pods: %s", total, top)
	}
	return fmt.Sprintf("%d pods (%d kinds of message, all in report.json); most common (%d pods): %s", total, len(same), topN, top)
}

// claimName matches "GpuClaim <namespace>/<name>" in a scheduler message.
var claimName = regexp.MustCompile(`GpuClaim ([a-z0-9-]+)/[a-z0-9]([a-z0-9.-]*[a-z0-9])?`)

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding report %s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}
