package ledger

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

func migClaimReq(t *testing.T, count int32, profile string) allocator.Request {
	t.Helper()
	req, err := RequestFor(ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: count, Exclusivity: apiv1.MIG, MigProfile: profile}}))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestRequestForMIG(t *testing.T) {
	req, err := RequestFor(ledgertest.Claim("c", apiv1.GpuClaimSpec{
		Devices:  apiv1.DeviceRequest{Count: 2, Exclusivity: apiv1.MIG, MigProfile: "1g.10gb"},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600},
	}))
	if err != nil || req.Exclusivity != allocator.MIG || req.MIGProfile != "1g.10gb" || req.Count != 2 || req.Topology != allocator.Ignore {
		t.Fatalf("RequestFor = %+v, %v", req, err)
	}
	for _, tc := range []struct {
		d    apiv1.DeviceRequest
		want string
	}{
		{apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.MIG}, "spec.devices.migProfile is empty"},
		{apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.MIG, MigProfile: "big"}, `spec.devices.migProfile "big" is no MIG profile`},
		{apiv1.DeviceRequest{Count: 1, MigProfile: "1g.10gb"}, "spec.devices.migProfile is only for exclusivity MIG"},
		{apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.MIG, MigProfile: "1g.10gb", Policy: apiv1.PolicyPreferIDs, PreferIDs: []int32{1}}, "preferIds names whole GPUs"},
	} {
		if _, err := RequestFor(ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: tc.d})); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.d, err, tc.want)
		}
	}
}

func TestMIGReserveHoldsDevices(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(ledgertest.MIGStatus("a", now))
	req := migClaimReq(t, 1, "1g.10gb")
	// GPU 2 has the fewest free devices: its 1g.10gb devices are taken first.
	var got []allocator.MIGSlot
	for _, uid := range []string{"p1", "p2", "p3"} {
		res, err := l.Reserve(types.UID(uid), "ns/"+uid, "a", req)
		if err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
		got = append(got, res.MIG...)
		if len(res.IDs) != 1 || res.IDs[0] != res.MIG[0].GPU {
			t.Fatalf("%s: IDs %v for %v", uid, res.IDs, res.MIG)
		}
	}
	if want := []allocator.MIGSlot{{GPU: 2, Slot: 4}, {GPU: 2, Slot: 5}, {GPU: 0, Slot: 0}}; !slices.Equal(got, want) {
		t.Fatalf("reserved %v, want %v", got, want)
	}
	if node, ids := l.HoldsOf("p1"); node != "a" || !slices.Equal(ids, []int{2}) {
		t.Fatalf("HoldsOf = %s %v", node, ids)
	}
	// A whole-GPU lease's release names GPUs by ID: it leaves MIG holds alone.
	l.Remove("p1", "a", []int{2}, FromReservation)
	if len(l.MIGHoldsOf("p1", "a")) != 1 {
		t.Fatal("Remove by GPU ID dropped a MIG hold")
	}
	l.Unreserve("p1", "ns/p1")
	if res, err := l.Reserve("p4", "ns/p4", "a", req); err != nil || !slices.Equal(res.MIG, []allocator.MIGSlot{{GPU: 2, Slot: 4}}) {
		t.Fatalf("after unreserve: %v, %v", res.MIG, err)
	}
}

func TestMIGHoldSources(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(ledgertest.MIGStatus("a", now))
	req := migClaimReq(t, 2, "3g.40gb")
	oldest := now.Add(-time.Minute)
	if !l.FitsOn("a", &req, oldest) {
		t.Fatal("two free 3g.40gb not offered")
	}
	// Another scheduler's lease holds one; this pod's annotation the other.
	l.AddMIG("other", "a", []allocator.MIGSlot{{GPU: 1, Slot: 0}}, FromLease)
	l.AddMIG("mine", "a", []allocator.MIGSlot{{GPU: 1, Slot: 4}}, FromPod)
	l.AddMIG("mine", "a", []allocator.MIGSlot{{GPU: 1, Slot: 4}}, FromLease)
	req.Count = 1
	if l.FitsOn("a", &req, oldest) {
		t.Fatal("held 3g.40gb devices offered")
	}
	if _, err := l.Reserve("p", "ns/p", "a", req); err == nil || !strings.Contains(err.Error(), "2 held") {
		t.Fatalf("reserve of held devices: %v", err)
	}
	// The lease goes, the pod's annotation still holds it.
	l.RemoveMIG("mine", "a", []allocator.MIGSlot{{GPU: 1, Slot: 4}}, FromLease)
	if l.FitsOn("a", &req, oldest) {
		t.Fatal("a device still held by its pod's annotation offered")
	}
	l.Forget("mine")
	l.RemoveMIG("other", "a", []allocator.MIGSlot{{GPU: 1, Slot: 0}}, FromLease)
	req.Count = 2
	if !l.FitsOn("a", &req, oldest) {
		t.Fatal("released devices not offered again")
	}
}

