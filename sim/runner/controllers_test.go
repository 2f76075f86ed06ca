package runner

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

func controllerScenario(t *testing.T) *scenario.Scenario {
	t.Helper()
	s, err := scenario.Load("controllers.yaml", []byte(`
apiVersion: sim.gpu.scheduling/v1alpha1
kind: Scenario
metadata: {name: controllers}
spec:
  nodePools:
  - {name: h100, count: 2, topology: dgx-h100, labels: {gpu-type: h100}}
  workload:
    claimTemplates:
    - {name: quad, claim: {count: 4, selector: {gpu-type: h100}}}
    - {name: one, claim: {count: 1}}
    controllers:
    - {kind: Job, name: train, indexed: true, replicas: 2, claimTemplate: quad, duration: 10s}
    - {kind: Deployment, name: serve, replicas: 3, claimTemplate: one, at: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func firstSlot(t *testing.T, plan []scenario.PodPlan, ctl string) scenario.PodPlan {
	t.Helper()
	for _, p := range plan {
		if p.Controller == ctl {
			return p
		}
	}
	t.Fatalf("no slot of %s in the plan", ctl)
	return scenario.PodPlan{}
}

// The gpu-scheduler's pods name the claim template, never a claim; the stock scheduler's ask for
// nvidia.com/gpu with the template's count and selector; Jobs run every pod at once.
func TestBuildController(t *testing.T) {
	s := controllerScenario(t)
	plan := scenario.Expand(s)
	train, _ := s.Spec.Workload.Controller("train")
	serve, _ := s.Spec.Workload.Controller("serve")

	job, dep := buildController(train, firstSlot(t, plan, "train"), "sim", "ours-1", ModeGPU)
	if job == nil || dep != nil {
		t.Fatalf("train: want a Job, got job=%v deployment=%v", job != nil, dep != nil)
	}
	if *job.Spec.CompletionMode != batchv1.IndexedCompletion || *job.Spec.Completions != 2 || *job.Spec.Parallelism != 2 {
		t.Errorf("train: completionMode %s, completions %d, parallelism %d; want Indexed, 2, 2", *job.Spec.CompletionMode, *job.Spec.Completions, *job.Spec.Parallelism)
	}
	tmpl := job.Spec.Template
	if got := tmpl.Annotations[gpuv1.AnnotationClaimTemplate]; got != "quad" {
		t.Errorf("train pods name template %q, want quad", got)
	}
	if _, ok := tmpl.Annotations[gpuv1.AnnotationClaim]; ok {
		t.Errorf("train pods name a claim as well as the template: %v", tmpl.Annotations)
	}
	if tmpl.Spec.SchedulerName != gpuv1.SchedulerName || tmpl.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("train pods: scheduler %q, restart %q", tmpl.Spec.SchedulerName, tmpl.Spec.RestartPolicy)
	}
	if tmpl.Annotations[AnnotationDuration] != "10s" || tmpl.Labels[LabelController] != "train" || tmpl.Labels[LabelRun] != "ours-1" {
		t.Errorf("train pods: annotations %v labels %v", tmpl.Annotations, tmpl.Labels)
	}

	_, dep = buildController(serve, firstSlot(t, plan, "serve"), "sim", "stock-1", ModeStock)
	if dep == nil || *dep.Spec.Replicas != 3 {
		t.Fatalf("serve: want a Deployment of 3, got %+v", dep)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("serve: selector %v does not match its template's labels %v (%v)", dep.Spec.Selector, dep.Spec.Template.Labels, err)
	}
	ps := dep.Spec.Template.Spec
	if ps.RestartPolicy != corev1.RestartPolicyAlways || ps.SchedulerName != "" {
		t.Errorf("stock serve pods: restart %q, scheduler %q", ps.RestartPolicy, ps.SchedulerName)
	}
	if q := ps.Containers[0].Resources.Limits[cluster.ResourceGPU]; q.Value() != 1 {
		t.Errorf("stock serve pods ask for %s nvidia.com/gpu, want 1", q.String())
	}
	if _, ok := dep.Spec.Template.Annotations[gpuv1.AnnotationClaimTemplate]; ok {
		t.Errorf("stock pods name a claim template")
	}
}

// The two runs of bare pods play the same pod for a plan entry, named alike and sent to
// gpu-scheduler: the pre-made run's names its claim, the templated run's its controller's
// claim template, and nothing else differs between them.
func TestBuildBarePods(t *testing.T) {
	s := controllerScenario(t)
	p := firstSlot(t, scenario.Expand(s), "train")
	pre := buildPod(p, "sim", "run-1", ModePremade)
	tmpl := buildPod(p, "sim", "run-1", ModeTemplatedBare)
	if got := pre.Annotations[gpuv1.AnnotationClaim]; got != p.Name {
		t.Errorf("pre-made pod names claim %q, want %q", got, p.Name)
	}
	if _, ok := pre.Annotations[gpuv1.AnnotationClaimTemplate]; ok {
		t.Errorf("pre-made pod names a claim template: %v", pre.Annotations)
	}
	if got := tmpl.Annotations[gpuv1.AnnotationClaimTemplate]; got != "quad" {
		t.Errorf("templated bare pod names template %q, want quad", got)
	}
	if _, ok := tmpl.Annotations[gpuv1.AnnotationClaim]; ok {
		t.Errorf("templated bare pod names a claim as well as the template: %v", tmpl.Annotations)
	}
	if tmpl.Name != p.Name || tmpl.Spec.SchedulerName != gpuv1.SchedulerName || tmpl.Labels[LabelController] != "" {
		t.Errorf("templated bare pod: name %q, scheduler %q, labels %v; want %q, %q, no controller label", tmpl.Name, tmpl.Spec.SchedulerName, tmpl.Labels, p.Name, gpuv1.SchedulerName)
	}
	delete(pre.Annotations, gpuv1.AnnotationClaim)
	delete(tmpl.Annotations, gpuv1.AnnotationClaimTemplate)
	if !equality.Semantic.DeepEqual(pre, tmpl) {
		t.Errorf("the bare pods differ beyond the claim annotation:\npre-made  %+v\ntemplated %+v", pre, tmpl)
	}
}

// The recorder gives each pod a controller makes one slot of that controller, keeps it through
// the pod's updates, and leaves out pods beyond the replicas.
func TestRecorderSlots(t *testing.T) {
	s := controllerScenario(t)
	plan := scenario.Expand(s)
	r := newRecorder(time.Now())
	r.useSlots(plan)
	pod := func(name, ctl, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelController: ctl}}, Spec: corev1.PodSpec{NodeName: node}}
	}
	r.created("train-0", 0)
	r.created("train-1", 0)
	r.observePod(pod("train-1-abcde", "train", ""), false)
	r.observePod(pod("train-0-fghij", "train", ""), false)
	r.observePod(pod("train-1-abcde", "train", "h100-00001"), false)
	r.observePod(pod("train-2-zzzzz", "train", "h100-00000"), false) // a replacement: no slot left

	if got := r.alias["train-1-abcde"]; got != "train-0" {
		t.Errorf("first pod seen got slot %q, want train-0", got)
	}
	if got := r.alias["train-0-fghij"]; got != "train-1" {
		t.Errorf("second pod seen got slot %q, want train-1", got)
	}
	if p := r.pods["train-0"]; p == nil || !p.boundOK || p.node != "h100-00001" {
		t.Errorf("slot train-0: %+v, want bound to h100-00001", p)
	}
	if p := r.pods["train-1"]; p == nil || p.boundOK {
		t.Errorf("slot train-1: %+v, want seen, not bound", p)
	}
	if bound, _ := r.counts(); bound != 1 {
		t.Errorf("bound %d, want 1 (the replacement is not counted)", bound)
	}
	if _, _, extra := r.stamping(); extra != 1 {
		t.Errorf("extra pods %d, want 1", extra)
	}
	if _, ok := r.pods["train-2-zzzzz"]; ok {
		t.Errorf("the replacement pod was recorded")
	}
}
