package metrics

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// refused is a pod seen at created and found unschedulable at once, bound at at.
func refused(name string, gpus int, created, at time.Duration, node string, ids ...int) Pod {
	p := bound(name, gpus, created, at, node, ids...)
	p.Seen, p.SeenOK = created, true
	p.Unschedulable, p.UnschedulableOK = created, true
	return p
}

// waitOf returns the Wait the replay noted for pod, failing the test without one.
func waitOf(t *testing.T, r Result, pod string) Wait {
	t.Helper()
	for _, w := range r.Waits.Avoidable {
		if w.Pod == pod {
			return w
		}
	}
	t.Fatalf("no avoidable wait listed for %s: %+v", pod, r.Waits)
	return Wait{}
}

// TestWaitAvoidable: a fit frees at 1 s and the pod is bound at 1.2 s: 200 ms of its wait were
// avoidable, the rest (from 0.1 s) was for capacity.
func TestWaitAvoidable(t *testing.T) {
	in := Input{
		Nodes: []Node{twoIsland("n")},
		Pods: []Pod{
			ended(bound("big", 8, 0, 0, "n", 0, 1, 2, 3, 4, 5, 6, 7), 1*s),
			refused("w", 4, 100*ms, 1200*ms, "n", 0, 1, 2, 3),
		},
		End: 5 * s,
	}
	r := Compute(in)
	w := waitOf(t, r, "w")
	if !w.FitOK || w.FirstFit != 1*s || w.Avoidable != 200*ms || w.FitFree != 200*ms || w.Seen != 100*ms || w.FitNode != "n" {
		t.Errorf("wait = %+v, want seen 100ms, first fit 1s, avoidable and fit free 200ms", w)
	}
	f := r.Waits
	if f.Waited != 1 || f.WithFreeFit != 1 || f.ForCapacity != 1 || f.AvoidableMax != 200*ms || f.AvoidableP50 != 200*ms {
		t.Errorf("figures = %+v, want 1 waited, 1 with a free fit, 1 for capacity, avoidable 200ms", f)
	}
	// "w" waited for capacity at first; only "big" (bound at once) is left for the p99.
	if f.LatencyP99NoCapacityWait != 0 {
		t.Errorf("latency p99 without capacity waits = %v, want 0 (big's)", f.LatencyP99NoCapacityWait)
	}
}

// TestWaitCapacityOnly: nothing fits until the binding itself, so no wait was avoidable.
func TestWaitCapacityOnly(t *testing.T) {
	in := Input{
		Nodes: []Node{twoIsland("n")},
		Pods: []Pod{
			ended(bound("big", 8, 0, 0, "n", 0, 1, 2, 3, 4, 5, 6, 7), 1200*ms),
			refused("w", 4, 100*ms, 1200*ms, "n", 0, 1, 2, 3),
			// Never freed before "late" was bound (the replay counts it double-booked): no fit ever.
			bound("hold", 8, 1900*ms, 2*s, "n", 0, 1, 2, 3, 4, 5, 6, 7),
			refused("late", 1, 2100*ms, 3*s, "n", 7),
		},
		End: 5 * s,
	}
	r := Compute(in)
	f := r.Waits
	if f.Waited != 2 || f.WithFreeFit != 0 || f.ForCapacity != 2 || f.AvoidableMax != 0 || len(f.Avoidable) != 0 {
		t.Errorf("figures = %+v, want 2 waited for capacity and nothing avoidable", f)
	}
}

// TestWaitFitTakenByAnother: a fit frees and another pod takes it 50 ms later; the pod waits on
// until 3 s. Its wait since the first fit is 2 s, but a fit sat free for only 50 ms.
func TestWaitFitTakenByAnother(t *testing.T) {
	in := Input{
		Nodes: []Node{twoIsland("n")},
		Pods: []Pod{
			ended(bound("big", 8, 0, 0, "n", 0, 1, 2, 3, 4, 5, 6, 7), 1*s),
			bound("other", 8, 900*ms, 1050*ms, "n", 0, 1, 2, 3, 4, 5, 6, 7),
			refused("w", 8, 100*ms, 3*s, "n", 0, 1, 2, 3, 4, 5, 6, 7),
		},
		End: 5 * s,
	}
	in.Pods[1] = ended(in.Pods[1], 3*s)
	r := Compute(in)
	f := r.Waits
	if f.WithFreeFit != 0 || f.AvoidableMax != 2*s {
		t.Errorf("figures = %+v, want avoidable max 2s and no pod with a fit free > %v", f, WaitTolerance)
	}
}

