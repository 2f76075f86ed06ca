package claimtemplate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

func coschedulingGroup(name string, minMember int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"namespace": "ns", "name": name},
		"spec":     map[string]any{"minMember": minMember, "scheduleTimeoutSeconds": int64(30)},
	}}
	return u
}

func workloadGroup(name string, policy map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
		"metadata": map[string]any{"namespace": "ns", "name": name},
		"spec":     map[string]any{"schedulingPolicy": policy},
	}}
}

// withGroups gives the env's reconciler a fake dynamic client serving these pod groups.
func (e *env) withGroups(objs ...runtime.Object) *env {
	lists := map[schema.GroupVersionResource]string{
		coschedulingPodGroups: "PodGroupList",
		workloadPodGroups:     "PodGroupList",
	}
	e.r.groups = dynamicGroups{client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)}
	return e
}

func soloTemplate(name string) *apiv1.GpuClaimTemplate {
	t := template(name)
	t.Spec.Spec.GangRef, t.Spec.Spec.GangSize = "", nil
	return t
}

// inCoscheduling is a pod of gpu-scheduler, unbound, in a coscheduling PodGroup: the scheduler
// would make its claim itself were it not in a group.
func inCoscheduling(name, tmpl, group string) *corev1.Pod {
	p := pod(name, tmpl)
	p.Spec.SchedulerName = apiv1.SchedulerName
	p.Labels = map[string]string{claims.LabelPodGroup: group}
	return p
}

func inWorkloadGroup(name, tmpl, group string) *corev1.Pod {
	p := pod(name, tmpl)
	p.Spec.SchedulerName = apiv1.SchedulerName
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	return p
}

// A pod of a coscheduling PodGroup gets a claim in the group's gang, of minMember pods, made by
// the controller (the gang's claims must all exist before it is placed), although the template
// names no gang.
func TestCoschedulingPodGroupMakesTheGang(t *testing.T) {
	e := newEnv(t, inCoscheduling("train-0", "x8", "train"), soloTemplate("x8")).withGroups(coschedulingGroup("train", 3))
	res := e.reconcile(t, "train-0")
	c, ok := e.claim(t, "train-0-x8")
	if !ok {
		t.Fatalf("no claim made for a pod of PodGroup train (result %+v, event %q)", res, e.event(t))
	}
	if c.Spec.GangRef != "scheduling.x-k8s.io/train" || c.Spec.GangSize == nil || *c.Spec.GangSize != 3 {
		t.Errorf("claim gangRef %q gangSize %v, want scheduling.x-k8s.io/train and the group's minMember 3", c.Spec.GangRef, c.Spec.GangSize)
	}
	if c.Spec.Devices.Count != 8 {
		t.Errorf("claim devices %+v, want the template's", c.Spec.Devices)
	}
	if ev := e.event(t); ev != "" {
		t.Errorf("event %q for a pod whose claim was made", ev)
	}
}

// A pod of a Kubernetes PodGroup (spec.schedulingGroup) with the gang policy gets a claim in the
// group's gang of minCount pods; one with the basic policy, a claim of no gang.
func TestWorkloadPodGroupMakesTheGang(t *testing.T) {
	gang := workloadGroup("workers", map[string]any{"gang": map[string]any{"minCount": int64(4)}})
	basic := workloadGroup("loose", map[string]any{"basic": map[string]any{}})
	e := newEnv(t, inWorkloadGroup("w-0", "x8", "workers"), inWorkloadGroup("l-0", "x8", "loose"), soloTemplate("x8")).withGroups(gang, basic)
	e.reconcile(t, "w-0")
	c, ok := e.claim(t, "w-0-x8")
	if !ok {
		t.Fatalf("no claim made for a pod of a Workload PodGroup (event %q)", e.event(t))
	}
	if c.Spec.GangRef != "scheduling.k8s.io/workers" || c.Spec.GangSize == nil || *c.Spec.GangSize != 4 {
		t.Errorf("claim gangRef %q gangSize %v, want scheduling.k8s.io/workers and minCount 4", c.Spec.GangRef, c.Spec.GangSize)
	}
	e.reconcile(t, "l-0")
	c, ok = e.claim(t, "l-0-x8")
	if !ok {
		t.Fatalf("no claim made for a pod of a basic PodGroup (event %q)", e.event(t))
	}
	if c.Spec.GangRef != "" || c.Spec.GangSize != nil {
		t.Errorf("claim of a basic-policy group has gangRef %q gangSize %v, want no gang", c.Spec.GangRef, c.Spec.GangSize)
	}
}

