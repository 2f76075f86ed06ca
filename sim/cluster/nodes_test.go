package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestNodePoolValidate(t *testing.T) {
	ok := NodePool{Name: "a100", Count: 3, GPUsPerNode: 8, Topology: "dgx-a100", Labels: map[string]string{"zone": "z1"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid pool rejected: %v", err)
	}
	tests := []struct {
		name    string
		mutate  func(*NodePool)
		wantErr string
	}{
		{"bad name", func(p *NodePool) { p.Name = "A_100" }, "name"},
		{"no nodes", func(p *NodePool) { p.Count = 0 }, "count 0"},
		{"negative gpus", func(p *NodePool) { p.GPUsPerNode = -1 }, "gpusPerNode"},
		{"bad topology", func(p *NodePool) { p.Topology = "has space" }, "topology"},
		{"bad label key", func(p *NodePool) { p.Labels = map[string]string{"a b": "c"} }, "label key"},
		{"bad label value", func(p *NodePool) { p.Labels = map[string]string{"a": "b c"} }, "label a="},
		{"negative pods", func(p *NodePool) { p.Pods = -1 }, "pods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.mutate(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestNodePoolNode(t *testing.T) {
	p := NodePool{Name: "h100", Count: 2, GPUsPerNode: 8, Topology: "dgx-h100",
		Labels: map[string]string{"zone": "z1", LabelPool: "override-attempt"},
		Taints: []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}}
	n := p.Node(1)
	if n.Name != "h100-00001" {
		t.Errorf("name %q", n.Name)
	}
	want := map[string]string{LabelPool: "h100", gpuv1.LabelTopology: "dgx-h100", "zone": "z1",
		corev1.LabelHostname: "h100-00001", LabelKwokType: "kwok"}
	for k, v := range want {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Annotations[AnnotationKwokNode] != KwokNodeValue {
		t.Errorf("node not marked for kwok: %v", n.Annotations)
	}
	gpus := n.Status.Allocatable[ResourceGPU]
	if gpus.Value() != 8 {
		t.Errorf("allocatable GPUs %s", gpus.String())
	}
	if c := n.Status.Capacity[ResourceGPU]; c.Value() != 8 {
		t.Errorf("capacity GPUs %s", c.String())
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "gpu" {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	// Nodes share nothing mutable with the pool or each other.
	n.Spec.Taints[0].Key = "changed"
	n.Labels["zone"] = "changed"
	if p.Taints[0].Key != "gpu" || p.Labels["zone"] != "z1" || p.Node(0).Labels["zone"] != "z1" {
		t.Error("Node aliases the pool's taints or labels")
	}
}

func TestNodeSchedulable(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	tests := []struct {
		name string
		node corev1.Node
		want bool
	}{
		{"no conditions", corev1.Node{}, false},
		{"ready", corev1.Node{Status: corev1.NodeStatus{Conditions: ready}}, true},
		{"not ready", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}}, false},
		{"ready but not-ready taint", corev1.Node{
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: ready}}, false},
		{"ready with user taint", corev1.Node{
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: ready}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeSchedulable(&tt.node); got != tt.want {
				t.Errorf("NodeSchedulable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCreateNodesRefusesIndicesOutsideThePool(t *testing.T) {
	pool := NodePool{Name: "a100", Count: 2, GPUsPerNode: 8}
	// Checked before any request: the zero Cluster has no client to send one with.
	err := (&Cluster{}).CreateNodes(context.Background(), pool, []int{0, 2})
	if err == nil || !strings.Contains(err.Error(), "node pool a100: no node 2 (it has 2)") {
		t.Fatalf("err = %v, want one naming node 2 of pool a100", err)
	}
}
