package gpuclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// TestDryRunAgreesWithFilter schedules a pod with the plugin, then asks both the plugin's
// Filter and ledger.DryRun (over the objects the scheduling left in the API) about a second claim.
func TestDryRunAgreesWithFilter(t *testing.T) {
	a100 := map[string]string{"gpu-type": "a100"}
	spec := apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 3},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600},
		Selector: &apiv1.NodeSelector{MatchLabels: a100}}
	nodes := []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", a100), ledgertest.Node("c", a100)}
	e := newTestEnv(t, nodes, ledgertest.Claim("first", spec), ledgertest.Claim("second", spec))
	if _, st, _ := e.schedule(t, ledgertest.Pod("p", "first")); st != nil {
		t.Fatalf("first pod: %v", st)
	}

	ctx := t.Context()
	snap := &ledger.Snapshot{}
	for _, n := range nodes {
		snap.Nodes = append(snap.Nodes, *n)
	}
	statuses, _ := e.gpu.GpuV1().GpuNodeStatuses().List(ctx, metav1.ListOptions{})
	snap.Statuses = statuses.Items
	leases, _ := e.kube.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	snap.Leases = leases.Items
	if len(snap.Leases) != 3 {
		t.Fatalf("the first pod left %d leases, want 3", len(snap.Leases))
	}
	pod := ledgertest.Pod("q", "second")
	claim, _ := e.gpu.GpuV1().GpuClaims("ns").Get(ctx, "second", metav1.GetOptions{})
	got := ledger.DryRun(claim, pod, snap, e.clock.Now(), 10*time.Minute)

	cs := framework.NewCycleState()
	_, _ = e.p.PreFilter(ctx, cs, pod, nil)
	fits := 0
	for _, v := range got.Nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(nodes[map[string]int{"a": 0, "b": 1, "c": 2}[v.Node]])
		st := e.p.Filter(ctx, cs, pod, ni)
		if st.Message() != v.Reason {
			t.Errorf("node %s: Filter says %q, ledger.DryRun %q", v.Node, st.Message(), v.Reason)
		}
		if v.Reason == "" {
			fits++
		}
	}
	if fits != 1 || len(got.Nodes) != 3 {
		t.Errorf("ledger.DryRun: %d of %d nodes fit, want 1 of 3: %+v", fits, len(got.Nodes), got.Nodes)
	}
}
