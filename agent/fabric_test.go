package agent_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const gb200 = "gb200-nvl72"

// refreshNode shows the agent the node as the apiserver has it now, as its informer would.
func (h *harness) refreshNode() *corev1.Node {
	h.t.Helper()
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	// The fake clientset keeps a node's resourceVersion; an apiserver moves it on every
	// change, and the agent does not send a label patch twice for one resourceVersion.
	h.rv++
	n.ResourceVersion = strconv.Itoa(h.rv)
	if err := h.nodes.Update(n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) nodeLabel() (string, bool) {
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	v, ok := n.Labels[apiv1.LabelGPUClique]
	return v, ok
}

// wantClique is the clique the mock puts the harness's node in: its gb200-nvl72 preset says
// clique 1 of the domain the node's name falls in.
func wantClique() string {
	return status.Clique(mock.FabricDomain(gb200, node, 18).String(), 1)
}

// A GB200 tray publishes its NVLink domain in status.fabric and the node label, writes nothing
// more while the fabric stays, and takes its own label off when the fabric goes.
func TestFabricStatusAndCliqueLabel(t *testing.T) {
	h := newHarnessWith(t, gb200, nvml.SUCCESS, func(c *agent.Config) { c.TelemetryInterval = -1 })
	st := h.until("a status with the fabric", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Fabric != nil })
	want := apiv1.Fabric{ClusterUUID: mock.FabricDomain(gb200, node, 18).String(), CliqueID: 1, Clique: wantClique(), State: "Completed"}
	if *st.Status.Fabric != want || st.Status.Message != "" {
		t.Fatalf("fabric %+v, message %q; want %+v and no message", *st.Status.Fabric, st.Status.Message, want)
	}
	h.eventually("the clique label", func() bool { v, _ := h.nodeLabel(); return v == wantClique() })
	if n := h.refreshNode(); n.Annotations[status.AnnotationClique] != wantClique() {
		t.Errorf("annotation %s=%q, want the clique the agent set", status.AnnotationClique, n.Annotations[status.AnnotationClique])
	}
	writes, patches := h.statusWrites(), h.patches()
	for range 20 {
		h.probeRound()
	}
	if got := h.statusWrites(); got != writes {
		t.Errorf("%d status writes after 20 probe rounds with the same fabric, want %d", got, writes)
	}
	if got := h.patches(); got != patches {
		t.Errorf("%d node patches after 20 probe rounds with the same fabric, want %d", got, patches)
	}

	// The fabric goes (the fabric manager stopped, the tray left the rack).
	for i := range h.srv.NumDevices() {
		h.srv.SetFabric(i, &mock.FabricAnswer{Return: nvml.ERROR_NOT_SUPPORTED})
	}
	h.probeRound()
	h.until("the fabric gone from the status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Fabric == nil })
	h.nudging("the agent's clique label removed", func() bool { _, ok := h.nodeLabel(); return !ok })
	if n := h.refreshNode(); n.Annotations[status.AnnotationClique] != "" {
		t.Errorf("annotation %s=%q left behind", status.AnnotationClique, n.Annotations[status.AnnotationClique])
	}

	// The GPUs come back, but one in another clique: no clique is published, and the message
	// says why.
	for i := range h.srv.NumDevices() {
		h.srv.SetFabric(i, nil)
	}
	other := nvml.GpuFabricInfo{ClusterUuid: mock.FabricDomain(gb200, "other-0", 18), CliqueId: 4, State: nvml.GPU_FABRIC_STATE_COMPLETED}
	h.srv.SetFabric(3, &mock.FabricAnswer{Info: other, Return: nvml.SUCCESS})
	h.probeRound()
	st = h.until("the disagreement in the message", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Message != "" })
	if st.Status.Fabric != nil || !strings.Contains(st.Status.Message, "GPUs 0,1,2 in clique "+wantClique()) ||
		!strings.Contains(st.Status.Message, "GPU 3 in clique") {
		t.Errorf("fabric %+v, message %q; want none and the GPUs' cliques", st.Status.Fabric, st.Status.Message)
	}
	h.refreshNode()
	h.probeRound()
	if v, ok := h.nodeLabel(); ok {
		t.Errorf("clique label %q set while the GPUs disagree", v)
	}
}

// A clique label someone else set (NVIDIA's GPU Feature Discovery) stays as it is, even when
// NVML says otherwise.
func TestCliqueLabelOfAnotherManagerLeftAlone(t *testing.T) {
	const theirs = "someone-else.7"
	h := newHarnessOnNode(t, gb200, nvml.SUCCESS, map[string]string{apiv1.LabelGPUClique: theirs},
		func(c *agent.Config) { c.TelemetryInterval = -1 })
	h.until("a status with the fabric", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Fabric != nil })
	h.eventually("the GPU labels", func() bool { return h.patches() == 1 })
	n := h.refreshNode()
	if n.Labels[apiv1.LabelGPUClique] != theirs || n.Annotations[status.AnnotationClique] != "" {
		t.Errorf("clique label %q, annotation %q; want %q left alone and no annotation",
			n.Labels[apiv1.LabelGPUClique], n.Annotations[status.AnnotationClique], theirs)
	}
	if n.Labels[apiv1.LabelGPUCount] != "4" {
		t.Errorf("GPU count label %q, want 4", n.Labels[apiv1.LabelGPUCount])
	}
	// The fabric goes: the label is still not the agent's to remove.
	for i := range h.srv.NumDevices() {
		h.srv.SetFabric(i, &mock.FabricAnswer{Return: nvml.ERROR_NOT_SUPPORTED})
	}
	h.probeRound()
	h.until("the fabric gone from the status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Fabric == nil })
	h.probeRound()
	if v, _ := h.nodeLabel(); v != theirs {
		t.Errorf("clique label %q, want %q left alone", v, theirs)
	}
}
