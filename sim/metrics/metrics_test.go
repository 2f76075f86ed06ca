package metrics

import (
	"math"
	"testing"
	"time"
)

const s = time.Second

func twoIsland(name string) Node {
	return Node{Name: name, Pool: "t", Islands: []string{"a", "a", "a", "a", "b", "b", "b", "b"}}
}

func pairs(name string) Node {
	return Node{Name: name, Pool: "p", Islands: []string{"p0", "p0", "p1", "p1", "p2", "p2", "p3", "p3"}}
}

func bound(name string, gpus int, created, at time.Duration, node string, ids ...int) Pod {
	return Pod{Name: name, GPUs: gpus, Created: created, Bound: at, BoundOK: true, Node: node, IDs: ids}
}

func ended(p Pod, at time.Duration) Pod {
	p.Ended, p.EndedOK = at, true
	return p
}

func TestComputePlacements(t *testing.T) {
	in := Input{
		Nodes: []Node{twoIsland("n1"), pairs("n2")},
		Pods: []Pod{
			bound("local", 2, 0, 1*s, "n1", 0, 1),      // one island, contiguous
			bound("cross", 2, 0, 2*s, "n1", 3, 4),      // contiguous IDs but two islands
			bound("single", 1, 0, 3*s, "n2", 0),        // single GPU: not counted for islands
			bound("double", 1, 0, 4*s, "n1", 0),        // GPU 0 is held by "local"
			{Name: "waiting", GPUs: 1, Created: 1 * s}, // never bound
			bound("spread", 2, 5*s, 6*s, "n2", 2, 6),   // two islands, not contiguous
		},
		End: 10 * s,
	}
	r := Compute(in)
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("Pods", r.Pods, 6)
	check("Bound", r.Bound, 5)
	check("Unscheduled", r.Unscheduled, 1)
	check("LastBound", r.LastBound, 6*s)
	check("Throughput", r.Throughput, 5.0/6.0)
	// Latencies 1s, 2s, 3s, 4s, 1s: sorted 1,1,2,3,4 -> p50 the 3rd, p99 the 5th.
	check("LatencyP50", r.LatencyP50, 2*s)
	check("LatencyP99", r.LatencyP99, 4*s)
	check("MultiGPU", r.MultiGPU, 3)
	check("IslandPossible", r.IslandPossible, 3)
	check("IslandLocal", r.IslandLocal, 1)
	check("IslandLocalRatio", r.IslandLocalRatio, 1.0/3.0)
	check("Contiguous", r.Contiguous, 2)
	check("DoubleBookedGPUs", r.DoubleBookedGPUs, 1)
	check("UnhealthyAllocations", r.UnhealthyAllocations, 0)
	check("TotalGPUs", r.TotalGPUs, 16)
	// At the end 7 GPUs are held (0 twice counts once): 0,1,3,4 on n1; 0,2,6 on n2.
	last := r.Samples[len(r.Samples)-1]
	check("final Used", last.Used, 7)
	check("PeakUtilization", r.PeakUtilization, 7.0/16.0)
	if len(r.Map) != 2 || r.Map[0].Holders[0] != "local +1" || r.Map[1].Holders[6] != "spread" || r.Map[0].Holders[2] != "" {
		t.Errorf("GPU map at peak = %+v", r.Map)
	}
}

