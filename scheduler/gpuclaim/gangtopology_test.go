package gpuclaim

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func topoClaim(name, gang string, size int32, mode apiv1.TopologyMode, level string) *apiv1.GpuClaim {
	c := gangClaim(name, gang, 4, ptr.To(size))
	c.Spec.GangTopology = &apiv1.GangTopology{Level: level, Mode: mode}
	return c
}

// TestGangTopology: a gang with gangTopology is placed inside one domain of its level, the
// fullest that fits it; its later members follow the first; Required waits naming the largest
// free block; Preferred falls back to any node; a level the scheduler does not know is refused.
func TestGangTopology(t *testing.T) {
	// Every node has 7 healthy GPUs: one 4-GPU member per node. dom1 has room for 2 members,
	// dom2 for 3 (21 free GPUs), dom3 for 4 (28 free GPUs); node x is in no domain.
	var nodes []*v1.Node
	for dom, n := range map[string]int{"dom1": 2, "dom2": 3, "dom3": 4} {
		for i := range n {
			nodes = append(nodes, ledgertest.Node(fmt.Sprintf("%s-%d", dom, i), map[string]string{apiv1.LabelGPUClique: dom}))
		}
	}
	nodes = append(nodes, ledgertest.Node("x", nil))
	var objs []runtime.Object
	for i := range 3 {
		objs = append(objs, topoClaim(fmt.Sprintf("req%d", i), "req", 3, apiv1.TopologyRequired, apiv1.LabelGPUClique))
	}
	for i := range 5 {
		objs = append(objs, topoClaim(fmt.Sprintf("big%d", i), "big", 5, apiv1.TopologyRequired, apiv1.LabelGPUClique))
		objs = append(objs, topoClaim(fmt.Sprintf("pref%d", i), "pref", 5, apiv1.TopologyPreferred, apiv1.LabelGPUClique))
	}
	objs = append(objs, topoClaim("rack0", "rack", 1, apiv1.TopologyRequired, "example.com/rack"))
	e := newTestEnv(t, nodes, objs...)
	pods := map[string]*v1.Pod{}
	for _, o := range objs {
		c := o.(*apiv1.GpuClaim)
		pods[c.Name] = ledgertest.Pod("p-"+c.Name, c.Name)
		e.createPod(t, pods[c.Name])
	}
	offered := func(name string) []string {
		t.Helper()
		res, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pods[name], nil)
		if !st.IsSuccess() {
			t.Fatalf("PreFilter of %s: %v", name, st)
		}
		out := res.NodeNames.UnsortedList()
		slices.Sort(out)
		return out
	}

	// The gang of 3 fits dom2 and dom3; dom2 is the fuller.
	if got, want := offered("req0"), []string{"dom2-0", "dom2-1", "dom2-2"}; !slices.Equal(got, want) {
		t.Fatalf("first member offered %v, want %v", got, want)
	}
	cs := framework.NewCycleState()
	_, _ = e.p.PreFilter(t.Context(), cs, pods["req0"], nil)
	ni := framework.NewNodeInfo()
	ni.SetNode(nodes[slices.IndexFunc(nodes, func(n *v1.Node) bool { return n.Name == "dom3-0" })])
	wantStatus(t, "Filter outside the domain", e.p.Filter(t.Context(), cs, pods["req0"], ni), fwk.UnschedulableAndUnresolvable, reasonOutsideDomain)

	// Once the first member holds GPUs in dom2, the others follow it, even where dom3 would do.
	node, st, _ := e.reserve(t, pods["req0"])
	if !st.IsSuccess() || node[:4] != "dom2" {
		t.Fatalf("first member reserved on %q: %v", node, st)
	}
	if got := offered("req1"); len(got) != 2 || slices.Contains(got, node) || got[0][:4] != "dom2" {
		t.Fatalf("second member offered %v, want the two other nodes of dom2", got)
	}

	// Five members fit no domain: Required waits and names the largest free block.
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), pods["big0"], nil)
	wantStatus(t, "Required gang larger than any domain", st, fwk.Unschedulable,
		"gang ns/big (gangTopology nvidia.com/gpu.clique, Required): no domain of nvidia.com/gpu.clique has room for all 5 pods at once; the largest free block is 28 GPUs on 4 nodes in nvidia.com/gpu.clique=dom3")
	// Preferred takes any node then.
	if got := offered("pref0"); len(got) < 5 || !slices.Contains(got, "x") {
		t.Fatalf("Preferred gang larger than any domain offered %v, want nodes of every domain and x", got)
	}
	// A level the scheduler was not configured with.
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), pods["rack0"], nil)
	wantStatus(t, "unknown level", st, fwk.UnschedulableAndUnresolvable, `spec.gangTopology.level "example.com/rack" is not one of the scheduler's topologyLevels [nvidia.com/gpu.clique]`)
}

// TestPendingNamesTheSelector: a claim whose selector rules out every node with room says so,
// with the count, rather than only that no node has the GPUs.
func TestPendingNamesTheSelector(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", map[string]string{"pool": "a100"}), ledgertest.Node("b", map[string]string{"pool": "a100"})},
		ledgertest.Claim("h100", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 4}, Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"pool": "h100", "zone": "z1"}}}),
		ledgertest.Claim("any", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 8}}))
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), ledgertest.Pod("p", "h100"), nil)
	wantStatus(t, "selector matching no node", st, fwk.Unschedulable,
		"no node has 4 healthy free GPUs for GpuClaim ns/h100; 2 nodes with room do not match its selector pool=h100,zone=z1")
	// A claim no node has room for, with no selector, says only that.
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), ledgertest.Pod("q", "any"), nil)
	if st.Message() != "no node has 8 healthy free GPUs for GpuClaim ns/any" {
		t.Fatalf("PreFilter without a selector: %q", st.Message())
	}
}
