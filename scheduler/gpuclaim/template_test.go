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
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

func templatedPod(name, template string) *v1.Pod {
	p := ledgertest.Pod(name, "")
	p.Annotations[apiv1.AnnotationClaimTemplate] = template
	return p
}

func ownedClaim(name string, owner *v1.Pod) *apiv1.GpuClaim {
	c := ledgertest.Claim(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	return c
}

// A pod that names a claim template waits for the claim the controller makes for it: rejected
// with a message naming template and claim, activated by the claim's add event (no poll), and
// schedulable once the claim exists and is owned by the pod. A claim of that name owned by
// another pod is never used.
func TestTemplatedPodWaitsForItsClaim(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
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
	stranger := ledgertest.Pod("stranger", "")
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

func createTemplate(t *testing.T, e *testEnv, name string, spec apiv1.GpuClaimSpec) {
	t.Helper()
	tmpl := &apiv1.GpuClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: apiv1.GpuClaimTemplateSpec{
		Metadata: apiv1.ClaimTemplateMetadata{Labels: map[string]string{"team": "ml"}},
		Spec:     spec,
	}}
	if _, err := e.gpu.GpuV1().GpuClaimTemplates("ns").Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		_, err := e.p.templateLister.GpuClaimTemplates("ns").Get(name)
		return err == nil
	})
}

// A pod whose template exists and whose claim does not is placed at once with the claim the
// template describes; PreBind makes that claim, owned by the pod, and it ends Bound like any.
func TestTemplatedPodIsPlacedAndItsClaimMadeAtPreBind(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	createTemplate(t, e, "x2", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}})
	pod := templatedPod("web-0", "x2")
	got, st, _ := e.schedule(t, pod)
	if st != nil || got != "a" {
		t.Fatalf("scheduled on %q, status %v; want node a at the first attempt", got, st)
	}
	c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "web-0-x2", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no claim made at PreBind: %v", err)
	}
	if !ownedBy(c, pod) || c.Spec.Devices.Count != 2 || c.Labels["team"] != "ml" {
		t.Fatalf("claim %+v, want the template's spec and labels, owned by the pod", c)
	}
	if c.Status.Phase != apiv1.ClaimBound || c.Status.PodUID != string(pod.UID) || len(c.Status.GpuIDs) != 2 {
		t.Fatalf("claim status %+v, want Bound to the pod with 2 GPUs", c.Status)
	}
}

