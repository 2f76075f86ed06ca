package ledger

import (
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Snapshot is the cluster state the plugin's informers would hold, read once by a client that
// wants to know what the scheduler would decide (kubectl gpu explain).
type Snapshot struct {
	Nodes    []v1.Node
	Statuses []apiv1.GpuNodeStatus
	// Leases are the GPU leases and the agents' liveness leases (apiv1.LabelAgentLiveness).
	Leases []coordinationv1.Lease
	// Pods are the pods whose allocation annotations count as holds (bound, not finished).
	Pods []v1.Pod
	// Claims tell which of those pods share their GPUs.
	Claims []apiv1.GpuClaim
}

// NodeVerdict is the dry run's answer for one node.
type NodeVerdict struct {
	Node string `json:"node"`
	// Reason is Filter's reason for refusing the node; empty when the claim fits.
	Reason string `json:"reason,omitempty"`
	// Detail is the allocator's explanation when it turned the node down.
	Detail string `json:"detail,omitempty"`
	// GPUs is where the claim would land when it fits.
	GPUs []int `json:"gpus,omitempty"`
	// MIGDevices are the MIG devices a MIG claim would get when it fits, "<gpu>:<slot>".
	MIGDevices []string `json:"migDevices,omitempty"`
}

// DryRunResult is what the plugin would decide for a claim now.
type DryRunResult struct {
	// Blocked is the reason PreFilter refuses the claim before looking at any node.
	Blocked string `json:"blocked,omitempty"`
	// Gang is set for a member of a gang: the scheduler also waits for every member.
	Gang  string        `json:"gang,omitempty"`
	Nodes []NodeVerdict `json:"nodes,omitempty"`
	// NoMIG says, for a MIG claim no node can serve, that none can and what the nodes have
	// free instead, as the scheduler's Pending reason does.
	NoMIG string `json:"noMIG,omitempty"`
}

// ReasonCount is how many nodes were refused (or fit) for one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Nodes  int    `json:"nodes"`
}

// DryRun runs the plugin's claim checks and Filter (Judge, on a ledger fed as the
// informers feed it) over snap for claim, on behalf of pod (nil for a claim alone). freshness
// is the plugin's statusFreshnessSeconds. Nothing is written anywhere.
func DryRun(claim *apiv1.GpuClaim, pod *v1.Pod, snap *Snapshot, now time.Time, freshness time.Duration) DryRunResult {
	var out DryRunResult
	out.Gang = GangKey(claim)
	var self types.UID
	if pod != nil {
		self = pod.UID
	}
	prep, refused := Prepare(claim, pod, func(c *apiv1.GpuClaim) (string, bool) {
		return c.Status.PodName, heldByOther(c, self, snap.Pods)
	})
	req, pn := prep.Req, prep.Pin
	switch {
	case refused != nil:
		out.Blocked = refused.Message
	default:
		l := ledgerOf(snap)
		oldest := now.Add(-freshness)
		rk := RequestKey(&req)
		fits := false
		for i := range snap.Nodes {
			n := &snap.Nodes[i]
			v := NodeVerdict{Node: n.Name}
			if pn != nil && n.Name != pn.Alloc.Node {
				v.Reason = ReasonNotPinned
			} else if !SelectorMatches(claim, n) {
				v.Reason = ReasonSelector
			} else if res, why := Judge(l, n.Name, self, rk, req, oldest); why != nil {
				v.Reason = why.Reason
				if why.Unfit != nil {
					v.Detail = why.Unfit.Reason
				}
			} else {
				v.GPUs = res.IDs
				for _, m := range MIGDeviceRefs(res.MIG) {
					v.MIGDevices = append(v.MIGDevices, m.String())
				}
				fits = true
			}
			out.Nodes = append(out.Nodes, v)
		}
		if !fits && req.Exclusivity == allocator.MIG {
			selected := map[string]bool{}
			for i := range snap.Nodes {
				selected[snap.Nodes[i].Name] = SelectorMatches(claim, &snap.Nodes[i]) && (pn == nil || snap.Nodes[i].Name == pn.Alloc.Node)
			}
			out.NoMIG = fmt.Sprintf("no node has %d free MIG devices of profile %s", req.Count, req.MIGProfile) +
				l.MIGElsewhere(&req, oldest, func(node string) bool { return selected[node] })
		}
		sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
		if pn != nil && !hasNode(snap.Nodes, pn.Alloc.Node) {
			out.Blocked = pn.Message(pod, fmt.Sprintf("node %s does not exist", pn.Alloc.Node))
		}
	}
	return out
}

