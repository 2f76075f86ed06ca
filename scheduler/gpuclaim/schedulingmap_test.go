package gpuclaim

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func leaseHolder(t *testing.T, e *testEnv, name string) string {
	t.Helper()
	l, err := e.kube.CoordinationV1().Leases("gpu-scheduler").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// A pod covered by its scheduling map goes exactly to its entry's node and GPUs and takes their
// leases; an entry naming a held, unhealthy or missing GPU, a missing node or the wrong number
// of GPUs leaves the pod waiting with the entry named, and never touches another pod's lease;
// a pod the map does not cover is placed as usual.
func TestSchedulingMapPinsPods(t *testing.T) {
	var claims []*apiv1.GpuClaim
	for i, n := range []int32{2, 2, 2, 1, 2, 2, 2, 1} {
		claims = append(claims, ledgertest.Claim(fmt.Sprintf("c%d", i), apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: n}}))
	}
	objs := make([]runtime.Object, 0, len(claims))
	for _, c := range claims {
		objs = append(objs, c)
	}
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil), ledgertest.Node("b", nil)}, objs...)

	// Index 0: 4 and 6 on b, across nothing contiguous would pick; leases taken for both.
	p0 := ledgertest.IndexedPod(0)
	if got, st, _ := e.schedule(t, p0); st != nil || got != "b" {
		t.Fatalf("pod 0: node %q, %v; want b", got, st)
	}
	for _, l := range []string{"gpu-b-4", "gpu-b-6"} {
		if h := leaseHolder(t, e, l); h != string(p0.UID) {
			t.Fatalf("lease %s held by %q, want pod 0", l, h)
		}
	}
	c0, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "c0", metav1.GetOptions{})
	if c0.Status.Allocated != "b:4,6" {
		t.Fatalf("claim c0 allocated %q, want b:4,6", c0.Status.Allocated)
	}
	// Index 1: a:0,1.
	if got, st, _ := e.schedule(t, ledgertest.IndexedPod(1)); st != nil || got != "a" {
		t.Fatalf("pod 1: node %q, %v; want a", got, st)
	}

	bad := []struct {
		index int
		code  fwk.Code
		want  string
	}{
		{2, fwk.Unschedulable, "gpu-scheduling-map entry 2=b:4,5 for pod ns/train-2-x7k9p (index 2): on node b: GPU 4 is held by another pod"},
		{3, fwk.Unschedulable, "gpu-scheduling-map entry 3=a:7 for pod ns/train-3-x7k9p (index 3): on node a: GPU 7 is Unhealthy"},
		{4, fwk.Unschedulable, "entry 4=a:2,9 for pod ns/train-4-x7k9p (index 4): on node a: GPU 9 does not exist on node a (it has 8 GPUs)"},
		{5, fwk.UnschedulableAndUnresolvable, "entry 5=gone:0,1 for pod ns/train-5-x7k9p (index 5): node gone does not exist"},
		{6, fwk.UnschedulableAndUnresolvable, "gpu-scheduling-map entry 6=a:3 names 1 GPUs but GpuClaim ns/c6 asks for 2"},
	}
	for _, tt := range bad {
		pod := ledgertest.IndexedPod(tt.index)
		_, st, _ := e.schedule(t, pod)
		if st.Code() != tt.code || !strings.Contains(st.Message(), tt.want) {
			t.Errorf("pod %d: %v %q, want %v containing %q", tt.index, st.Code(), st.Message(), tt.code, tt.want)
		}
		c, _ := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), fmt.Sprintf("c%d", tt.index), metav1.GetOptions{})
		eventuallyTrue(t, func() bool {
			c, _ = e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), c.Name, metav1.GetOptions{})
			return strings.Contains(c.Status.Message, tt.want)
		})
	}
	// Nothing of pod 0's changed hands.
	if h := leaseHolder(t, e, "gpu-b-4"); h != string(p0.UID) {
		t.Fatalf("lease gpu-b-4 held by %q after the conflicting entry, want pod 0", h)
	}

	// A Filter call on another node (preemption's dry run does that) refuses it.
	pod2 := ledgertest.IndexedPod(2)
	cs := framework.NewCycleState()
	_, _ = e.p.PreFilter(t.Context(), cs, pod2, nil)
	ni := framework.NewNodeInfo()
	ni.SetNode(ledgertest.Node("a", nil))
	if st := e.p.Filter(t.Context(), cs, pod2, ni); st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != ledger.ReasonNotPinned {
		t.Fatalf("Filter on a node the entry does not name: %v", st)
	}

	// Freed GPUs elsewhere do not wake pod 2; pod 0 going away does, and it gets b:4,5.
	oldest := e.clock.Now().Add(-e.p.freshness)
	if e.p.mayFitOn(pod2, []string{"a"}, oldest) {
		t.Fatal("pod 2 activated by node a, which its entry does not name")
	}
	if e.p.fitsWithout(pod2, "a", p0.UID) || !e.p.fitsWithout(pod2, "b", p0.UID) {
		t.Fatal("pod-deleted hint: pod 2 must wait on node b only")
	}
	e.p.podGone(p0)
	if !e.p.mayFitOn(pod2, []string{"b"}, oldest) {
		t.Fatal("pod 2 not activated when its GPUs on b were freed")
	}
	if got, st, _ := e.reserve(t, pod2); st != nil || got != "b" {
		t.Fatalf("pod 2 after pod 0 went: node %q, %v; want b", got, st)
	}

	// Index 7 is not in the map: placed as usual (any node with a free GPU).
	if _, st, _ := e.schedule(t, ledgertest.IndexedPod(7)); st != nil {
		t.Fatalf("pod not covered by the map: %v", st)
	}
}

// A map that does not parse (the webhook refuses it; a pod created without the webhook must
// still not be placed by guesswork) leaves the pod waiting with the line named.
func TestSchedulingMapMalformed(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, ledgertest.Claim("c0", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}}))
	pod := ledgertest.IndexedPod(0)
	pod.Annotations[apiv1.AnnotationSchedulingMap] = "0=a:0\n1=a"
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), `pod ns/train-0-x7k9p: annotation gpu.scheduling/gpu-scheduling-map: scheduling map line 2: allocation "a" has no ':'`) {
		t.Fatalf("malformed map: %v %q", st.Code(), st.Message())
	}
	// A pod without an index (a Deployment's) is not covered, whatever the map says.
	plain := ledgertest.Pod("serve-5d8f-24567", "c0")
	plain.GenerateName = "serve-5d8f-"
	plain.Annotations[apiv1.AnnotationSchedulingMap] = "24567=nowhere:0"
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), plain, nil); !st.IsSuccess() {
		t.Fatalf("pod without an index: %v", st)
	}
}
