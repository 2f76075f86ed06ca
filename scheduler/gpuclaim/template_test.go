package gpuclaim

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func templatedPod(name, template string) *v1.Pod {
	p := gpuPod(name, "")
	p.Annotations[apiv1.AnnotationClaimTemplate] = template
	return p
}

func ownedClaim(name string, owner *v1.Pod) *apiv1.GpuClaim {
	c := claimObj(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	return c
}

// A pod that names a claim template waits for the claim the controller makes for it: rejected
// with a message naming template and claim, activated by the claim's add event (no poll), and
// schedulable once the claim exists and is owned by the pod. A claim of that name owned by
// another pod is never used.
func TestTemplatedPodWaitsForItsClaim(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{node("a", nil)})
	pod := templatedPod("train-0", "x1")
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "waiting for GpuClaim ns/train-0-x1 to be made from GpuClaimTemplate x1 for pod train-0") {
		t.Fatalf("status %v %q, want the wait for the claim reported", st.Code(), st.Message())
	}
	createClaimStatusLess(t, e, ownedClaim("train-0-x1", pod))
	eventuallyTrue(t, func() bool { return e.activated.has("ns/train-0") })
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil); !st.IsSuccess() {
		t.Fatalf("pod with its own claim: %v", st)
	}

	// Same name, other owner: refused, naming the pod.
	other := templatedPod("train-1", "x1")
	stranger := gpuPod("stranger", "")
	createClaimStatusLess(t, e, ownedClaim("train-1-x1", stranger))
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), other, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "GpuClaim ns/train-1-x1 is not owned by pod train-1") {
		t.Fatalf("claim owned by another pod: %v %q", st.Code(), st.Message())
	}

	// An empty template name is reported as such.
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), templatedPod("empty", ""), nil)
	if !strings.Contains(st.Message(), "empty gpu.scheduling/claim-template annotation") {
		t.Fatalf("empty template: %v %q", st.Code(), st.Message())
	}
	// The claim annotation wins over the template annotation.
	both := templatedPod("both", "x1")
	both.Annotations[apiv1.AnnotationClaim] = "mine"
	if name, _ := claimName(both); name != "mine" {
		t.Fatalf("claimName = %q, want the claim annotation's mine", name)
	}
}
