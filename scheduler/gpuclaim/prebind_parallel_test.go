package gpuclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// A scheduler alone takes the claim while its GPU leases are being created, not after: the
// Binding waits for one round trip, not two. The lease create here waits for the claim's status
// write to arrive; taken after the leases, it never does while the create waits.
func TestClaimTakenBesideTheLeases(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	claimWritten := make(chan struct{})
	e.gpu.PrependReactor("update", "gpuclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			select {
			case <-claimWritten:
			default:
				close(claimWritten)
			}
		}
		return false, nil, nil
	})
	overlapped := false
	e.kube.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		select {
		case <-claimWritten:
			overlapped = true
		case <-time.After(2 * time.Second):
		}
		return false, nil, nil
	})
	pod := ledgertest.Pod("p", "c")
	if _, st, _ := e.schedule(t, pod); st != nil {
		t.Fatalf("scheduling: %v", st)
	}
	if !overlapped {
		t.Error("the claim's status was not written while the GPU lease was being created: the Binding waits for both one after the other")
	}
	got, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != apiv1.ClaimBound || got.Status.PodUID != string(pod.UID) || got.Status.NodeName != "a" {
		t.Errorf("claim status %+v; want Bound to pod p on node a", got.Status)
	}
}

// A lease race lost while the claim was being taken beside it gives the claim back, and nothing
// is bound: the leases alone keep two pods off one GPU.
func TestLostLeaseRaceGivesTheClaimTakenBesideBack(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.kube.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l := a.(clienttesting.CreateAction).GetObject().(metav1.Object)
		return true, nil, apierrors.NewAlreadyExists(a.GetResource().GroupResource(), l.GetName())
	})
	pod := ledgertest.Pod("p", "c")
	if _, st, _ := e.schedule(t, pod); st == nil {
		t.Fatal("the pod was bound though its GPU's lease was taken by another")
	}
	got, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.PodUID != "" || got.Status.Phase == apiv1.ClaimBound || got.Status.Phase == apiv1.ClaimReserved {
		t.Errorf("claim status %+v after the lost lease race; want no holder", got.Status)
	}
	for _, act := range e.kube.Actions() {
		if act.GetVerb() == "create" && act.GetSubresource() == "binding" {
			t.Error("the pod was bound")
		}
	}
}
