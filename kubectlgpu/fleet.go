// Package kubectlgpu implements the kubectl gpu plugin: read-only views of the GPU fleet built
// from GpuNodeStatus objects, GPU leases and GpuClaims, computed with the scheduler's own
// conversion (ledger.NodeFromStatus) so the CLI and the scheduler agree on what is free.
package kubectlgpu

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// GPUView is one GPU as the operator sees it.
type GPUView struct {
	ID            int    `json:"id"`
	Island        string `json:"island,omitempty"`
	Product       string `json:"product,omitempty"`
	Health        string `json:"health"`
	Reason        string `json:"reason,omitempty"`
	BandwidthGBps int    `json:"bandwidthGBps,omitempty"`
	// Holders are namespace/name of the pods holding the GPU's lease.
	Holders []string `json:"holders,omitempty"`
	Free    bool     `json:"free"`
	// Since is when the agent saw Health change to its current value; nil when the agent did
	// not record it.
	Since *metav1.Time `json:"since,omitempty"`
	// Recoveries counts the GPU's returns from Unhealthy to Healthy.
	Recoveries int32 `json:"recoveries,omitempty"`
	// Sharers, SharedMemoryMiB and SharedComputePercent are a Shared GPU's holders and the
	// memory and compute their shares reserve (its lease's gpu.scheduling/shares), of MemoryMiB
	// and 100 %.
	Sharers              int   `json:"sharers,omitempty"`
	SharedMemoryMiB      int64 `json:"sharedMemoryMiB,omitempty"`
	SharedComputePercent int32 `json:"sharedComputePercent,omitempty"`
	MemoryMiB            int64 `json:"memoryMiB,omitempty"`
	// MIG is set for a GPU in MIG mode: its MIG devices, free (healthy, unused) and in all.
	MIG *MIGView `json:"mig,omitempty"`
}

// MIGView counts a MIG-mode GPU's MIG devices.
type MIGView struct {
	Free  int `json:"free"`
	Total int `json:"total"`
}

// NodeView is one node's GPUs.
type NodeView struct {
	Name string `json:"name"`
	Pool string `json:"pool,omitempty"`
	// Heartbeat is when the agent last wrote or confirmed the node's GpuNodeStatus; Renewed is
	// when it last renewed its liveness lease (nil: none). The scheduler judges the node by the
	// later of the two; an unchanged status is rewritten only every 30 minutes.
	Heartbeat *metav1.Time `json:"heartbeat,omitempty"`
	Renewed   *metav1.Time `json:"livenessRenewed,omitempty"`
	GPUs      []GPUView    `json:"gpus"`
}

// Fleet is the state every command summarises.
type Fleet struct {
	Nodes  []NodeView
	Claims []apiv1.GpuClaim
	// Notes say what was left out because the user may not read it (access.go).
	Notes Notes
	// NodesHidden is set when the GpuNodeStatuses could not be read: Nodes is empty for that
	// reason, not because the cluster has no GPU node.
	NodesHidden bool
}

