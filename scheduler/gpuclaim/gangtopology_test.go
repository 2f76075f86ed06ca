package gpuclaim

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	// The rest of the gang is planned on the other two nodes of dom2, which other pods keep off
	// (a pod outside any gang, here, and any other gang's members).
	wantStatus(t, "Filter of another pod on a node held for the gang", e.filter(t, pods["pref0"], "dom2-1"), fwk.Unschedulable, reasonHeldForGang)

	// Five members fit no domain: Required waits, names the largest free block, and keeps the
	// domain nearest to fitting it (dom3: 28 free GPUs, 20 wanted) for itself.
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), pods["big0"], nil)
	wantStatus(t, "Required gang larger than any domain", st, fwk.Unschedulable,
		"gang ns/big (gangTopology nvidia.com/gpu.clique, Required): no domain of nvidia.com/gpu.clique has room for all 5 pods at once; the largest free block is 28 GPUs on 4 nodes in nvidia.com/gpu.clique=dom3; nvidia.com/gpu.clique=dom3 is kept for it")
	// Preferred takes any node then, but those held: dom2's planned for req, dom3 kept for big
	// (dom2-0 has 3 GPUs left, too few for a member).
	if got, want := offered("pref0"), []string{"dom1-0", "dom1-1", "x"}; !slices.Equal(got, want) {
		t.Fatalf("Preferred gang larger than any domain offered %v, want %v", got, want)
	}
	// The gang placed lets its nodes go; a gang whose members are deleted lets its domain go.
	e.p.allowGang(t.Context(), "ns/req")
	if err := e.gpu.GpuV1().GpuClaims("ns").Delete(t.Context(), "big4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool { _, _, held := e.p.holds.held("ns/big"); return !held })
	if got := offered("pref0"); len(got) != 9 {
		t.Fatalf("after the holds are let go, the Preferred gang was offered %v, want every node with room", got)
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

// filter runs PreFilter and Filter for pod on one node of the env.
func (e *testEnv) filter(t *testing.T, pod *v1.Pod, node string) *fwk.Status {
	t.Helper()
	cs := framework.NewCycleState()
	if _, st := e.p.PreFilter(t.Context(), cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter of %s: %v", pod.Name, st)
	}
	i := slices.IndexFunc(e.nodes, func(n *v1.Node) bool { return n.Name == node })
	if i < 0 {
		t.Fatalf("no node %s", node)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(e.nodes[i])
	return e.p.Filter(t.Context(), cs, pod, ni)
}
