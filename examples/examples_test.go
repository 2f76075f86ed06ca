// Package examples holds the YAML a user writes (docs/workloads.md); its test decodes every file
// into the API types, strictly, so that an example with a typo or a wrong field fails.
package examples

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// objects decodes every document of a file, strictly (unknown or duplicate fields fail).
func objects(t *testing.T, path string) []runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, obj)
	}
}

// podTemplateOf returns the pod template of a Job, Deployment or StatefulSet.
func podTemplateOf(t *testing.T, obj runtime.Object) *corev1.PodTemplateSpec {
	t.Helper()
	switch o := obj.(type) {
	case *batchv1.Job:
		return &o.Spec.Template
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	}
	t.Fatalf("%T has no pod template", obj)
	return nil
}

func TestExamplesUseTheirTemplates(t *testing.T) {
	tmpl := objects(t, "claimtemplate.yaml")
	if len(tmpl) != 1 {
		t.Fatalf("claimtemplate.yaml: %d objects, want 1", len(tmpl))
	}
	ct, ok := tmpl[0].(*apiv1.GpuClaimTemplate)
	if !ok || ct.Spec.Spec.Devices.Count != 2 {
		t.Fatalf("claimtemplate.yaml: %#v, want a GpuClaimTemplate for 2 GPUs", tmpl[0])
	}
	for _, f := range []string{"indexed-job.yaml", "deployment.yaml", "statefulset.yaml", "placement-map.yaml"} {
		objs := objects(t, f)
		if len(objs) != 1 {
			t.Fatalf("%s: %d objects, want 1", f, len(objs))
		}
		pt := podTemplateOf(t, objs[0])
		if got := pt.Annotations[apiv1.AnnotationClaimTemplate]; got != ct.Name {
			t.Errorf("%s: pod template names claim template %q, want %q", f, got, ct.Name)
		}
		if pt.Spec.SchedulerName != apiv1.SchedulerName {
			t.Errorf("%s: schedulerName %q, want %q", f, pt.Spec.SchedulerName, apiv1.SchedulerName)
		}
	}
	if j := objects(t, "indexed-job.yaml")[0].(*batchv1.Job); j.Spec.CompletionMode == nil || *j.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("indexed-job.yaml is not an indexed Job")
	}

	gang := objects(t, "gang-template.yaml")
	if len(gang) != 2 {
		t.Fatalf("gang-template.yaml: %d objects, want a template and a Job", len(gang))
	}
	gt, ok := gang[0].(*apiv1.GpuClaimTemplate)
	if !ok || gt.Spec.Spec.GangRef == "" || gt.Spec.Spec.GangSize == nil {
		t.Fatalf("gang-template.yaml: first object %#v, want a GpuClaimTemplate with gangRef and gangSize", gang[0])
	}
	job := gang[1].(*batchv1.Job)
	if *job.Spec.Parallelism != *gt.Spec.Spec.GangSize || job.Spec.Template.Annotations[apiv1.AnnotationClaimTemplate] != gt.Name {
		t.Errorf("gang-template.yaml: the Job runs %d pods from %q; want gangSize %d from %q", *job.Spec.Parallelism, job.Spec.Template.Annotations[apiv1.AnnotationClaimTemplate], *gt.Spec.Spec.GangSize, gt.Name)
	}
}

// The placement map example parses, and every pod index it names exists in its indexed Job.
func TestPlacementMapExample(t *testing.T) {
	job, ok := objects(t, "placement-map.yaml")[0].(*batchv1.Job)
	if !ok || job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("placement-map.yaml: %#v, want an indexed Job", job)
	}
	m, err := apiv1.ParseSchedulingMap(job.Spec.Template.Annotations[apiv1.AnnotationSchedulingMap])
	if err != nil {
		t.Fatalf("placement-map.yaml: %v", err)
	}
	if len(m) == 0 {
		t.Fatal("placement-map.yaml: empty map")
	}
	for index, a := range m {
		if index >= int(*job.Spec.Completions) {
			t.Errorf("placement-map.yaml: entry %d=%s names an index the Job never runs", index, a)
		}
		if len(a.IDs) != 2 {
			t.Errorf("placement-map.yaml: entry %d=%s names %d GPUs; template a100x2 asks for 2", index, a, len(a.IDs))
		}
	}
}

// TestTryItByHandExamples checks the claim-and-pod pairs of README's walkthrough: each pod
// names its claim and asks gpu-scheduler for it.
func TestTryItByHandExamples(t *testing.T) {
	for _, tc := range []struct {
		file  string
		count int32
	}{{"claim-pod.yaml", 4}, {"too-big.yaml", 8}} {
		objs := objects(t, tc.file)
		if len(objs) != 2 {
			t.Fatalf("%s: %d objects, want a GpuClaim and a Pod", tc.file, len(objs))
		}
		c, ok1 := objs[0].(*apiv1.GpuClaim)
		p, ok2 := objs[1].(*corev1.Pod)
		if !ok1 || !ok2 {
			t.Fatalf("%s: %T, %T; want a GpuClaim and a Pod", tc.file, objs[0], objs[1])
		}
		if c.Spec.Devices.Count != tc.count || p.Annotations[apiv1.AnnotationClaim] != c.Name || p.Spec.SchedulerName != apiv1.SchedulerName {
			t.Errorf("%s: claim %s for %d GPUs, pod names claim %q with scheduler %q", tc.file, c.Name, c.Spec.Devices.Count, p.Annotations[apiv1.AnnotationClaim], p.Spec.SchedulerName)
		}
	}
}
