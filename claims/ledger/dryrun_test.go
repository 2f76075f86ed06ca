package ledger

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func gpuLease(node string, id int, holder string) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-scheduler", Name: "gpu-" + node + "-" + strconv.Itoa(id),
			Labels: map[string]string{apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: strconv.Itoa(id)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

func TestDryRunSummary(t *testing.T) {
	now := time.Now()
	a100 := map[string]string{"gpu-type": "a100"}
	snap := &Snapshot{
		Nodes: []v1.Node{*ledgertest.Node("no-status", a100), *ledgertest.Node("stale", a100), *ledgertest.Node("held", a100), *ledgertest.Node("free", a100),
			*ledgertest.Node("free2", a100), *ledgertest.Node("other", nil)},
		Statuses: []apiv1.GpuNodeStatus{*ledgertest.SeedStatus("stale", now.Add(-time.Hour)), *ledgertest.SeedStatus("held", now),
			*ledgertest.SeedStatus("free", now), *ledgertest.SeedStatus("free2", now), *ledgertest.SeedStatus("other", now)},
		// held: GPUs 1 and 2 by a lease, 0 by a bound pod whose lease was lost.
		Leases: []coordinationv1.Lease{gpuLease("held", 1, "uid-x"), gpuLease("held", 2, "uid-x")},
		Pods: []v1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "y", UID: "uid-y",
			Annotations: map[string]string{apiv1.AnnotationAllocated: "held:0"}}, Spec: v1.PodSpec{NodeName: "held"}}},
	}
	claim := ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600},
		Selector: &apiv1.NodeSelector{MatchLabels: a100}})
	got := DryRun(claim, ledgertest.Pod("p", "c"), snap, now, 10*time.Minute)
	if got.Blocked != "" {
		t.Fatalf("Blocked = %q", got.Blocked)
	}
	want := []ReasonCount{
		{"fits", 2},
		{"needs 2 healthy free GPUs; node has 1 (1 not healthy, 3 held, 3 below 600 GB/s)", 1},
		{ReasonSelector, 1},
		{ReasonNoStatus, 1},
		{ReasonStale, 1},
	}
	if s := got.Summary(); !reflect.DeepEqual(s, want) {
		t.Errorf("Summary =\n%v\nwant\n%v\nverdicts %+v", s, want, got.Nodes)
	}
	for _, v := range got.Nodes {
		if v.Node == "free" && !reflect.DeepEqual(v.GPUs, []int{0, 1}) {
			t.Errorf("free: would land on %v, want [0 1]", v.GPUs)
		}
	}

	// Claim-level refusals come before any node is judged.
	bad := claim.DeepCopy()
	bad.Spec.Devices.Count = 0
	if got := DryRun(bad, nil, snap, now, time.Minute); got.Blocked == "" || len(got.Nodes) != 0 {
		t.Errorf("invalid claim: %+v", got)
	}
	taken := claim.DeepCopy()
	taken.Status.PodUID, taken.Status.PodName = "uid-y", "y"
	if got := DryRun(taken, ledgertest.Pod("p", "c"), snap, now, time.Minute); got.Blocked != "GpuClaim ns/c is held by pod ns/y; one claim serves one pod at a time" {
		t.Errorf("claim held by another live pod: Blocked = %q", got.Blocked)
	}
}

// A pod covered by its scheduling map is judged as PreFilter judges it: only the entry's node,
// only the entry's GPUs; a malformed map or a missing node blocks it.
func TestDryRunFollowsTheSchedulingMap(t *testing.T) {
	now := time.Now()
	snap := &Snapshot{
		Nodes:    []v1.Node{*ledgertest.Node("a", nil), *ledgertest.Node("b", nil)},
		Statuses: []apiv1.GpuNodeStatus{*ledgertest.SeedStatus("a", now), *ledgertest.SeedStatus("b", now)},
		Leases:   []coordinationv1.Lease{gpuLease("b", 4, "uid-x")},
	}
	claim := ledgertest.Claim("c0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}})
	got := DryRun(claim, ledgertest.IndexedPod(0), snap, now, time.Minute) // 0=b:4,6; GPU 4 is leased
	want := []NodeVerdict{{Node: "a", Reason: ReasonNotPinned}, {Node: "b", Reason: ReasonNoFit, Detail: "GPU 4 is held by another pod"}}
	if got.Blocked != "" || !reflect.DeepEqual(got.Nodes, want) {
		t.Fatalf("held entry: %+v, want %+v", got, want)
	}
	snap.Leases = nil
	if got := DryRun(claim, ledgertest.IndexedPod(0), snap, now, time.Minute); !reflect.DeepEqual(got.Nodes[1].GPUs, []int{4, 6}) {
		t.Fatalf("free entry: %+v, want node b on GPUs 4,6", got.Nodes)
	}
	if got := DryRun(ledgertest.Claim("c5", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}), ledgertest.IndexedPod(5), snap, now, time.Minute); got.Blocked != "gpu-scheduling-map entry 5=gone:0,1 for pod ns/train-5-x7k9p (index 5): node gone does not exist" {
		t.Fatalf("missing node: Blocked = %q", got.Blocked)
	}
	bad := ledgertest.IndexedPod(0)
	bad.Annotations[apiv1.AnnotationSchedulingMap] = "0=b"
	if got := DryRun(claim, bad, snap, now, time.Minute); got.Blocked == "" || len(got.Nodes) != 0 {
		t.Fatalf("malformed map: %+v", got)
	}
}
