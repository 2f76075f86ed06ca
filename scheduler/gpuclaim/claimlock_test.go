package gpuclaim

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// checkClaimVersions makes the fake API server refuse a GpuClaim update whose resourceVersion is
// not the stored one, as the real one does (the fake tracker stores any update).
func checkClaimVersions(gpu *gpufake.Clientset) {
	var mu sync.Mutex
	next := 1000
	gvr := apiv1.SchemeGroupVersion.WithResource("gpuclaims")
	gpu.PrependReactor("update", "gpuclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj := a.(clienttesting.UpdateAction).GetObject().(*apiv1.GpuClaim).DeepCopy()
		mu.Lock()
		defer mu.Unlock()
		stored, err := gpu.Tracker().Get(gvr, obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := stored.(*apiv1.GpuClaim).ResourceVersion; obj.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), obj.Name, nil)
		}
		next++
		obj.ResourceVersion = strconv.Itoa(next)
		if err := gpu.Tracker().Update(gvr, obj, obj.Namespace); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
}

// Two scheduler processes (peers without leader election, or the old and the new leader during a
// failover) each place one of two pods naming the same claim. Neither knows of the other's
// reservation; the claim's status is the lock, and the second binding loses.
func TestOneClaimTwoPodsTwoSchedulers(t *testing.T) {
	a, b := ledgertest.Node("a", nil), ledgertest.Node("b", nil)
	clk := clocktesting.NewFakeClock(time.Now())
	kube := fake.NewClientset()
	gpu := gpufake.NewSimpleClientset(ledgertest.SeedStatus("a", clk.Now()), ledgertest.SeedStatus("b", clk.Now()),
		ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	checkClaimVersions(gpu)
	// Each process sees another node, so that the two attempts lock different GPUs: only the
	// claim is contended.
	one := newTestEnvOn(t, nil, []*v1.Node{a}, kube, gpu, clk)
	two := newTestEnvOn(t, nil, []*v1.Node{b}, kube, gpu, clk)

	first, second := ledgertest.Pod("first", "c"), ledgertest.Pod("second", "c")
	for _, pod := range []*v1.Pod{first, second} {
		if _, err := kube.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n1, st, cs1 := one.reserve(t, first)
	if st != nil {
		t.Fatalf("first pod, first scheduler: %v", st)
	}
	n2, st, cs2 := two.reserve(t, second)
	if st != nil {
		t.Fatalf("second pod, second scheduler: %v", st)
	}
	if _, st, _ := one.bind(t, first, n1, cs1); st != nil {
		t.Fatalf("binding the first pod: %v", st)
	}
	_, st, _ = two.bind(t, second, n2, cs2)
	if st == nil {
		t.Fatal("the second scheduler bound a second pod to a claim the first one had bound")
	}
	if !strings.Contains(st.Message(), "GpuClaim ns/c is held by pod ns/first") || !strings.Contains(st.Message(), "one claim serves one pod at a time") {
		t.Errorf("second binding refused with %q; want it to name the claim and its holder", st.Message())
	}
	c, err := gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase != apiv1.ClaimBound || c.Status.PodUID != string(first.UID) || c.Status.NodeName != "a" {
		t.Errorf("claim status %+v; want Bound to the first pod on node a", c.Status)
	}
	// The loser kept nothing: no Binding, no lease.
	for _, act := range kube.Actions() {
		if cr, ok := act.(clienttesting.CreateAction); ok && act.GetSubresource() == "binding" && cr.GetObject().(*v1.Binding).Name == "second" {
			t.Error("the second pod was bound")
		}
	}
	leases, _ := kube.CoordinationV1().Leases("gpu-scheduler").List(t.Context(), metav1.ListOptions{})
	for _, l := range leases.Items {
		if ref, ok := parseLease(&l); ok && (ref.node != "a" || len(ref.holders) != 1 || ref.holders[0] != first.UID) {
			t.Errorf("GPU lease %s held by %v after the second pod lost its claim; want only the first pod's leases", l.Name, ref.holders)
		}
	}
	if !hasEvent(two, "GpuClaimInUse") {
		t.Error("no GpuClaimInUse event for the pod that lost the claim")
	}
}

// A claim whose status names a pod that is gone (never seen by this process: deleted while no
// scheduler ran) is taken, not kept forever.
func TestClaimOfAGonePodIsTaken(t *testing.T) {
	c := ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	c.Status = apiv1.GpuClaimStatus{Phase: apiv1.ClaimBound, PodName: "ghost", PodUID: "uid-ghost", NodeName: "a", Allocated: "a:3", GpuIDs: []int32{3}}
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, c)
	pod := ledgertest.Pod("p", "c")
	if _, st, _ := e.schedule(t, pod); st != nil {
		t.Fatalf("pod of a claim held by a gone pod: %v", st)
	}
	got, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
	if got.Status.PodUID != string(pod.UID) || got.Status.Phase != apiv1.ClaimBound {
		t.Fatalf("claim status %+v; want Bound to pod p", got.Status)
	}
}

// A binding that fails after PreBind took the claim gives the claim back.
func TestFailedBindingGivesTheClaimBack(t *testing.T) {
	e := newTestEnvArgs(t, &Args{RecordReservedPhase: ptr.To(false)}, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	e.kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			return true, nil, apierrors.NewInternalError(errors.New("binding refused by the test"))
		}
		return false, nil, nil
	})
	if _, st, _ := e.schedule(t, ledgertest.Pod("p", "c")); st == nil {
		t.Fatal("the binding was refused, yet the pod was scheduled")
	}
	got, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c", metav1.GetOptions{})
	if got.Status.PodUID != "" || got.Status.Phase != apiv1.ClaimPending {
		t.Fatalf("claim status %+v after a failed binding; want Pending with no holder", got.Status)
	}
}

func hasEvent(e *testEnv, reason string) bool {
	for {
		select {
		case ev := <-e.events.Events:
			if strings.Contains(ev, reason) {
				return true
			}
		default:
			return false
		}
	}
}
