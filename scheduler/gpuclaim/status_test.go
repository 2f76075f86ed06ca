package gpuclaim

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// claimStatusWrites counts the status updates sent for GpuClaims.
func claimStatusWrites(e *testEnv) int {
	n := 0
	for _, a := range e.gpu.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "gpuclaims" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// writeBound writes the Bound status PostBind writes for pod on GPU 0 of node a, and waits
// until the claim informer has it.
func writeBound(t *testing.T, e *testEnv, claim *apiv1.GpuClaim, pod *v1.Pod) {
	t.Helper()
	if err := e.p.writeClaimStatus(t.Context(), claim, func(st *apiv1.GpuClaimStatus) {
		setAllocation(st, apiv1.ClaimBound, pod, apiv1.Allocation{Node: "a", IDs: []int{0}}, nil, "GPUs 0 on node a allocated to pod "+pod.Name)
	}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		c, err := e.p.claimLister.GpuClaims(claim.Namespace).Get(claim.Name)
		return err == nil && c.Status.Phase == apiv1.ClaimBound
	})
}

func boundPod(name, claim, node string) *v1.Pod {
	pod := ledgertest.Pod(name, claim)
	pod.Spec.NodeName = node
	pod.Annotations[apiv1.AnnotationAllocated] = node + ":0"
	return pod
}

// The scheduler's pod informer may show a pod bound before the claim informer shows the Bound
// status PostBind wrote: that must not cost the claim a second status write.
func TestRepairWaitsForTheBindingCyclesOwnWrite(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.p.status.repairDelay = time.Second
	eventuallyTrue(t, func() bool { _, err := e.p.claimLister.GpuClaims("ns").Get("c"); return err == nil })
	pod := boundPod("p", "c", "a")

	e.p.observePod(t.Context(), pod) // the binding reaches the pod informer first
	time.Sleep(200 * time.Millisecond)
	if n := claimStatusWrites(e); n != 0 {
		t.Fatalf("%d claim status writes before the repair was due, want 0", n)
	}

	claim, _ := e.p.claimLister.GpuClaims("ns").Get("c")
	writeBound(t, e, claim, pod)
	// Past the repair's due time; the writer has nothing left to do.
	time.Sleep(e.p.status.repairDelay)
	eventuallyTrue(t, func() bool { return e.p.status.queue.Len() == 0 })
	if n := claimStatusWrites(e); n != 1 {
		t.Fatalf("%d claim status writes, want 1 (PostBind's; the repair had nothing to do)", n)
	}
}

// A bound pod whose claim does not show its GPUs (its scheduler died between binding and the
// status write) gets the status repaired.
func TestRepairWritesAMissingBoundStatus(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.p.status.repairDelay = 50 * time.Millisecond
	eventuallyTrue(t, func() bool { _, err := e.p.claimLister.GpuClaims("ns").Get("c"); return err == nil })
	pod := boundPod("p", "c", "a")

	e.p.observePod(t.Context(), pod)

	eventuallyTrue(t, func() bool {
		c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
		return err == nil && c.Status.Phase == apiv1.ClaimBound && c.Status.Allocated == "a:0" && c.Status.PodUID == string(pod.UID)
	})
	if n := claimStatusWrites(e); n != 1 {
		t.Fatalf("%d claim status writes, want 1", n)
	}
}

// A pod placed within pendingGrace of being turned away costs its claim no status write; one
// that still waits then gets the reason.
func TestPendingWaitsForItsGrace(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("quick", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}),
		ledgertest.Claim("slow", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	// Long enough that a loaded machine does not pass it before the first count below.
	e.p.status.pendingGrace = 2 * time.Second
	eventuallyTrue(t, func() bool { _, err := e.p.claimLister.GpuClaims("ns").Get("slow"); return err == nil })
	quick, _ := e.p.claimLister.GpuClaims("ns").Get("quick")
	slow, _ := e.p.claimLister.GpuClaims("ns").Get("slow")
	qp := ledgertest.Pod("q", "quick")

	e.p.status.pending(quick, qp, "no node has 1 healthy free GPUs for GpuClaim ns/quick")
	e.p.status.pending(slow, ledgertest.Pod("s", "slow"), "no node has 1 healthy free GPUs for GpuClaim ns/slow")
	// The quick pod is placed within its grace: PostBind writes Bound.
	writeBound(t, e, quick, qp)
	time.Sleep(200 * time.Millisecond)
	if n := claimStatusWrites(e); n != 1 {
		t.Fatalf("%d claim status writes within the grace, want 1 (quick's Bound)", n)
	}
	eventuallyTrue(t, func() bool {
		c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "slow", metav1.GetOptions{})
		return err == nil && c.Status.Phase == apiv1.ClaimPending && c.Status.Message == "no node has 1 healthy free GPUs for GpuClaim ns/slow"
	})
	time.Sleep(e.p.status.pendingGrace)
	if n := claimStatusWrites(e); n != 2 {
		t.Fatalf("%d claim status writes, want 2 (quick's Bound, slow's Pending)", n)
	}
	if c, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "quick", metav1.GetOptions{}); c.Status.Phase != apiv1.ClaimBound {
		t.Fatalf("claim quick is %s; the pending reason of its wait must not overwrite Bound", c.Status.Phase)
	}
	// The event goes with the write: slow's reason is reported, quick's is not.
	var got []string
	for len(e.events.Events) > 0 {
		got = append(got, <-e.events.Events)
	}
	if len(got) != 1 || !strings.Contains(got[0], "Unschedulable") || !strings.Contains(got[0], "ns/slow") {
		t.Fatalf("events %q, want one Unschedulable event for claim ns/slow", got)
	}
}