// TestIslandPossible: a multi-GPU pod counts against island locality only when some node had
// a free island that fit it when it was bound.
func TestIslandPossible(t *testing.T) {
	in := Input{
		Nodes: []Node{pairs("n")},
		Pods: []Pod{
			bound("a", 2, 0, 1*s, "n", 0, 1),
			bound("b", 2, 0, 2*s, "n", 2, 3),
			bound("c", 2, 0, 3*s, "n", 4, 5),
			bound("d", 2, 0, 4*s, "n", 6, 7),
			// A 4-GPU pod can never be island-local on pairs: not held against the scheduler.
			ended(bound("e", 4, 0, s/2, "n", 0, 1, 2, 3), s*9/10),
		},
		End: 5 * s,
	}
	r := Compute(in)
	if r.IslandPossible != 4 || r.IslandLocal != 4 || r.MultiGPU != 5 {
		t.Fatalf("possible %d local %d multi %d, want 4 4 5", r.IslandPossible, r.IslandLocal, r.MultiGPU)
	}
	// Full: another pair fits nowhere and is not held against the scheduler.
	in.Pods = append(in.Pods, bound("f", 2, 0, 5*s, "n", 0, 7))
	r = Compute(in)
	if r.IslandPossible != 4 || r.DoubleBookedGPUs != 2 {
		t.Fatalf("possible %d double %d, want 4 and 2", r.IslandPossible, r.DoubleBookedGPUs)
	}
}

// TestIslandMissAges: a pod placed across islands while one fit records how long that island
// had had room: since its last holder ended, or since the start.
func TestIslandMissAges(t *testing.T) {
	ms := time.Millisecond
	in := Input{
		Nodes: []Node{pairs("n")},
		Pods: []Pod{
			// Every pair is held, p3 by a single GPU only; "early" leaves p0 free at 1 s.
			ended(bound("early", 2, 0, 0, "n", 0, 1), 1*s),
			bound("held1", 2, 0, 0, "n", 2, 3),
			bound("held2", 2, 0, 0, "n", 4, 5),
			bound("held3", 1, 0, 0, "n", 6),
			// 10 ms later a pair is placed across p0 and p3 while p0 fit it.
			bound("fresh", 2, 0, 1*s+10*ms, "n", 1, 7),
		},
		End: 5 * s,
	}
	r := Compute(in)
	if len(r.IslandMissAges) != 1 || r.IslandMissAges[0] != 10*ms {
		t.Fatalf("miss ages %v, want [10ms] (the pair p0 came free 10 ms before)", r.IslandMissAges)
	}
	// A pair free from the start and ignored: the miss is as old as the run.
	in = Input{Nodes: []Node{pairs("n")}, Pods: []Pod{bound("cross", 2, 0, 3*s, "n", 1, 2)}, End: 5 * s}
	if r = Compute(in); len(r.IslandMissAges) != 1 || r.IslandMissAges[0] != 3*s {
		t.Fatalf("miss ages %v, want [3s]", r.IslandMissAges)
	}
}

func TestReleaseAndShared(t *testing.T) {
	in := Input{
		Nodes: []Node{twoIsland("n")},
		Pods: []Pod{
			ended(bound("a", 1, 0, 1*s, "n", 0), 2*s),
			bound("b", 1, 0, 2*s, "n", 0), // released at the same instant: no double booking
			{Name: "s1", GPUs: 1, Shared: true, Bound: 3 * s, BoundOK: true, Node: "n", IDs: []int{5}},
			{Name: "s2", GPUs: 1, Shared: true, Bound: 3 * s, BoundOK: true, Node: "n", IDs: []int{5}},
			bound("x", 1, 0, 4*s, "n", 5), // Exclusive onto a shared GPU
		},
		End: 4 * s,
	}
	r := Compute(in)
	if r.DoubleBookedGPUs != 1 {
		t.Fatalf("DoubleBookedGPUs = %d, want 1 (only the Exclusive pod on the shared GPU)", r.DoubleBookedGPUs)
	}
}

func TestUnhealthyAllocations(t *testing.T) {
	in := Input{
		Nodes: []Node{pairs("n")},
		Health: []HealthChange{
			{Node: "n", GPU: 1, At: 0, Healthy: false},
			{Node: "n", GPU: 2, At: 9 * s, Healthy: false},
			{Node: "n", GPU: 3, At: 0, Healthy: false},
			{Node: "n", GPU: 3, At: 5 * s, Healthy: true},
		},
		Pods: []Pod{
			bound("old-fault", 1, 0, 10*s, "n", 1),   // unhealthy for 10s: counts
			bound("fresh-fault", 1, 0, 10*s, "n", 2), // unhealthy for 1s: within the grace
			bound("recovered", 1, 0, 10*s, "n", 3),
		},
		End: 10 * s,
	}
	if r := Compute(in); r.UnhealthyAllocations != 1 {
		t.Fatalf("UnhealthyAllocations = %d, want 1", r.UnhealthyAllocations)
	}
}

