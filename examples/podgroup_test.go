package examples

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// documents reads every document of a file as unstructured: JobSet, LeaderWorkerSet and the
// coscheduling PodGroup are no types of this module.
func documents(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		js, err := utilyaml.ToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		// Unstructured's own decoding keeps integers int64, which NestedInt64 reads.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, u)
	}
}

// strictPodTemplate decodes the pod template at path in obj, failing on unknown fields.
func strictPodTemplate(t *testing.T, file string, obj map[string]any, path ...string) *corev1.PodTemplateSpec {
	t.Helper()
	if i := slices.Index(path, "*"); i > 0 {
		// The first item of a list: a JobSet's first replicated Job.
		items, _, _ := unstructured.NestedSlice(obj, path[:i]...)
		if len(items) == 0 {
			t.Fatalf("%s: no %v", file, path[:i])
		}
		first, ok := items[0].(map[string]any)
		if !ok {
			t.Fatalf("%s: %v[0] is no object", file, path[:i])
		}
		obj, path = first, path[i+1:]
	}
	m, found, err := unstructured.NestedMap(obj, path...)
	if err != nil || !found {
		t.Fatalf("%s: no pod template at %v: %v", file, path, err)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var pt corev1.PodTemplateSpec
	if err := dec.Decode(&pt); err != nil {
		t.Fatalf("%s: pod template at %v: %v", file, path, err)
	}
	return &pt
}

// The JobSet and LeaderWorkerSet examples need no annotation beyond the claim template: their
// pods name the file's PodGroup by its label, whose minMember is every pod the file runs, and
// the file's template (no gangRef of its own) for gpu-scheduler.
func TestPodGroupExamples(t *testing.T) {
	for _, c := range []struct {
		file      string
		templates [][]string
		pods      func(obj map[string]any) int64
	}{
		{"jobset-podgroup.yaml", [][]string{{"spec", "replicatedJobs", "*", "template", "spec", "template"}}, func(o map[string]any) int64 {
			jobs, _, _ := unstructured.NestedSlice(o, "spec", "replicatedJobs")
			var n int64
			for _, j := range jobs {
				r, _, _ := unstructured.NestedInt64(j.(map[string]any), "replicas")
				p, _, _ := unstructured.NestedInt64(j.(map[string]any), "template", "spec", "parallelism")
				n += r * p
			}
			return n
		}},
		{"leaderworkerset-podgroup.yaml", [][]string{{"spec", "leaderWorkerTemplate", "leaderTemplate"}, {"spec", "leaderWorkerTemplate", "workerTemplate"}}, func(o map[string]any) int64 {
			r, _, _ := unstructured.NestedInt64(o, "spec", "replicas")
			s, _, _ := unstructured.NestedInt64(o, "spec", "leaderWorkerTemplate", "size")
			return r * s
		}},
	} {
		docs := documents(t, c.file)
		if len(docs) != 3 {
			t.Fatalf("%s: %d objects, want a PodGroup, a GpuClaimTemplate and the workload", c.file, len(docs))
		}
		group, tmplObj, workload := docs[0], docs[1], docs[2]
		if group.GetAPIVersion() != "scheduling.x-k8s.io/v1alpha1" || group.GetKind() != "PodGroup" {
			t.Fatalf("%s: first object %s %s, want a coscheduling PodGroup", c.file, group.GetAPIVersion(), group.GetKind())
		}
		minMember, _, _ := unstructured.NestedInt64(group.Object, "spec", "minMember")
		if want := c.pods(workload.Object); minMember < 1 || minMember != want {
			t.Errorf("%s: PodGroup minMember %d, the workload runs %d pods", c.file, minMember, want)
		}
		var ct apiv1.GpuClaimTemplate
		raw, _ := json.Marshal(tmplObj.Object)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ct); err != nil || ct.Kind != "GpuClaimTemplate" {
			t.Fatalf("%s: second object: %v (%s), want a GpuClaimTemplate", c.file, err, ct.Kind)
		}
		if ct.Spec.Spec.GangRef != "" {
			t.Errorf("%s: template sets gangRef %q; the PodGroup makes the gang", c.file, ct.Spec.Spec.GangRef)
		}
		for _, path := range c.templates {
			pt := strictPodTemplate(t, c.file, workload.Object, path...)
			if pt.Labels[claims.LabelPodGroup] != group.GetName() || pt.Annotations[apiv1.AnnotationClaimTemplate] != ct.Name || pt.Spec.SchedulerName != apiv1.SchedulerName {
				t.Errorf("%s: pod template %v: labels %v annotations %v scheduler %q; want PodGroup %s, template %s and %s",
					c.file, path, pt.Labels, pt.Annotations, pt.Spec.SchedulerName, group.GetName(), ct.Name, apiv1.SchedulerName)
			}
			if len(pt.Annotations) != 1 {
				t.Errorf("%s: pod template %v has annotations %v; the claim template's is the only one needed", c.file, path, pt.Annotations)
			}
		}
	}
}