// Summary counts the nodes per reason, the allocator's detail standing for Filter's generic
// "not enough" reason; nodes that fit count under "fits". Largest groups first.
func (r DryRunResult) Summary() []ReasonCount {
	counts := map[string]int{}
	for _, v := range r.Nodes {
		switch {
		case v.Reason == "":
			counts["fits"]++
		case v.Detail != "":
			counts[v.Detail]++
		default:
			counts[v.Reason]++
		}
	}
	out := make([]ReasonCount, 0, len(counts))
	for reason, n := range counts {
		out = append(out, ReasonCount{Reason: reason, Nodes: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Nodes != out[j].Nodes {
			return out[i].Nodes > out[j].Nodes
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// heldByOther mirrors PreFilter's claimHolder from the snapshot: the claim's recorded holder is
// another live pod.
func heldByOther(claim *apiv1.GpuClaim, self types.UID, pods []v1.Pod) bool {
	uid := types.UID(claim.Status.PodUID)
	if uid == "" || uid == self {
		return false
	}
	for i := range pods {
		if pods[i].UID == uid && !claims.PodFinished(&pods[i]) {
			return true
		}
	}
	return false
}

// ledgerOf feeds a ledger the way the plugin's informer handlers do: node statuses, lease
// holders and the allocations of bound pods.
func ledgerOf(snap *Snapshot) *Ledger {
	l := New()
	for i := range snap.Statuses {
		l.SetStatus(&snap.Statuses[i])
	}
	for i := range snap.Leases {
		if _, live := snap.Leases[i].Labels[apiv1.LabelAgentLiveness]; live {
			if node, renewed, err := claims.ParseLiveness(&snap.Leases[i]); err == nil && node != "" {
				l.SetRenewed(node, renewed)
			}
			continue
		}
		if ref, ok := claims.ParseGPULease(&snap.Leases[i]); ok {
			for _, uid := range ref.Holders {
				l.AddLeaseHold(uid, ref)
			}
		} else if node, id, ok := ForeignRef(&snap.Leases[i]); ok {
			l.Add(ForeignHolder(snap.Leases[i].Name), node, []int{id}, false, FromLease) // foreign.go
		}
	}
	shared := map[string]bool{}
	for _, c := range snap.Claims {
		shared[claims.Key(c.Namespace, c.Name)] = c.Spec.Devices.Exclusivity == apiv1.Shared
	}
	for i := range snap.Pods {
		pod := &snap.Pods[i]
		if claims.PodFinished(pod) {
			continue
		}
		if alloc, ok := BoundAllocation(pod); ok {
			l.AddPodHold(pod, alloc, shared[claims.Key(pod.Namespace, claimNameOf(pod))])
		}
	}
	return l
}

// BoundAllocation is the allocation a bound pod carries, when it is on the pod's node: such a
// pod holds those GPUs even if its leases were lost.
func BoundAllocation(pod *v1.Pod) (apiv1.Allocation, bool) {
	if pod.Spec.NodeName == "" {
		return apiv1.Allocation{}, false
	}
	a, ok := pod.Annotations[apiv1.AnnotationAllocated]
	if !ok {
		return apiv1.Allocation{}, false
	}
	alloc, err := apiv1.ParseAllocation(a)
	if err != nil || alloc.Node != pod.Spec.NodeName {
		return apiv1.Allocation{}, false
	}
	return alloc, true
}

func hasNode(nodes []v1.Node, name string) bool {
	for i := range nodes {
		if nodes[i].Name == name {
			return true
		}
	}
	return false
}

// ForeignHolder is the ledger's holder for a foreign lease.
func ForeignHolder(name string) types.UID { return types.UID("lease:" + name) }

// ForeignRef reads a lease that locks a GPU without being one of the scheduler's locks: its
// name is a GPU lease name, and claims.ParseGPULease does not accept it.
func ForeignRef(l *coordinationv1.Lease) (node string, id int, ok bool) {
	if _, ours := claims.ParseGPULease(l); ours {
		return "", 0, false
	}
	return apiv1.ParseLeaseName(l.Name)
}

// claimNameOf is the claim a pod names; empty when none.
func claimNameOf(pod *v1.Pod) string {
	name, _ := claims.Name(pod)
	return name
}
