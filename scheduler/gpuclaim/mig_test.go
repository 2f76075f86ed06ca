package gpuclaim

import (
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func migClaim(name string, count int32, profile string) *apiv1.GpuClaim {
	return ledgertest.Claim(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: count, Exclusivity: apiv1.MIG, MigProfile: profile}})
}

// migEnv is a test environment whose node a is ledgertest.MIGStatus's mixed node.
func migEnv(t *testing.T, objs ...runtime.Object) *testEnv {
	t.Helper()
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, objs...)
	e.setMIGStatus(t, func(*apiv1.GpuNodeStatus) {})
	return e
}

// setMIGStatus writes node a's status as ledgertest.MIGStatus changed by change, and waits for
// the ledger to see it.
func (e *testEnv) setMIGStatus(t *testing.T, change func(*apiv1.GpuNodeStatus)) {
	t.Helper()
	cur, err := e.gpu.GpuV1().GpuNodeStatuses().Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := ledgertest.MIGStatus("a", e.clock.Now())
	change(st)
	cur.Status = st.Status
	if _, err := e.gpu.GpuV1().GpuNodeStatuses().UpdateStatus(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		n, _ := e.p.ledger.NodeView("a")
		if n == nil || !n.GPUs[1].MIGMode {
			return false
		}
		for i := range n.GPUs {
			for k, d := range n.GPUs[i].MIG {
				if string(cur.Status.Devices[i].MIG.Devices[k].Health) != d.Health.String() {
					return false
				}
			}
		}
		return true
	})
}

func (e *testEnv) binding(t *testing.T, pod string) *v1.Binding {
	t.Helper()
	for _, a := range e.kube.Actions() {
		if c, ok := a.(clienttesting.CreateAction); ok && a.GetSubresource() == "binding" {
			if b := c.GetObject().(*v1.Binding); b.Name == pod {
				return b
			}
		}
	}
	t.Fatalf("no binding of pod %s", pod)
	return nil
}

// A 1g.10gb claim gets a MIG device on the GPU with the fewest free devices, locked by its own
// lease; the pod is bound with the device and the claim's status names it.
func TestMIGClaimBindsToAMIGDevice(t *testing.T) {
	e := migEnv(t, migClaim("small", 1, "1g.10gb"))
	pod := ledgertest.Pod("small", "small")
	if got, st, _ := e.schedule(t, pod); st != nil || got != "a" {
		t.Fatalf("scheduled on %q, %v", got, st)
	}
	l := e.lease(t, "gpu-a-2-mig4")
	if *l.Spec.HolderIdentity != string(pod.UID) || l.Labels[apiv1.LabelLeaseGPU] != "2" || l.Labels[apiv1.LabelLeaseMIGSlot] != "4" || l.Labels[apiv1.LabelLeaseNode] != "a" || l.Labels[apiv1.LabelPodUID] != string(pod.UID) {
		t.Fatalf("lease %s: holder %s labels %v", l.Name, *l.Spec.HolderIdentity, l.Labels)
	}
	if _, err := e.kube.CoordinationV1().Leases(l.Namespace).Get(t.Context(), "gpu-a-2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the MIG device's GPU got a whole-GPU lease: %v", err)
	}
	b := e.binding(t, "small")
	if b.Annotations[apiv1.AnnotationMIGDevices] != "2:4" || b.Annotations[apiv1.AnnotationAllocated] != "a:2" || b.Annotations[apiv1.AnnotationGPUIDs] != "2" {
		t.Fatalf("binding annotations %v", b.Annotations)
	}
	c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "small", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase != apiv1.ClaimBound || !slices.Equal(c.Status.MigDevices, []string{"2:4"}) || !slices.Equal(c.Status.GpuIDs, []int32{2}) || !strings.Contains(c.Status.Message, "MIG devices 2:4") {
		t.Fatalf("claim status %+v", c.Status)
	}
}