// Load reads GpuNodeStatus objects, GPU leases, nodes and claims (claims in namespace ns, or
// all namespaces when ns is ""). Cluster-wide reads the user may not make leave their part of
// the fleet out, with a note (Fleet.Notes); the claims of ns are read or the load fails.
func Load(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, ns string) (*Fleet, error) {
	f := &Fleet{}
	var statuses []apiv1.GpuNodeStatus
	if err := listCustom(ctx, dc, "gpunodestatuses", "", &statuses); err != nil {
		if !f.Notes.denied(err, "GPU nodes are not shown", permStatuses) {
			return nil, err
		}
		f.NodesHidden = true
	}
	var claims []apiv1.GpuClaim
	if err := listCustom(ctx, dc, "gpuclaims", ns, &claims); err != nil {
		return nil, err
	}
	var leases []coordinationv1.Lease
	if l, err := kc.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode}); err == nil {
		leases = l.Items
	} else if !f.Notes.denied(err, "the pods holding each GPU are not shown", permLeases) {
		return nil, fmt.Errorf("listing GPU leases: %w", err)
	}
	if l, err := kc.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelAgentLiveness}); err == nil {
		leases = append(leases, l.Items...)
	} else if !f.Notes.denied(err, "the agents' liveness is not shown", permLeases) {
		return nil, fmt.Errorf("listing the agents' liveness leases: %w", err)
	}
	pools := map[string]string{}
	if nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			pools[n.Name] = n.Labels[apiv1.LabelTopology]
		}
	} else if !f.Notes.denied(err, "node pools are not shown", permNodes) {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	if f.NodesHidden {
		// The notes about leases and nodes say nothing more when no GPU node is shown.
		f.Notes = f.Notes[:1]
	}
	f.Claims = claims
	f.Nodes = Build(statuses, leases, pools)
	sort.Slice(f.Claims, func(i, j int) bool {
		a, b := f.Claims[i], f.Claims[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return f, nil
}

// listCustom lists one of our custom resources and converts the items into out.
func listCustom[T any](ctx context.Context, dc dynamic.Interface, resource, ns string, out *[]T) error {
	list, err := dc.Resource(apiv1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing %s: %w", resource, err)
	}
	for i := range list.Items {
		var v T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &v); err != nil {
			return fmt.Errorf("decoding %s %s: %w", resource, list.Items[i].GetName(), err)
		}
		*out = append(*out, v)
	}
	return nil
}

// Build joins GpuNodeStatus objects with leases: a GPU is held when a lease names it, free when
// it is healthy and unheld (the allocator's rule, applied to the allocator's own node model).
// The agents' liveness leases among leases give each node's Renewed.
func Build(statuses []apiv1.GpuNodeStatus, leases []coordinationv1.Lease, pools map[string]string) []NodeView {
	holders := map[string]map[int][]string{}
	type sum struct {
		sharers int
		mem     int64
		compute int32
	}
	shares := map[string]map[int]sum{}
	renewed := map[string]*metav1.Time{}
	for _, l := range leases {
		if claims.IsLiveness(&l) {
			// Read as the scheduler reads it: a lease held by another node than its name says
			// keeps no node alive.
			if node, at, err := claims.ParseLiveness(&l); err == nil && node != "" && l.Spec.RenewTime != nil {
				if prev := renewed[node]; prev == nil || at.After(prev.Time) {
					renewed[node] = &metav1.Time{Time: at}
				}
			}
			continue
		}
		ref, ok := claims.ParseGPULease(&l)
		if !ok || len(ref.Holders) == 0 {
			continue
		}
		node, id := ref.Node, ref.GPU
		who := l.Labels[apiv1.LabelPodNamespace] + "/" + l.Labels[apiv1.LabelPodName]
		if l.Labels[apiv1.LabelPodName] == "" {
			who = *l.Spec.HolderIdentity
		}
		if holders[node] == nil {
			holders[node] = map[int][]string{}
		}
		holders[node][id] = append(holders[node][id], who)
		if ref.Shared && !ref.MIG {
			if shares[node] == nil {
				shares[node] = map[int]sum{}
			}
			s := shares[node][id]
			s.sharers += len(ref.Holders)
			for _, h := range ref.Holders {
				s.mem += ref.Shares[h].MemoryMiB
				s.compute += ref.Shares[h].ComputePercent
			}
			shares[node][id] = s
		}
	}
	var out []NodeView
	for i := range statuses {
		gns := &statuses[i]
		an := ledger.NodeFromStatus(gns)
		byID := map[int32]apiv1.Device{}
		for _, d := range gns.Status.Devices {
			byID[d.ID] = d
		}
		nv := NodeView{Name: an.Name, Pool: pools[an.Name], Renewed: renewed[an.Name]}
		if hb := gns.Status.LastHeartbeatTime; !hb.IsZero() {
			nv.Heartbeat = &hb
		}
		for _, g := range an.GPUs {
			d := byID[int32(g.ID)]
			h := holders[an.Name][g.ID]
			sort.Strings(h)
			s := shares[an.Name][g.ID]
			gv := GPUView{
				ID: g.ID, Island: g.Island, Product: d.Product, Health: g.Health.String(), Reason: d.Reason,
				BandwidthGBps: g.BandwidthGBps, Holders: h,
				Free:  g.Health == allocator.Healthy && len(h) == 0 && !g.MIGMode,
				Since: d.LastTransitionTime, Recoveries: d.RecoveryCount,
				Sharers: s.sharers, SharedMemoryMiB: s.mem, SharedComputePercent: s.compute, MemoryMiB: d.MemoryMiB,
			}
			if g.MIGMode {
				gv.MIG = &MIGView{Total: len(d.MIG.Devices)}
				for _, m := range d.MIG.Devices {
					if m.Health == apiv1.Healthy && len(m.InUseBy) == 0 && g.Health == allocator.Healthy {
						gv.MIG.Free++
					}
				}
			}
			nv.GPUs = append(nv.GPUs, gv)
		}
		out = append(out, nv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// islandKey groups GPUs like the allocator: an empty island is an island of its own.
func islandKey(g GPUView) string {
	if g.Island == "" {
		return "#" + strconv.Itoa(g.ID)
	}
	return g.Island
}

// Summary is the fleet at a glance, one row per model and pool.
type Summary struct {
	Rows          []SummaryRow   `json:"rows"`
	ClaimsByPhase map[string]int `json:"claimsByPhase"`
	// Fragmented is the number of free GPUs in islands where some GPU is held.
	Fragmented int `json:"fragmentedFreeGPUs"`
}

// SummaryRow counts the GPUs of one model in one node pool.
type SummaryRow struct {
	Model     string `json:"model"`
	Pool      string `json:"pool"`
	Nodes     int    `json:"nodes"`
	Total     int    `json:"total"`
	Allocated int    `json:"allocated"`
	Free      int    `json:"free"`
	Unhealthy int    `json:"unhealthy"`
}

// Summarise computes the status view.
func Summarise(f *Fleet) Summary {
	s := Summary{ClaimsByPhase: map[string]int{}}
	rows := map[[2]string]*SummaryRow{}
	for _, n := range f.Nodes {
		seen := map[[2]string]bool{}
		islands := map[string][2]int{} // free, held
		for _, g := range n.GPUs {
			model := g.Product
			if model == "" {
				model = "unknown"
			}
			pool := n.Pool
			if pool == "" {
				pool = "-"
			}
			k := [2]string{model, pool}
			r := rows[k]
			if r == nil {
				r = &SummaryRow{Model: model, Pool: pool}
				rows[k] = r
			}
			if !seen[k] {
				seen[k] = true
				r.Nodes++
			}
			r.Total++
			c := islands[islandKey(g)]
			switch {
			case len(g.Holders) > 0:
				r.Allocated++
				c[1]++
			case g.Free:
				r.Free++
				c[0]++
			}
			if g.Health == allocator.Unhealthy.String() {
				r.Unhealthy++
			}
			islands[islandKey(g)] = c
		}
		for _, c := range islands {
			if c[1] > 0 {
				s.Fragmented += c[0]
			}
		}
	}
	for _, r := range rows {
		s.Rows = append(s.Rows, *r)
	}
	sort.Slice(s.Rows, func(i, j int) bool {
		if s.Rows[i].Model != s.Rows[j].Model {
			return s.Rows[i].Model < s.Rows[j].Model
		}
		return s.Rows[i].Pool < s.Rows[j].Pool
	})
	for _, c := range f.Claims {
		p := string(c.Status.Phase)
		if p == "" {
			p = string(apiv1.ClaimPending)
		}
		s.ClaimsByPhase[p]++
	}
	return s
}

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}