// TestAnyN: for the stock scheduler a pod gets the lowest free healthy GPUs of its node.
func TestAnyN(t *testing.T) {
	in := Input{
		AnyN:   true,
		Nodes:  []Node{twoIsland("n")},
		Health: []HealthChange{{Node: "n", GPU: 0, At: 0, Healthy: false}},
		Pods: []Pod{
			bound("a", 2, 0, 1*s, "n"), // 1,2: island a
			bound("b", 4, 0, 2*s, "n"), // 3,4,5,6: two islands though b had a free fit
			bound("c", 1, 0, 3*s, "n"), // 7
		},
		End: 3 * s,
	}
	r := Compute(in)
	if r.IslandPossible != 2 || r.IslandLocal != 1 || r.Contiguous != 2 || r.DoubleBookedGPUs != 0 || r.UnhealthyAllocations != 0 {
		t.Fatalf("got possible %d local %d contiguous %d double %d unhealthy %d, want 2 1 2 0 0",
			r.IslandPossible, r.IslandLocal, r.Contiguous, r.DoubleBookedGPUs, r.UnhealthyAllocations)
	}
	if h := r.Map[0].Holders; h[1] != "a" || h[6] != "b" || h[7] != "c" || h[0] != "" {
		t.Fatalf("holders %v", h)
	}
}

// TestStockPick: with a device-plugin model the stock pod gets the GPUs it picks among the
// free healthy ones; when it declines, or too few GPUs are healthy, the lowest free ones.
func TestStockPick(t *testing.T) {
	var asked [][]int
	in := Input{
		AnyN:   true,
		Nodes:  []Node{twoIsland("n")},
		Health: []HealthChange{{Node: "n", GPU: 0, At: 0, Healthy: false}},
		StockPick: func(n Node, available []int, size int) []int {
			asked = append(asked, append([]int(nil), available...))
			if size == 3 {
				return nil // declines: the lowest free healthy ones
			}
			return available[len(available)-size:] // the highest IDs
		},
		Pods: []Pod{
			bound("a", 2, 0, 1*s, "n"), // picks 6,7
			bound("b", 3, 0, 2*s, "n"), // declined: 1,2,3
			bound("c", 3, 0, 3*s, "n"), // 4,5 healthy + 0 unhealthy: too few healthy, fallback
		},
		End: 3 * s,
	}
	r := Compute(in)
	h := r.Map[0].Holders
	if h[6] != "a" || h[7] != "a" || h[1] != "b" || h[3] != "b" || h[4] != "c" || h[0] != "c" {
		t.Fatalf("holders %v", h)
	}
	// Compute replays twice (the figures, then the map at the peak): two offers each time.
	if len(asked) != 4 || len(asked[0]) != 7 || asked[0][0] != 1 || len(asked[1]) != 5 {
		t.Fatalf("StockPick was offered %v, want the 7 healthy GPUs then the 5 left, twice", asked)
	}
}

func TestFragmentation(t *testing.T) {
	in := Input{
		Nodes: []Node{{Name: "n", Islands: []string{"a", "a", "b", "b"}}},
		Pods:  []Pod{bound("a", 1, 0, 1*s, "n", 0)},
		End:   2 * s, SampleEvery: s,
	}
	r := Compute(in)
	// Samples at 0, 1s, 2s: all free (0 fragmentation), then 3 free of which 2 in whole islands.
	if len(r.Samples) != 3 {
		t.Fatalf("%d samples, want 3", len(r.Samples))
	}
	if f := r.Samples[2].Fragmentation; math.Abs(f-1.0/3.0) > 1e-9 {
		t.Fatalf("fragmentation %v, want 1/3", f)
	}
	if u := r.Samples[0].Utilization; u != 0 {
		t.Fatalf("utilization at 0 = %v, want 0", u)
	}
}

