//go:build integration

package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
)

// expected is what every node of a topology must publish.
type expected struct {
	healthy int32
	islands []string // per GPU
	gbps    []int32  // per GPU, 0 for the unhealthy ones
	product string
	nvlink  string
}

func same[T any](n int, v T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

var g0, g1, g2, g3 = "nvlink-group-0", "nvlink-group-1", "nvlink-group-2", "nvlink-group-3"

var want = map[string]expected{
	mock.DGXA100:         {8, same(8, g0), same(8, int32(600)), "NVIDIA-A100-SXM4-80GB", "true"},
	mock.DGXH100:         {8, same(8, g0), same(8, int32(900)), "NVIDIA-H100-80GB-HBM3", "true"},
	mock.PCIeNVLinkPairs: {8, []string{g0, g0, g1, g1, g2, g2, g3, g3}, same(8, int32(600)), "NVIDIA-A100-80GB-PCIe", "true"},
	mock.TwoIsland:       {7, []string{g0, g0, g0, g0, g1, g1, g1, g1}, []int32{600, 600, 600, 600, 64, 64, 64, 0}, "NVIDIA-A100-SXM4-40GB", "true"},
	mock.PCIeOnly:        {8, append(same(4, g0), same(4, g1)...), same(8, int32(64)), "NVIDIA-L40S", "false"},
}

// TestFleetOnRealControlPlane runs fleet mode for 100 kwok nodes of mixed topologies against a
// real kube-apiserver: every node gets a correct GpuNodeStatus and labels, nothing is rewritten
// while nothing changes, and a fault flips exactly the GPU it hit.
func TestFleetOnRealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 10*time.Minute)
	defer cancel()
	kube, gpus, c := controlPlane(ctx, t, "agent-fleet", 500, 1000)

	const perPool = 20
	nodeTopology := map[string]string{}
	for _, topo := range []string{mock.DGXA100, mock.DGXH100, mock.PCIeNVLinkPairs, mock.TwoIsland, mock.PCIeOnly} {
		pool := cluster.NodePool{Name: topo, Count: perPool, GPUsPerNode: 8, Topology: topo}
		if err := c.CreateNodePool(ctx, pool); err != nil {
			t.Fatal(err)
		}
		for i := range perPool {
			nodeTopology[cluster.NodeName(topo, i)] = topo
		}
	}

	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus,
		// No telemetry: the quiet check below wants no write at all while nothing changes.
		Agent:    agent.Config{ProbeInterval: 200 * time.Millisecond, HeartbeatInterval: time.Hour, TelemetryInterval: -1},
		WriteQPS: 300, WriteBurst: 600,
	})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFleet := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- f.Run(fctx) }()
	defer func() {
		stopFleet()
		if err := <-done; err != nil {
			t.Errorf("fleet: %v", err)
		}
	}()

	began := time.Now()
	statuses := func() map[string]*apiv1.GpuNodeStatus {
		list, err := gpus.GpuV1().GpuNodeStatuses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing statuses: %v", err)
			return nil
		}
		out := map[string]*apiv1.GpuNodeStatus{}
		for i := range list.Items {
			out[list.Items[i].Name] = &list.Items[i]
		}
		return out
	}
	var all map[string]*apiv1.GpuNodeStatus
	poll(t, ctx, "a correct status for every node", func() error {
		all = statuses()
		for node, topo := range nodeTopology {
			if err := check(all[node], want[topo]); err != nil {
				return fmt.Errorf("node %s (%s): %w", node, topo, err)
			}
		}
		return nil
	})
	t.Logf("%d nodes published in %s", len(nodeTopology), time.Since(began).Round(time.Millisecond))

	// Labels are patched right after the status is written: wait for them too.
	poll(t, ctx, "GPU labels on every node", func() error {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelTopology})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if err := checkNode(&n, all[n.Name], want[nodeTopology[n.Name]]); err != nil {
				return err
			}
		}
		return nil
	})

	// Every agent renewed its liveness lease at once on start: one lease per node, the node's
	// own, owned by the node, never labelled as a GPU lease.
	poll(t, ctx, "a liveness lease for every node", func() error {
		list, err := kube.CoordinationV1().Leases("gpu-scheduler").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelAgentLiveness})
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, l := range list.Items {
			node := ptr.Deref(l.Spec.HolderIdentity, "")
			if name, _ := apiv1.AgentLeaseName(node); name != l.Name || l.Spec.RenewTime == nil || len(l.OwnerReferences) != 1 || l.Labels[apiv1.LabelLeaseNode] != "" {
				return fmt.Errorf("lease %s: holder %q, renewed %v, owners %v, labels %v", l.Name, node, l.Spec.RenewTime, l.OwnerReferences, l.Labels)
			}
			seen[node] = true
		}
		if len(seen) != len(nodeTopology) {
			return fmt.Errorf("%d liveness leases for %d nodes", len(seen), len(nodeTopology))
		}
		return nil
	})

	// Nothing changes for a while: no status is rewritten (the refresh is 30 minutes away).
	before := map[string]string{}
	for name, st := range all {
		before[name] = st.ResourceVersion
	}
	deadline := time.Now().Add(2 * time.Second)
	poll(t, ctx, "two quiet seconds", func() error {
		for name, st := range statuses() {
			if st.ResourceVersion != before[name] {
				t.Errorf("status of %s rewritten without a change", name)
				before[name] = st.ResourceVersion
			}
		}
		if time.Now().Before(deadline) {
			return fmt.Errorf("still watching")
		}
		return nil
	})

	// Xid 79 on one GPU of one node: exactly that GPU flips, then recovers.
	target, gpu := cluster.NodeName(mock.DGXH100, 7), 5
	poll(t, ctx, "the target's events watched", func() error {
		if !f.Watched(target) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err := f.InjectFault(target, gpu, mock.Fault{Kind: mock.FaultXid, Xid: mock.XidFallenOffBus}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the faulted GPU Unhealthy", func() error {
		st := statuses()[target]
		if st == nil || st.Status.Devices[gpu].Health != apiv1.Unhealthy {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	for name, st := range statuses() {
		w := want[nodeTopology[name]]
		for _, d := range st.Status.Devices {
			wantHealthy := w.gbps[d.ID] != 0 && !(name == target && int(d.ID) == gpu)
			if (d.Health == apiv1.Healthy) != wantHealthy {
				t.Errorf("node %s GPU %d is %s (%s) after a fault on %s GPU %d", name, d.ID, d.Health, d.Reason, target, gpu)
			}
		}
	}
	if err := f.InjectFault(target, gpu, mock.Fault{Kind: mock.FaultRecover}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the GPU Healthy again", func() error {
		return check(statuses()[target], want[mock.DGXH100])
	})
}

func poll(t *testing.T, ctx context.Context, what string, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: never happened: %v", what, last)
	}
}

func check(st *apiv1.GpuNodeStatus, w expected) error {
	if st == nil {
		return fmt.Errorf("no status")
	}
	if st.Status.Total != 8 || len(st.Status.Devices) != 8 || st.Status.Healthy != w.healthy || st.Status.LastHeartbeatTime.IsZero() {
		return fmt.Errorf("total %d healthy %d devices %d, want 8 %d 8", st.Status.Total, st.Status.Healthy, len(st.Status.Devices), w.healthy)
	}
	for i, d := range st.Status.Devices {
		if int(d.ID) != i || d.Island != w.islands[i] || d.BandwidthGBps != w.gbps[i] {
			return fmt.Errorf("GPU %d: id %d island %q %d GB/s, want %q %d GB/s", i, d.ID, d.Island, d.BandwidthGBps, w.islands[i], w.gbps[i])
		}
	}
	return nil
}

func checkNode(n *corev1.Node, st *apiv1.GpuNodeStatus, w expected) error {
	if st == nil {
		return fmt.Errorf("node %s has no status", n.Name)
	}
	if len(st.OwnerReferences) != 1 || st.OwnerReferences[0].UID != n.UID {
		return fmt.Errorf("status of %s is not owned by its node: %+v", n.Name, st.OwnerReferences)
	}
	for k, v := range map[string]string{apiv1.LabelGPUProduct: w.product, apiv1.LabelGPUCount: "8", apiv1.LabelNVLink: w.nvlink} {
		if n.Labels[k] != v {
			return fmt.Errorf("node %s label %s=%q, want %q", n.Name, k, n.Labels[k], v)
		}
	}
	return nil
}