// With several schedulers (no leader election) each one releases every pod that ends. The
// release waits a random time, and a claim that another scheduler has reset meanwhile costs
// this one no status write.
func TestReleaseLeftToAnotherScheduler(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.p.status.releaseSpread = 400 * time.Millisecond
	e.p.status.randWait = func(n time.Duration) time.Duration { return n - time.Millisecond }
	eventuallyTrue(t, func() bool { _, err := e.p.claimLister.GpuClaims("ns").Get("c"); return err == nil })
	claim, _ := e.p.claimLister.GpuClaims("ns").Get("c")
	pod := boundPod("p", "c", "a")
	writeBound(t, e, claim, pod)
	claim, _ = e.p.claimLister.GpuClaims("ns").Get("c")

	e.p.status.released(claim, pod.UID, "pod p went away; the claim is free for another pod", false)
	// Another scheduler resets the claim first, and this one's informer sees it.
	other := claim.DeepCopy()
	other.Status = apiv1.GpuClaimStatus{Phase: apiv1.ClaimPending, Message: "pod p went away; the claim is free for another pod"}
	if _, err := e.gpu.GpuV1().GpuClaims("ns").UpdateStatus(t.Context(), other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		c, err := e.p.claimLister.GpuClaims("ns").Get("c")
		return err == nil && c.Status.PodUID == ""
	})
	time.Sleep(e.p.status.releaseSpread + 100*time.Millisecond)
	eventuallyTrue(t, func() bool { return e.p.status.queue.Len() == 0 })
	if n := claimStatusWrites(e); n != 2 {
		t.Fatalf("%d claim status writes, want 2 (the Bound, the other scheduler's reset): the release had nothing left to write", n)
	}

	// Alone, the scheduler writes the release once its wait is over.
	writeBound(t, e, claim, pod)
	claim, _ = e.p.claimLister.GpuClaims("ns").Get("c")
	e.p.status.released(claim, pod.UID, "pod p went away; the claim is free for another pod", false)
	eventuallyTrue(t, func() bool {
		c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
		return err == nil && c.Status.PodUID == "" && c.Status.Phase == apiv1.ClaimPending
	})
	// A reason for the claim's next pod, made while the release waits, does not replace it.
	writeBound(t, e, claim, pod)
	claim, _ = e.p.claimLister.GpuClaims("ns").Get("c")
	e.p.status.released(claim, pod.UID, "pod p went away; the claim is free for another pod", false)
	e.p.status.pending(claim, ledgertest.Pod("next", "c"), "no node has 1 healthy free GPUs for GpuClaim ns/c")
	eventuallyTrue(t, func() bool {
		c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
		return err == nil && c.Status.PodUID == "" && c.Status.Phase == apiv1.ClaimPending
	})
}

// The scheduler that bound a pod writes its release at once, whatever the spread: a claim must
// not keep naming GPUs that its pod gave up and another pod may hold already.
func TestReleaseOfOwnBindingIsNotDelayed(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.p.status.releaseSpread = time.Minute
	e.p.status.randWait = func(n time.Duration) time.Duration { return n - time.Millisecond }
	pod := ledgertest.Pod("p", "c")
	if _, st, _ := e.schedule(t, pod); st != nil {
		t.Fatal(st)
	}
	eventuallyTrue(t, func() bool {
		c, err := e.p.claimLister.GpuClaims("ns").Get("c")
		return err == nil && c.Status.Phase == apiv1.ClaimBound
	})
	e.p.podGone(pod)
	eventuallyTrue(t, func() bool {
		c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
		return err == nil && c.Status.PodUID == "" && c.Status.Phase == apiv1.ClaimPending
	})
}
