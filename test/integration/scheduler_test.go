//go:build integration

package integration

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

func onPool(pool string) *apiv1.NodeSelector {
	return &apiv1.NodeSelector{MatchLabels: map[string]string{cluster.LabelPool: pool}}
}

func TestPlacementAndLifecycle(t *testing.T) {
	ns := namespace(t, "placement")
	createClaim(t, ns, "island", apiv1.GpuClaimSpec{
		Devices:  apiv1.DeviceRequest{Count: 4, Policy: apiv1.PolicyContiguous},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyPreferred, MinBandwidthGBps: 600},
		Selector: onPool("two-island"),
	})
	createClaim(t, ns, "spread", apiv1.GpuClaimSpec{
		Devices:  apiv1.DeviceRequest{Count: 2, Policy: apiv1.PolicySpread},
		Selector: onPool("two-island"),
	})
	createClaim(t, ns, "pinned", apiv1.GpuClaimSpec{
		Devices:  apiv1.DeviceRequest{Count: 2, Policy: apiv1.PolicyPreferIDs, PreferIDs: []int32{2, 3}},
		Selector: &apiv1.NodeSelector{MatchLabels: map[string]string{"gpu-type": "a100"}},
	})
	createClaim(t, ns, "too-big", apiv1.GpuClaimSpec{
		Devices:  apiv1.DeviceRequest{Count: 5},
		Topology: &apiv1.TopologyRequirement{Mode: apiv1.TopologyRequired, MinBandwidthGBps: 600},
		Selector: onPool("two-island"),
	})
	island := createPod(t, ns, "island", "island")
	createPod(t, ns, "spread", "spread")
	pinned := createPod(t, ns, "pinned", "pinned")
	createPod(t, ns, "too-big", "too-big")
	createPod(t, ns, "orphan", "no-such-claim")

	// Preferred 600 GB/s: the four GPUs of the fast island.
	p := boundPod(t, ns, "island")
	if a := allocation(t, p); !reflect.DeepEqual(a.IDs, []int{0, 1, 2, 3}) || !strings.HasPrefix(a.Node, "two-island-") {
		t.Fatalf("island claim got %v", a)
	}
	st := claimStatus(t, ns, "island", "Bound", func(s apiv1.GpuClaimStatus) bool { return s.Phase == apiv1.ClaimBound })
	if st.NodeName != p.Spec.NodeName || st.PodUID != string(island.UID) || st.Allocated != p.Annotations[apiv1.AnnotationAllocated] || len(st.GpuIDs) != 4 {
		t.Fatalf("claim status %+v disagrees with pod %s", st, p.Annotations)
	}
	if got := podLeases(t, string(island.UID)); len(got) != 4 {
		t.Fatalf("pod island holds leases %v, want 4", got)
	}

	// Spread: one GPU from each island.
	if a := allocation(t, boundPod(t, ns, "spread")); len(a.IDs) != 2 || a.IDs[0] >= 4 || a.IDs[1] < 4 {
		t.Fatalf("spread claim got %v, want one GPU per island", a)
	}
	// preferIds on the selected a100 nodes.
	pp := boundPod(t, ns, "pinned")
	if a := allocation(t, pp); !reflect.DeepEqual(a.IDs, []int{2, 3}) || !strings.HasPrefix(a.Node, "dgx-") {
		t.Fatalf("pinned claim got %v", a)
	}

	// Required 5 GPUs at 600 GB/s fits no island of a two-island node: Pending with the reason.
	claimStatus(t, ns, "too-big", "Pending with the reason", func(s apiv1.GpuClaimStatus) bool {
		return s.Phase == apiv1.ClaimPending && strings.Contains(s.Message, "no node has 5 healthy free GPUs in one island with ≥ 600 GB/s")
	})
	eventually(t, time.Minute, "missing claim reported on the pod", func() (bool, string) {
		pod, err := env.kube.CoreV1().Pods(ns).Get(t.Context(), "orphan", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == "PodScheduled" && strings.Contains(c.Message, "GpuClaim placement/no-such-claim named by pod orphan does not exist") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", pod.Status.Conditions)
	})
	checkNoDoubleBooking(t, ns)

	// A second pod naming a held claim waits, with a message naming the holder.
	createPod(t, ns, "island-2", "island")
	eventually(t, time.Minute, "second pod of a held claim refused", func() (bool, string) {
		pod, err := env.kube.CoreV1().Pods(ns).Get(t.Context(), "island-2", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == "PodScheduled" && strings.Contains(c.Message, "GpuClaim placement/island is held by pod placement/island") {
				return pod.Spec.NodeName == "", ""
			}
		}
		return false, fmt.Sprintf("node %q conditions %+v", pod.Spec.NodeName, pod.Status.Conditions)
	})

	// Deleting the holder frees its leases; the claim goes to the waiting pod.
	deletePod(t, ns, "island", false)
	eventually(t, time.Minute, "leases of deleted pod released", func() (bool, string) {
		l := podLeases(t, string(island.UID))
		return len(l) == 0, fmt.Sprint(l)
	})
	p2 := boundPod(t, ns, "island-2")
	claimStatus(t, ns, "island", "Bound to island-2", func(s apiv1.GpuClaimStatus) bool {
		return s.Phase == apiv1.ClaimBound && s.PodName == "island-2" && s.PodUID == string(p2.UID)
	})

	// Force-deleting frees the leases too and returns the claim to Pending.
	deletePod(t, ns, "pinned", true)
	eventually(t, time.Minute, "leases of force-deleted pod released", func() (bool, string) {
		l := podLeases(t, string(pinned.UID))
		return len(l) == 0, fmt.Sprint(l)
	})
	st = claimStatus(t, ns, "pinned", "back to Pending", func(s apiv1.GpuClaimStatus) bool { return s.Phase == apiv1.ClaimPending })
	if st.NodeName != "" || st.Allocated != "" || len(st.GpuIDs) != 0 || st.PodUID != "" {
		t.Fatalf("released claim keeps its allocation: %+v", st)
	}
}

