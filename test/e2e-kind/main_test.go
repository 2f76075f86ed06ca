package main

import (
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestKindConfig(t *testing.T) {
	o := defaultOptions()
	o.Workers = 3
	var cfg v1alpha4.Cluster
	if err := yaml.UnmarshalStrict(o.kindConfig(), &cfg); err != nil {
		t.Fatalf("kind config: %v\n%s", err, o.kindConfig())
	}
	if cfg.Kind != "Cluster" || cfg.APIVersion != "kind.x-k8s.io/v1alpha4" || len(cfg.Nodes) != 4 {
		t.Fatalf("kind config %+v, want a v1alpha4 Cluster with 4 nodes", cfg)
	}
	for i, n := range cfg.Nodes[1:] {
		if n.Role != v1alpha4.WorkerRole || n.Labels[gpuNodeLabel] != "true" || n.Labels[apiv1.LabelTopology] != mockTopology {
			t.Errorf("worker %d: %+v, want a worker labelled %s=true and %s=%s", i, n, gpuNodeLabel, apiv1.LabelTopology, mockTopology)
		}
	}
	if cfg.Nodes[0].Role != v1alpha4.ControlPlaneRole || len(cfg.Nodes[0].Labels) != 0 {
		t.Errorf("node 0: %+v, want an unlabelled control plane", cfg.Nodes[0])
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := defaultOptions().validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mutate := range map[string]func(*options){
		"no workers":  func(o *options) { o.Workers = 0 },
		"no tag":      func(o *options) { o.ImageTag = "" },
		"no timeout":  func(o *options) { o.Timeout = 0 },
		"mock agents": func(o *options) { o.MockAgents = "real" },
	} {
		o := defaultOptions()
		mutate(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: validate accepted %+v", name, o)
		}
	}
}

func TestHelmInstallArgs(t *testing.T) {
	o := defaultOptions()
	o.ImageRegistry, o.ImageTag = "localhost:5000/gs", "pr-7"
	args := o.helmInstallArgs("/tmp/kc")
	for _, want := range []string{
		"scheduler.image.repository=localhost:5000/gs/gpu-scheduler", "scheduler.image.tag=pr-7",
		"webhook.image.repository=localhost:5000/gs/gpu-webhook", "webhook.image.tag=pr-7",
		"scheduler.image.pullPolicy=Never", "webhook.image.pullPolicy=Never", "agent.enabled=false",
		"controller.image.repository=localhost:5000/gs/gpu-controller", "controller.image.tag=pr-7", "controller.image.pullPolicy=Never",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("helm args %v lack --set %s", args, want)
		}
	}
	if i := slices.Index(args, "--namespace"); i < 0 || args[i+1] != "gpu-scheduler" {
		t.Errorf("helm args %v: want --namespace gpu-scheduler", args)
	}
	if got := o.images(); got[0] != "localhost:5000/gs/gpu-scheduler:pr-7" || got[2] != "localhost:5000/gs/gpu-controller:pr-7" || len(got) != 4 {
		t.Errorf("images = %v", got)
	}
}

func TestCheckSmoke(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", UID: "uid-1", Annotations: map[string]string{apiv1.AnnotationAllocated: "kind-worker:2,3"}},
		Spec:       corev1.PodSpec{NodeName: "kind-worker"},
	}
	held := func(n int) []coordinationv1.Lease {
		var out []coordinationv1.Lease
		for i := 0; i < n; i++ {
			out = append(out, coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("uid-1")}})
		}
		return append(out, coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else")}})
	}
	if err := checkSmoke(pod, "CUDA_VISIBLE_DEVICES=2,3\n", held(2)); err != nil {
		t.Fatalf("a good run: %v", err)
	}
	for name, tc := range map[string]struct {
		logs   string
		leases int
		alloc  string
		want   string
	}{
		"wrong devices": {"CUDA_VISIBLE_DEVICES=0,1", 2, "kind-worker:2,3", "want \"CUDA_VISIBLE_DEVICES=2,3\""},
		"no variable":   {"CUDA_VISIBLE_DEVICES=", 2, "kind-worker:2,3", "printed"},
		"missing lease": {"CUDA_VISIBLE_DEVICES=2,3", 1, "kind-worker:2,3", "1 GPU leases"},
		"other node":    {"CUDA_VISIBLE_DEVICES=2,3", 2, "kind-worker2:2,3", "want two GPUs on its node"},
		"no allocation": {"CUDA_VISIBLE_DEVICES=2,3", 2, "", "allocation"},
		"one GPU only":  {"CUDA_VISIBLE_DEVICES=2", 1, "kind-worker:2", "want two GPUs"},
	} {
		p := pod.DeepCopy()
		p.Annotations[apiv1.AnnotationAllocated] = tc.alloc
		err := checkSmoke(p, tc.logs, held(tc.leases))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestMockStatusKeepsInUseBy(t *testing.T) {
	st := mockStatus([]apiv1.Device{{ID: 5, InUseBy: []string{"uid-1"}}})
	if st.Total != 8 || len(st.Devices) != 8 || st.LastHeartbeatTime.IsZero() {
		t.Fatalf("status %+v, want 8 devices and a heartbeat", st)
	}
	if got := st.Devices[5].InUseBy; !slices.Equal(got, []string{"uid-1"}) {
		t.Errorf("GPU 5 inUseBy = %v, want the previous [uid-1]", got)
	}
	if st.Devices[0].Island == st.Devices[4].Island {
		t.Errorf("GPUs 0 and 4 share island %q; the two-island box has two", st.Devices[0].Island)
	}
}

// The topology the workers carry is one the agent's mock NVML knows, and the fleet agent gets
// the release's lease namespace.
func TestFleetAgent(t *testing.T) {
	if !slices.Contains(mock.Names(), mockTopology) {
		t.Errorf("agent/mock has no topology %q", mockTopology)
	}
	o := defaultOptions()
	o.Namespace = "gpu-system"
	argv := o.fleetArgs("/tmp/kc")
	args := strings.Join(argv, " ")
	if argv[0] != "agent-fleet" || !strings.Contains(args, "--lease-namespace gpu-system") || !strings.Contains(args, "--kubeconfig /tmp/kc") {
		t.Errorf("fleet args %q", args)
	}
}