// TestWaitFits: which free GPUs make a placement for a claim.
func TestWaitFits(t *testing.T) {
	// Island a: GPUs 0-3 at 450 GB/s, island b: 4-7 at 100 GB/s; 0, 1, 4 and 5 are held, so two
	// GPUs are free in each island.
	node := twoIsland("n")
	node.BandwidthGBps = []int{450, 450, 450, 450, 100, 100, 100, 100}
	node.Labels = map[string]string{"gpu-type": "h100"}
	claim := func(gpus int, topo string, bw int, sel map[string]string) Pod {
		return Pod{Name: "c", GPUs: gpus, Topology: topo, MinBandwidthGBps: bw, Selector: sel}
	}
	for _, tc := range []struct {
		name string
		pod  Pod
		anyN bool
		want bool
	}{
		{"Required 4 GPUs, 4 free split across islands: no fit", claim(4, "Required", 0, nil), false, false},
		{"Preferred 4 GPUs on the same GPUs: fits (islands are a wish)", claim(4, "Preferred", 0, nil), false, true},
		{"Required 2 GPUs: one island holds them", claim(2, "Required", 0, nil), false, true},
		{"Required 2 GPUs at 300 GB/s: island a", claim(2, "Required", 300, nil), false, true},
		{"Required 2 GPUs at 500 GB/s: no island that fast", claim(2, "Required", 500, nil), false, false},
		{"Preferred 2 GPUs at 500 GB/s: the floor is a wish", claim(2, "Preferred", 500, nil), false, true},
		{"Required 4 GPUs through nvidia.com/gpu: any 4", claim(4, "Required", 0, nil), true, true},
		{"5 GPUs: only 4 free", claim(5, "", 0, nil), false, false},
		{"selector matches", claim(1, "", 0, map[string]string{"gpu-type": "h100"}), false, true},
		{"selector does not match", claim(1, "", 0, map[string]string{"gpu-type": "a100"}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Nodes: []Node{node}, AnyN: tc.anyN, Pods: []Pod{
				bound("h0", 1, 0, 0, "n", 0), bound("h1", 1, 0, 0, "n", 1),
				bound("h4", 1, 0, 0, "n", 4), bound("h5", 1, 0, 0, "n", 5), tc.pod,
			}}
			rp := newReplay(in, nil)
			rp.run(-1, nil)
			if got := rp.fits(rp.nodes["n"], &in.Pods[4]); got != tc.want {
				t.Errorf("fits = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWaitFitsShared: a Shared claim may join Shared holders but not an Exclusive one.
func TestWaitFitsShared(t *testing.T) {
	sharedHolder := bound("s", 1, 0, 0, "n", 0)
	sharedHolder.Shared = true
	in := Input{Nodes: []Node{{Name: "n", Islands: []string{"a", "a"}}}, Pods: []Pod{
		sharedHolder, bound("x", 1, 0, 0, "n", 1),
		{Name: "shared", GPUs: 1, Shared: true}, {Name: "excl", GPUs: 1},
	}}
	rp := newReplay(in, nil)
	rp.run(-1, nil)
	if !rp.fits(rp.nodes["n"], &in.Pods[2]) {
		t.Error("a Shared claim does not fit beside a Shared holder")
	}
	if rp.fits(rp.nodes["n"], &in.Pods[3]) {
		t.Error("an Exclusive claim fits on GPUs that are all held")
	}
}

// TestWaitedRule: a pod waited when it was seen unschedulable or was bound later than the
// median latency plus the tolerance; the others were bound at once and are not followed.
func TestWaitedRule(t *testing.T) {
	in := Input{Nodes: []Node{twoIsland("n")}, End: 5 * s}
	for i := range 9 {
		in.Pods = append(in.Pods, ended(bound("quick", 1, 0, 10*ms, "n", i%8), 20*ms))
	}
	in.Pods = append(in.Pods,
		bound("slow", 1, 0, 500*ms, "n", 0),                                  // 490 ms past the median
		bound("bit-slow", 1, 100*ms, 150*ms, "n", 1),                         // within the tolerance
		refused("refused", 1, 200*ms, 250*ms, "n", 2),                        // unschedulable, then bound
		Pod{Name: "never", GPUs: 1, Unschedulable: 0, UnschedulableOK: true}, // never bound
	)
	r := Compute(in)
	if r.Waits.Waited != 2 {
		t.Errorf("waited = %d, want 2 (slow and refused)", r.Waits.Waited)
	}
	// Both had GPUs free all along: "slow" for 500 ms, "refused" for 50 ms.
	if r.Waits.WithFreeFit != 1 || r.Waits.ForCapacity != 0 || waitOf(t, r, "slow").Avoidable != 500*ms {
		t.Errorf("figures = %+v, want slow's 500 ms avoidable", r.Waits)
	}
	if r.Waits.LatencyP99NoCapacityWait != r.LatencyP99 {
		t.Errorf("latency p99 without capacity waits %v, want the run's %v (no pod waited for capacity)", r.Waits.LatencyP99NoCapacityWait, r.LatencyP99)
	}
}