// TestUnhealthyGPU checks that a GPU turning unhealthy receives no new pods and that recovery
// makes it allocatable again.
func TestUnhealthyGPU(t *testing.T) {
	ns := namespace(t, "health")
	node := cluster.NodeName("dgx", 1)
	devs := devices("dgx-a100")
	for i := range devs {
		if i != 5 {
			devs[i].Health = apiv1.Unhealthy
		}
	}
	if err := writeStatus(t.Context(), node, devs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publishStatus(t.Context(), node, "dgx-a100") })
	sel := &apiv1.NodeSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}
	createClaim(t, ns, "one", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, Selector: sel})
	createClaim(t, ns, "two", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}, Selector: sel})
	createPod(t, ns, "one", "one")
	if a := allocation(t, boundPod(t, ns, "one")); !reflect.DeepEqual(a.IDs, []int{5}) {
		t.Fatalf("only GPU 5 is healthy, got %v", a)
	}
	createPod(t, ns, "two", "two")
	claimStatus(t, ns, "two", "Pending: no healthy GPUs", func(s apiv1.GpuClaimStatus) bool {
		return s.Phase == apiv1.ClaimPending && strings.Contains(s.Message, "no node has 2 healthy free GPUs")
	})
	// Recovery: the pending pod is scheduled without being touched.
	if err := publishStatus(t.Context(), node, "dgx-a100"); err != nil {
		t.Fatal(err)
	}
	if a := allocation(t, boundPod(t, ns, "two")); len(a.IDs) != 2 || a.IDs[0] == 5 || a.IDs[1] == 5 {
		t.Fatalf("recovered node gave %v", a)
	}
	checkNoDoubleBooking(t, ns)
}

// TestRaceAndRestart runs two scheduler processes without leader election against 200 claims
// for 35 healthy GPUs, kills one mid-run and restarts it, and checks that no GPU is ever held
// by two pods.
func TestRaceAndRestart(t *testing.T) {
	ns := namespace(t, "race")
	schedB, err := launch.StartScheduler(t.Context(), env.c, launch.SchedulerOptions{Name: "gpu-scheduler-b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = schedB.Stop(5 * time.Second) })
	const claims, capacity = 200, 5 * 7
	for i := 0; i < claims; i++ {
		name := fmt.Sprintf("c%03d", i)
		createClaim(t, ns, name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, Selector: onPool("race")})
		createPod(t, ns, name, name)
	}
	waitBound := func(want int) {
		eventually(t, 3*time.Minute, fmt.Sprintf("%d race pods bound", want), func() (bool, string) {
			n := checkNoDoubleBooking(t, ns)
			return n == want, fmt.Sprintf("%d bound", n)
		})
	}
	waitBound(capacity)

	// Free 20 GPUs and kill scheduler A at once, as a crash would; B carries on alone, then A
	// comes back, rebuilds its ledger from the leases and joins the race again.
	for i := 0; i < 20; i++ {
		pods, err := env.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				deletePod(t, ns, p.Name, i%2 == 0)
				break
			}
		}
		if i == 5 {
			if err := env.schedA.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitBound(capacity)
	restarted, err := launch.StartScheduler(t.Context(), env.c, launch.SchedulerOptions{Name: "gpu-scheduler-a2"})
	if err != nil {
		t.Fatal(err)
	}
	env.schedA = restarted
	for i := 0; i < 10; i++ {
		pods, err := env.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				deletePod(t, ns, p.Name, false)
				break
			}
		}
	}
	waitBound(capacity)
}