// A group that is not there (yet, or its API not served) leaves the pod without a claim, with a
// warning naming the group, and the pod is looked at again later (groups are not watched); a
// group with no usable size likewise.
func TestPodGroupMissingOrInvalidWaits(t *testing.T) {
	e := newEnv(t, inCoscheduling("a-0", "x8", "absent"), inCoscheduling("z-0", "x8", "zero"), soloTemplate("x8")).withGroups(coschedulingGroup("zero", 0))
	for _, c := range []struct{ pod, want string }{
		{"a-0", "PodGroup absent (scheduling.x-k8s.io)"},
		{"z-0", "spec.minMember 0"},
	} {
		res := e.reconcile(t, c.pod)
		if _, ok := e.claim(t, c.pod+"-x8"); ok {
			t.Errorf("%s: claim made without its group's gang", c.pod)
		}
		if res.RequeueAfter != groupRetry {
			t.Errorf("%s: result %+v, want a look again after %v", c.pod, res, groupRetry)
		}
		if ev := e.event(t); !strings.Contains(ev, "Warning "+ReasonPodGroup) || !strings.Contains(ev, c.want) {
			t.Errorf("%s: event %q, want a %s warning naming %q", c.pod, ev, ReasonPodGroup, c.want)
		}
	}
	// The group appears: the next look makes the claim.
	e.withGroups(coschedulingGroup("absent", 2))
	e.reconcile(t, "a-0")
	if c, ok := e.claim(t, "a-0-x8"); !ok || *c.Spec.GangSize != 2 {
		t.Errorf("claim after the group appeared: %v, want one in a gang of 2", c)
	}
}

// A pod in a group whose template names a gang of its own, or that names two groups, is refused
// with the reason: a pod belongs to one gang.
func TestPodGroupAndGangRefRefused(t *testing.T) {
	both := inCoscheduling("both-0", "x1", "train")
	both.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("workers")}
	e := newEnv(t, inCoscheduling("g-0", "x8", "train"), both, template("x8"), soloTemplate("x1")).withGroups(coschedulingGroup("train", 2))
	e.reconcile(t, "g-0")
	if _, ok := e.claim(t, "g-0-x8"); ok {
		t.Error("claim made for a pod in a PodGroup whose template sets gangRef")
	}
	if ev := e.event(t); !strings.Contains(ev, "Warning "+ReasonPodGroup) || !strings.Contains(ev, `sets spec.gangRef "train"`) || !strings.Contains(ev, "label "+claims.LabelPodGroup) {
		t.Errorf("event %q, want the two gangs named", ev)
	}
	e.reconcile(t, "both-0")
	if _, ok := e.claim(t, "both-0-x1"); ok {
		t.Error("claim made for a pod naming two pod groups")
	}
	if ev := e.event(t); !strings.Contains(ev, "names two pod groups") || !strings.Contains(ev, "spec.schedulingGroup.podGroupName") {
		t.Errorf("event %q, want both groups named", ev)
	}
}

// A template may place a whole PodGroup inside one topology domain: gangTopology without
// gangRef, the claim getting the group's gang.
func TestPodGroupGangTopology(t *testing.T) {
	tmpl := soloTemplate("clique")
	tmpl.Spec.Spec.GangTopology = &apiv1.GangTopology{Level: "nvidia.com/gpu.clique", Mode: apiv1.TopologyRequired}
	e := newEnv(t, inCoscheduling("d-0", "clique", "racks"), tmpl).withGroups(coschedulingGroup("racks", 18))
	e.reconcile(t, "d-0")
	c, ok := e.claim(t, "d-0-clique")
	if !ok {
		t.Fatalf("no claim made (event %q)", e.event(t))
	}
	if c.Spec.GangRef != "scheduling.x-k8s.io/racks" || *c.Spec.GangSize != 18 || c.Spec.GangTopology == nil || c.Spec.GangTopology.Level != "nvidia.com/gpu.clique" {
		t.Errorf("claim spec %+v, want the group's gang of 18 inside one nvidia.com/gpu.clique domain", c.Spec)
	}
}