// The claim of an earlier pod of the same name, met at PreBind, is left to the garbage
// collector like every writer leaves it (claims.Existing), and the failed attempt says so.
func TestClaimOfAnEarlierPodAtPreBind(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	createTemplate(t, e, "x1", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	pod := templatedPod("job-2", "x1")
	if _, err := e.kube.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	best, st, cs := e.reserve(t, pod)
	if !st.IsSuccess() {
		t.Fatalf("reserve: %v", st)
	}
	earlier := templatedPod("job-2", "x1")
	earlier.UID = "uid-earlier-job-2"
	if _, err := e.gpu.GpuV1().GpuClaims("ns").Create(t.Context(), ownedClaim("job-2-x1", earlier), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, st, _ = e.bind(t, pod, best, cs)
	if st.IsSuccess() || !strings.Contains(st.Message(), "GpuClaim ns/job-2-x1 belongs to an earlier pod named job-2") {
		t.Fatalf("bind with an earlier pod's claim of the pod's claim name: %v, want it refused as the earlier pod's", st)
	}
	if c, err := e.gpu.GpuV1().GpuClaims("ns").Get(t.Context(), "job-2-x1", metav1.GetOptions{}); err != nil || c.OwnerReferences[0].UID != earlier.UID {
		t.Fatalf("the earlier pod's claim was deleted or taken over: %v, %v", c, err)
	}
}

// A claim of that name made between PreFilter and PreBind (by gpu-controller, or an earlier
// attempt) is used when it is the pod's own with the same spec. One owned by another pod is
// never used: the attempt fails, and no GPU stays locked for it.
func TestClaimMadeMeanwhileAtPreBind(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	createTemplate(t, e, "x1", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})

	pod := templatedPod("job-0", "x1")
	if _, err := e.kube.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	best, st, cs := e.reserve(t, pod)
	if !st.IsSuccess() {
		t.Fatalf("reserve: %v", st)
	}
	mine := ownedClaim("job-0-x1", pod)
	mine.Labels = map[string]string{"team": "ml"}
	if _, err := e.gpu.GpuV1().GpuClaims("ns").Create(t.Context(), mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, st, _ := e.bind(t, pod, best, cs); st != nil {
		t.Fatalf("bind with the pod's own claim made meanwhile: %v", st)
	}

	other := templatedPod("job-1", "x1")
	if _, err := e.kube.CoreV1().Pods("ns").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	best, st, cs = e.reserve(t, other)
	if !st.IsSuccess() {
		t.Fatalf("reserve: %v", st)
	}
	if _, err := e.gpu.GpuV1().GpuClaims("ns").Create(t.Context(), ownedClaim("job-1-x1", ledgertest.Pod("stranger", "")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, st, _ = e.bind(t, other, best, cs)
	if st.IsSuccess() || !strings.Contains(st.Message(), "GpuClaim ns/job-1-x1 exists and is not owned by pod job-1") {
		t.Fatalf("bind with a foreign claim of the pod's claim name: %v, want it refused", st)
	}
	if node, _ := e.p.ledger.HoldsOf(other.UID); node != "" {
		t.Fatalf("pod job-1 still holds GPUs on %s after the failed attempt", node)
	}
	leases, _ := e.kube.CoordinationV1().Leases("gpu-scheduler").List(t.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	for _, l := range leases.Items {
		if *l.Spec.HolderIdentity == string(other.UID) {
			t.Fatalf("lease %s held by pod job-1 after the failed attempt", l.Name)
		}
	}
}

// The pod really waits when its template is missing (activated when the template appears) or
// forms a gang (gpu-controller makes a gang's claims before it is placed), with a message that
// says so.
func TestTemplatedPodWaitsForItsTemplate(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	pod := templatedPod("late-0", "later")
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != "waiting for GpuClaim ns/late-0-later to be made from GpuClaimTemplate later for pod late-0: GpuClaimTemplate ns/later does not exist" {
		t.Fatalf("status %v %q, want the missing template reported", st.Code(), st.Message())
	}
	createTemplate(t, e, "later", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	eventuallyTrue(t, func() bool { return e.activated.has("ns/late-0") })
	if _, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil); !st.IsSuccess() {
		t.Fatalf("pod whose template exists now: %v", st)
	}

	createTemplate(t, e, "gang", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, GangRef: "g", GangSize: ptr.To[int32](2)})
	_, st = e.p.PreFilter(t.Context(), framework.NewCycleState(), templatedPod("m-0", "gang"), nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "waiting for GpuClaim ns/m-0-gang to be made from GpuClaimTemplate gang for pod m-0: the claims of gang template gang are made by gpu-controller") {
		t.Fatalf("gang template: %v %q, want the wait for gpu-controller's claim", st.Code(), st.Message())
	}
}

// A pod in a pod group (coscheduling label, or spec.schedulingGroup) whose template forms no gang
// is not placed with a claim of no gang: gpu-controller makes its claim, in the group's gang,
// before the gang is placed. Its shard is the gang, so one peer places the whole group.
func TestPodGroupPodWaitsForTheControllersClaim(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	createTemplate(t, e, "solo", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}})
	labelled := templatedPod("w-0", "solo")
	labelled.Labels = map[string]string{claims.LabelPodGroup: "train"}
	grouped := templatedPod("w-1", "solo")
	grouped.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("workers")}
	for _, c := range []struct {
		pod         *v1.Pod
		group, gang string
	}{
		{labelled, "PodGroup train (scheduling.x-k8s.io)", "gang:ns/scheduling.x-k8s.io/train"},
		{grouped, "PodGroup workers (scheduling.k8s.io)", "gang:ns/scheduling.k8s.io/workers"},
	} {
		_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), c.pod, nil)
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "the claims of the pods of "+c.group+" are made by gpu-controller") {
			t.Errorf("pod %s: %v %q, want the wait for gpu-controller's claim naming the group", c.pod.Name, st.Code(), st.Message())
		}
		if got := e.p.shardKey(c.pod); got != c.gang {
			t.Errorf("pod %s: shard key %q, want its group's gang %q", c.pod.Name, got, c.gang)
		}
	}
}

// A pod in a pod group that names a claim of another gang (its own gangRef) is refused with
// both gangs named; a claim in the group's own gang, or in none, is not refused for it.
func TestPodGroupAndClaimGangRefRefused(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)},
		ledgertest.Claim("mine", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, GangRef: "train", GangSize: ptr.To[int32](2)}))
	pod := ledgertest.Pod("p", "mine")
	pod.Labels = map[string]string{claims.LabelPodGroup: "workers"}
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), `is in PodGroup workers (scheduling.x-k8s.io) (label scheduling.x-k8s.io/pod-group) and its GpuClaim mine is in gang "train": a pod belongs to one gang`) {
		t.Fatalf("status %v %q, want the two gangs named", st.Code(), st.Message())
	}
	c := ledgertest.Claim("same", apiv1.GpuClaimSpec{GangRef: "scheduling.x-k8s.io/workers"})
	if msg := groupConflict(pod, c); msg != "" {
		t.Errorf("claim in the group's own gang refused: %s", msg)
	}
	if msg := groupConflict(pod, ledgertest.Claim("none", apiv1.GpuClaimSpec{})); msg != "" {
		t.Errorf("claim of no gang refused: %s", msg)
	}
}

// A template with gangTopology and no gangRef serves the pods of pod groups only: a pod of no
// group waits with the reason instead of being placed with a claim the API server would refuse.
func TestGangTopologyTemplateWithoutGroupWaits(t *testing.T) {
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)})
	createTemplate(t, e, "domain", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}, GangTopology: &apiv1.GangTopology{Level: "nvidia.com/gpu.clique"}})
	_, st := e.p.PreFilter(t.Context(), framework.NewCycleState(), templatedPod("solo-0", "domain"), nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "GpuClaimTemplate domain sets gangTopology without gangRef, which only the pods of a PodGroup can use") {
		t.Fatalf("status %v %q, want the template's gangTopology named", st.Code(), st.Message())
	}
}