func TestMIGUnhealthyDeviceNeverOffered(t *testing.T) {
	l := New()
	now := time.Now()
	s := ledgertest.MIGStatus("a", now)
	s.Status.Devices[1].MIG.Devices[0].Health = apiv1.Unhealthy
	l.SetStatus(s)
	req := migClaimReq(t, 2, "3g.40gb")
	if l.FitsOn("a", &req, now.Add(-time.Minute)) {
		t.Fatal("an unhealthy 3g.40gb counted free")
	}
	req.Count = 1
	if res, err := l.Reserve("p", "ns/p", "a", req); err != nil || !slices.Equal(res.MIG, []allocator.MIGSlot{{GPU: 1, Slot: 4}}) {
		t.Fatalf("reserve = %v, %v; want the healthy 1:4", res.MIG, err)
	}
}

func TestMIGCandidates(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(ledgertest.MIGStatus("mig", now))
	l.SetStatus(ledgertest.SeedStatus("whole", now))
	req := migClaimReq(t, 1, "2g.20gb")
	byFit, _ := l.Candidates(&req, now.Add(-time.Minute), func(string) bool { return true })
	defer ReleaseCandidates(byFit)
	var names []string
	for _, tier := range byFit {
		for _, c := range tier {
			names = append(names, c.Name)
		}
	}
	if !slices.Equal(names, []string{"mig"}) {
		t.Fatalf("candidates %v, want mig", names)
	}
	// A whole-GPU request is not offered the MIG-mode GPUs.
	whole := allocator.Request{Count: 5}
	if l.FitsOn("mig", &whole, now.Add(-time.Minute)) {
		t.Fatal("5 whole GPUs offered on a node with 4 whole")
	}
}

// The dry run reads MIG leases and MIG pods' annotations as the scheduler does, names the
// devices a fitting node would give, and says what the nodes have free when none fits.
func TestDryRunMIG(t *testing.T) {
	now := time.Now()
	holder := "uid-x"
	lease := coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-scheduler", Name: "gpu-a-1-mig0",
			Labels: map[string]string{apiv1.LabelLeaseNode: "a", apiv1.LabelLeaseGPU: "1", apiv1.LabelLeaseMIGSlot: "0"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	pod := v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "y", UID: "uid-y",
		Annotations: map[string]string{apiv1.AnnotationAllocated: "a:1", apiv1.AnnotationMIGDevices: "1:4"}}, Spec: v1.PodSpec{NodeName: "a"}}
	snap := &Snapshot{
		Nodes:    []v1.Node{*ledgertest.Node("a", nil), *ledgertest.Node("b", nil)},
		Statuses: []apiv1.GpuNodeStatus{*ledgertest.MIGStatus("a", now), *ledgertest.MIGStatus("b", now)},
		Leases:   []coordinationv1.Lease{lease},
		Pods:     []v1.Pod{pod},
	}
	claim := func(count int32, profile string) *apiv1.GpuClaim {
		return ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: count, Exclusivity: apiv1.MIG, MigProfile: profile}})
	}
	r := DryRun(claim(1, "3g.40gb"), nil, snap, now, DefaultFreshness)
	if r.NoMIG != "" || r.Nodes[0].Reason != ReasonNoFit || !strings.Contains(r.Nodes[0].Detail, "needs 1 free MIG devices of profile 3g.40gb; node has 0 (2 held)") ||
		r.Nodes[1].Reason != "" || !slices.Equal(r.Nodes[1].MIGDevices, []string{"1:0"}) {
		t.Fatalf("3g.40gb: %+v", r)
	}
	r = DryRun(claim(3, "3g.40gb"), nil, snap, now, DefaultFreshness)
	want := "no node has 3 free MIG devices of profile 3g.40gb; 2 nodes have 1g.10gb free, 2 nodes have 1g.20gb free, 2 nodes have 2g.20gb free, 1 node has 3g.40gb free (fewer than 3) (the MIG layout is set by the operator: docs/sharing.md)"
	if r.NoMIG != want {
		t.Fatalf("NoMIG = %q\nwant   %q", r.NoMIG, want)
	}
}

// A scheduling map entry names whole GPUs: a MIG claim is told it cannot be pinned, rather
// than failing on a request that names GPUs and a profile at once.
func TestPinRefusesMIG(t *testing.T) {
	req := migClaimReq(t, 1, "1g.10gb")
	pn := &Pin{Index: 0, Alloc: apiv1.Allocation{Node: "a", IDs: []int{2}}}
	if err := pn.Apply(&req, "ns/c"); err == nil || !strings.Contains(err.Error(), "asks for MIG devices (exclusivity MIG), which a map entry cannot name") {
		t.Fatalf("Apply = %v", err)
	}
}
