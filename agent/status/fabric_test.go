package status_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const cluster = "4f6c0d5e-1111-5222-8333-944455566677"

func fabrics(fs ...gpu.Fabric) []status.GPUFabric {
	out := make([]status.GPUFabric, len(fs))
	for i, f := range fs {
		out[i] = status.GPUFabric{Index: i, Fabric: f}
	}
	return out
}

func TestNodeFabric(t *testing.T) {
	done := gpu.Fabric{State: gpu.FabricCompleted, ClusterUUID: cluster, CliqueID: 2}
	other := gpu.Fabric{State: gpu.FabricCompleted, ClusterUUID: cluster, CliqueID: 3}
	none := gpu.Fabric{State: gpu.FabricNotSupported}
	for _, c := range []struct {
		name    string
		gpus    []status.GPUFabric
		want    *apiv1.Fabric
		message string // a part of the message; "" wants none
	}{
		{"no GPUs", nil, nil, ""},
		{"no domain", fabrics(none, none), nil, ""},
		{"one clique", fabrics(done, done, done, done),
			&apiv1.Fabric{ClusterUUID: cluster, CliqueID: 2, Clique: cluster + ".2", State: "Completed"}, ""},
		{"registering", fabrics(done, gpu.Fabric{State: gpu.FabricInProgress}, gpu.Fabric{State: gpu.FabricNotStarted}),
			&apiv1.Fabric{State: "NotStarted"}, ""},
		{"still in progress", fabrics(done, gpu.Fabric{State: gpu.FabricInProgress}), &apiv1.Fabric{State: "InProgress"}, ""},
		{"two cliques", fabrics(done, done, other), nil,
			"the GPUs disagree on their NVLink domain (GPUs 0,1 in clique " + cluster + ".2, GPU 2 in clique " + cluster + ".3)"},
		{"some in none", fabrics(none, done), nil, "GPU 0 in no NVLink domain, GPU 1 in clique"},
		{"registration failed", fabrics(done, gpu.Fabric{State: gpu.FabricCompleted, Err: errors.New("no route")}), nil,
			"NVLink fabric registration failed (GPU 1: no route)"},
	} {
		got, msg := status.NodeFabric(c.gpus)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: fabric %+v, want %+v", c.name, got, c.want)
		}
		if c.message == "" && msg != "" || !strings.Contains(msg, c.message) {
			t.Errorf("%s: message %q, want one with %q", c.name, msg, c.message)
		}
	}
}

// The agent sets the clique label where none is, follows it while it is its own, and leaves a
// label someone else set alone.
func TestSyncLabelsClique(t *testing.T) {
	const mine, theirs = cluster + ".2", cluster + ".9"
	labels := map[string]string{apiv1.LabelGPUCount: "4"}
	for _, c := range []struct {
		name                   string
		label, annotation      *string
		clique                 string
		wantLabel, wantAnnot   *string
		wantPatch, wantConflct bool
	}{
		{name: "absent: set", clique: mine, wantLabel: strp(mine), wantAnnot: strp(mine), wantPatch: true},
		{name: "absent, no fabric: nothing", clique: ""},
		{name: "its own, unchanged: nothing", label: strp(mine), annotation: strp(mine), clique: mine,
			wantLabel: strp(mine), wantAnnot: strp(mine)},
		{name: "its own, fabric gone: removed", label: strp(mine), annotation: strp(mine), clique: "", wantPatch: true},
		{name: "its own, clique moved: follows", label: strp(mine), annotation: strp(mine), clique: theirs,
			wantLabel: strp(theirs), wantAnnot: strp(theirs), wantPatch: true},
		{name: "someone else's, different: left alone", label: strp(theirs), clique: mine,
			wantLabel: strp(theirs), wantConflct: true},
		{name: "someone else's, same: left alone, not taken", label: strp(mine), clique: mine, wantLabel: strp(mine)},
		{name: "someone else's, fabric gone: left alone", label: strp(theirs), clique: "", wantLabel: strp(theirs), wantConflct: true},
		{name: "someone replaced the agent's value: left alone, record dropped", label: strp(theirs), annotation: strp(mine),
			clique: mine, wantLabel: strp(theirs), wantPatch: true, wantConflct: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "5",
				Labels: map[string]string{apiv1.LabelGPUCount: "4"}, Annotations: map[string]string{}}}
			if c.label != nil {
				n.Labels[apiv1.LabelGPUClique] = *c.label
			}
			if c.annotation != nil {
				n.Annotations[status.AnnotationClique] = *c.annotation
			}
			kube := fake.NewClientset(n)
			w := status.NewWriter(status.Config{Node: "n1", GPUClient: gpufake.NewSimpleClientset(), KubeClient: kube,
				Clock: clocktesting.NewFakePassiveClock(metav1.Now().Time)})
			patched, conflict, err := w.SyncLabels(context.Background(), n, labels, c.clique)
			if err != nil {
				t.Fatal(err)
			}
			if patched != c.wantPatch || (conflict != "") != c.wantConflct {
				t.Errorf("patched %v, conflict %q; want patched %v, a conflict %v", patched, conflict, c.wantPatch, c.wantConflct)
			}
			if c.wantConflct && !strings.Contains(conflict, apiv1.LabelGPUClique) {
				t.Errorf("conflict %q does not name the label", conflict)
			}
			got, err := kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, m map[string]string, key string, want *string) {
				v, ok := m[key]
				switch {
				case want == nil && ok:
					t.Errorf("%s %s=%q, want none", what, key, v)
				case want != nil && (!ok || v != *want):
					t.Errorf("%s %s=%q (present %v), want %q", what, key, v, ok, *want)
				}
			}
			check("label", got.Labels, apiv1.LabelGPUClique, c.wantLabel)
			check("annotation", got.Annotations, status.AnnotationClique, c.wantAnnot)
			if got.Labels[apiv1.LabelGPUCount] != "4" {
				t.Errorf("the other labels changed: %v", got.Labels)
			}
		})
	}
}

func strp(s string) *string { return &s }