func TestWrites(t *testing.T) {
	before := `# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 100
`
	after := `apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 30
apiserver_request_total{code="201",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="POST",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 150
apiserver_request_total{code="200",component="apiserver",dry_run="",group="gpu.scheduling",resource="gpuclaims",scope="resource",subresource="status",verb="PUT",version="v1"} 20
apiserver_request_total{code="200",component="apiserver",dry_run="",group="gpu.scheduling",resource="gpunodestatuses",scope="resource",subresource="status",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
`
	b, err := ParseRequestTotals(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseRequestTotals(after)
	if err != nil {
		t.Fatal(err)
	}
	rows, sched, agent, total := Writes(a.Sub(b), LivenessWrites{})
	// 20 bindings + 42 lease creates + 20 claim status; node lease PUTs and the agent apart.
	if sched != 82 || agent != 7 || total != 139 || len(rows) != 5 {
		t.Fatalf("scheduling %v agent %v total %v rows %d (%v)", sched, agent, total, len(rows), rows)
	}
	// The DRA run: claim creates (from templates), allocation and release status writes,
	// finalizer updates and kube-controller-manager's applies of the pod's claim status count;
	// claim deletes are releases and the slices are the agent's.
	dra, err := ParseRequestTotals(`apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 10
apiserver_request_total{code="201",component="apiserver",dry_run="",group="resource.k8s.io",resource="resourceclaims",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.k8s.io",resource="resourceclaims",scope="resource",subresource="status",verb="PUT",version="v1"} 20
apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.k8s.io",resource="resourceclaims",scope="resource",subresource="",verb="PATCH",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.k8s.io",resource="resourceclaims",scope="resource",subresource="",verb="DELETE",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.k8s.io",resource="resourceslices",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="APPLY",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 20
`)
	if err != nil {
		t.Fatal(err)
	}
	if _, sched, agent, total := Writes(dra, LivenessWrites{}); sched != 60 || agent != 3 || total != 93 {
		t.Fatalf("DRA: scheduling %v agent %v total %v, want 60, 3, 93 (kwok's pod status PATCHes apart)", sched, agent, total)
	}
	// The agents' liveness lease writes (2 creates, 30 renewals) leave the lease rows for rows of
	// their own: not scheduling writes (the 42 lease POSTs held 2 of them), not kwok's renewals.
	rows, sched, agent, total = Writes(a.Sub(b), LivenessWrites{Creates: 2, Renewals: 30})
	if sched != 80 || agent != 7 || total != 139 {
		t.Fatalf("with liveness: scheduling %v agent %v total %v, want 80, 7, 139", sched, agent, total)
	}
	got := map[string]float64{}
	for _, r := range rows {
		got[r.Key.String()] = r.Count
		if r.Scheduling && r.Key.Subresource == livenessSubresource {
			t.Errorf("row %s counted as scheduling", r.Key)
		}
	}
	for k, want := range map[string]float64{
		"POST leases.coordination.k8s.io/(agent liveness)": 2, "PUT leases.coordination.k8s.io/(agent liveness)": 30,
		"POST leases.coordination.k8s.io": 40, "PUT leases.coordination.k8s.io": 20,
	} {
		if got[k] != want {
			t.Errorf("row %s = %v, want %v (rows %v)", k, got[k], want, got)
		}
	}
	if _, err := ParseRequestTotals(`apiserver_request_total{verb="POST} 1`); err == nil {
		t.Fatal("malformed labels parsed")
	}
}

// Gangs: a whole gang whose members bound 2 s apart, a gang bound at once, a gang split by a
// scheduler that places members one by one (one member never bound), and single pods.
func TestGangFigures(t *testing.T) {
	in := Input{End: 60 * s, Pods: []Pod{
		{Name: "a0", GPUs: 4, Gang: "a", Created: 0, Bound: 1 * s, BoundOK: true},
		{Name: "a1", GPUs: 4, Gang: "a", Created: 0, Bound: 3 * s, BoundOK: true}, // a0 held 4 GPUs idle for 2 s
		{Name: "b0", GPUs: 8, Gang: "b", Created: 0, Bound: 5 * s, BoundOK: true},
		{Name: "b1", GPUs: 8, Gang: "b", Created: 0, Bound: 5 * s, BoundOK: true},
		{Name: "c0", GPUs: 2, Gang: "c", Created: 0, Bound: 10 * s, BoundOK: true}, // waits until the end: 50 s x 2 GPUs
		{Name: "c1", GPUs: 2, Gang: "c", Created: 0},
		{Name: "solo", GPUs: 1, Created: 0, Bound: 1 * s, BoundOK: true},
	}}
	r := Compute(in)
	if r.Gangs != 3 || r.GangsWhole != 2 || r.GangsPartial != 1 {
		t.Errorf("gangs %d whole %d partial %d, want 3, 2, 1", r.Gangs, r.GangsWhole, r.GangsPartial)
	}
	if want := 2*4 + 50*2.0; r.GangIdleGPUSeconds != want {
		t.Errorf("idle GPU-seconds %v, want %v", r.GangIdleGPUSeconds, want)
	}
	if r.GangBindSpreadP50 != 0 || r.GangBindSpreadP99 != 2*s {
		t.Errorf("bind spread p50 %v p99 %v, want 0 and 2s", r.GangBindSpreadP50, r.GangBindSpreadP99)
	}
	if none := Compute(Input{End: s, Pods: []Pod{{Name: "x", GPUs: 1, Bound: s, BoundOK: true}}}); none.Gangs != 0 || none.GangIdleGPUSeconds != 0 {
		t.Errorf("a workload without gangs: %+v", none)
	}
}

// TestOvercommittedGPUs: Shared pods whose shares fit a GPU are not counted; one that takes the
// compute past 100 %, or the memory past the GPU's, is, once per GPU of it; a pod that stated
// no share reserves nothing.
func TestOvercommittedGPUs(t *testing.T) {
	share := func(p Pod, mem int64, compute int) Pod {
		p.Shared, p.ShareMemoryMiB, p.ShareComputePercent = true, mem, compute
		return p
	}
	n := pairs("n")
	n.MemoryMiB = []int64{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}
	in := Input{
		Nodes: []Node{n},
		Pods: []Pod{
			share(bound("a", 1, 0, 1*s, "n", 0), 400, 60),
			share(bound("b", 1, 0, 2*s, "n", 0), 600, 40), // exactly full: fine
			share(bound("c", 1, 0, 3*s, "n", 1), 0, 70),   // GPU 1
			share(bound("d", 1, 0, 4*s, "n", 1), 0, 0),    // states nothing
			share(bound("e", 1, 0, 5*s, "n", 2), 900, 10), // GPU 2
			share(ended(bound("f", 1, 0, 5*s, "n", 2), 6*s), 200, 10),
			share(bound("g", 1, 0, 7*s, "n", 2), 100, 10), // after f left: fine
		},
		End: 10 * s,
	}
	if r := Compute(in); r.OvercommittedGPUs != 1 {
		t.Fatalf("overcommitted %d, want 1 (f: memory past GPU 2's)", r.OvercommittedGPUs)
	}
	in.Pods = append(in.Pods, share(bound("h", 2, 0, 8*s, "n", 1, 3), 0, 31))
	if r := Compute(in); r.OvercommittedGPUs != 2 || r.DoubleBookedGPUs != 0 {
		t.Fatalf("overcommitted %d double-booked %d, want 2 (h: compute past GPU 1's) and 0", r.OvercommittedGPUs, r.DoubleBookedGPUs)
	}
}