// A MIG lease another scheduler created (not in this one's ledger yet) wins: PreBind loses the
// race, and the pod's next attempt, with the lease seen, gets another device.
func TestMIGLeaseRaceLost(t *testing.T) {
	e := migEnv(t, migClaim("c", 1, "1g.10gb"))
	other := ledgertest.Pod("other", "")
	l, err := claims.NewMIGLease(*e.p.args.LeaseNamespace, other, "a", 2, 4, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	pod := ledgertest.Pod("p", "c")
	if _, err := e.kube.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	best, st, cs := e.reserve(t, pod)
	if st != nil {
		t.Fatal(st)
	}
	// Created after Reserve: this scheduler chose 2:4 not knowing of it.
	if _, err := e.kube.CoordinationV1().Leases(l.Namespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, st, _ = e.bind(t, pod, best, cs)
	if st.IsSuccess() || !errors.Is(st.AsError(), errLeaseConflict) {
		t.Fatalf("PreBind over another pod's MIG lease: %v", st)
	}
	if got := e.lease(t, l.Name); *got.Spec.HolderIdentity != string(other.UID) {
		t.Fatalf("the other pod's lease now held by %s", *got.Spec.HolderIdentity)
	}
	eventuallyTrue(t, func() bool { _, err := e.p.leaseLister.Leases(l.Namespace).Get(l.Name); return err == nil })
	best, st, cs = e.reserve(t, pod)
	if st != nil {
		t.Fatal(st)
	}
	if _, st, _ = e.bind(t, pod, best, cs); st != nil {
		t.Fatal(st)
	}
	if got := e.lease(t, "gpu-a-2-mig5"); *got.Spec.HolderIdentity != string(pod.UID) {
		t.Fatalf("second attempt: %s held by %s", got.Name, *got.Spec.HolderIdentity)
	}
}

// Another scheduler's MIG lease holds its device in this scheduler's ledger, and only that
// device; when the lease goes the device is offered again.
func TestMIGLeaseHoldsItsDevice(t *testing.T) {
	e := migEnv(t, migClaim("big", 1, "2g.20gb"), migClaim("small", 1, "1g.20gb"))
	other := ledgertest.Pod("other", "")
	l, _ := claims.NewMIGLease(*e.p.args.LeaseNamespace, other, "a", 2, 0, e.clock.Now())
	if _, err := e.kube.CoordinationV1().Leases(l.Namespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool { return len(e.p.ledger.MIGHoldsOf(other.UID, "a")) == 1 })
	_, st, _ := e.schedule(t, ledgertest.Pod("big", "big"))
	wantStatus(t, "2g.20gb held by another scheduler's lease", st, fwk.Unschedulable, "no node has 1 free MIG devices of profile 2g.20gb for GpuClaim ns/big; 1 node has 1g.10gb free, 1 node has 1g.20gb free, 1 node has 3g.40gb free (the MIG layout is set by the operator: docs/sharing.md)")
	if got, st, _ := e.schedule(t, ledgertest.Pod("small", "small")); st != nil || got != "a" {
		t.Fatalf("1g.20gb on the same GPU: %q %v", got, st)
	}
	if err := e.kube.CoordinationV1().Leases(l.Namespace).Delete(t.Context(), l.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool { return len(e.p.ledger.MIGHoldsOf(other.UID, "a")) == 0 })
	pod := ledgertest.Pod("big2", "big")
	if _, err := e.kube.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, st, _ := e.reserve(t, pod); st != nil {
		t.Fatalf("2g.20gb after the lease went: %v", st)
	}
}

// A MIG device that is not Healthy is never offered.
func TestMIGUnhealthyDeviceNotOffered(t *testing.T) {
	e := migEnv(t, migClaim("c", 1, "2g.20gb"))
	e.setMIGStatus(t, func(s *apiv1.GpuNodeStatus) {
		s.Status.Devices[2].MIG.Devices[0].Health = apiv1.Unhealthy
	})
	_, st, _ := e.schedule(t, ledgertest.Pod("p", "c"))
	wantStatus(t, "unhealthy 2g.20gb", st, fwk.Unschedulable, "no node has 1 free MIG devices of profile 2g.20gb")
}

// A bound pod's mig-devices annotation holds its devices (not its GPUs whole), and its
// release frees them: the ledger at once, its MIG lease through the release queue.
func TestMIGPodHoldsAndReleases(t *testing.T) {
	e := migEnv(t, migClaim("c", 2, "1g.10gb"), migClaim("d", 2, "1g.10gb"))
	pod := ledgertest.Pod("p", "c")
	if _, st, _ := e.schedule(t, pod); st != nil {
		t.Fatal(st)
	}
	if got := e.p.ledger.MIGHoldsOf(pod.UID, "a"); len(got) != 2 || got[0].GPU != 2 {
		t.Fatalf("holds %v", got)
	}
	// The pod as the API server has it after the Binding.
	bound, err := e.kube.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound.Spec.NodeName = "a"
	bound.Annotations = e.binding(t, "p").Annotations
	e.p.observePod(t.Context(), bound)
	e.p.ledger.Unreserve(pod.UID, "ns/c") // leaves the pod's own hold (FromPod)
	if got := e.p.ledger.MIGHoldsOf(pod.UID, "a"); len(got) != 2 {
		t.Fatalf("the annotation holds %v", got)
	}
	if _, ids := e.p.ledger.HoldsOf(pod.UID); !slices.Equal(ids, []int{2}) {
		t.Fatalf("HoldsOf %v", ids)
	}
	// The release queue finds the pod's leases in the informer.
	eventuallyTrue(t, func() bool { ls, _ := e.p.leasesOf(pod.UID); return len(ls) == 2 })
	e.p.podGone(bound)
	if got := e.p.ledger.MIGHoldsOf(pod.UID, "a"); len(got) != 0 {
		t.Fatalf("holds after the pod went: %v", got)
	}
	eventuallyTrue(t, func() bool {
		ls, _ := e.kube.CoordinationV1().Leases(*e.p.args.LeaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseMIGSlot})
		return len(ls.Items) == 0
	})
	if got, st, _ := e.schedule(t, ledgertest.Pod("q", "d")); st != nil || got != "a" {
		t.Fatalf("devices not offered again: %v", st)
	}
	if b := e.binding(t, "q"); b.Annotations[apiv1.AnnotationMIGDevices] != "2:4,2:5" {
		t.Fatalf("second pod got %s", b.Annotations[apiv1.AnnotationMIGDevices])
	}
}
