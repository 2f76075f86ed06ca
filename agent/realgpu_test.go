package agent_test

import (
	"context"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/dra"
)

// TestRealAgent runs the whole node agent, as gpu-agent does, over the real GPUs of this machine
// (real NVML, real clock) against fake API clients, with the DRA publisher hooked in. It logs the
// GpuNodeStatus the scheduler would place from and the ResourceSlice a DRA scheduler would
// allocate from, and checks both against nvidia-smi, which reads the driver through another
// path: the same GPUs in the same order, with the same UUIDs, names, memory and bus IDs, all
// Healthy and with telemetry. It skips where NVML cannot start (no NVIDIA driver); make e2e-gpu
// fails a skip on a machine with a driver.
func TestRealAgent(t *testing.T) {
	probe := nvmlgpu.New(nvml.New(), nvmlgpu.Options{})
	if err := probe.Init(); err != nil {
		t.Skipf("no NVML here (no NVIDIA driver): %v", err)
	}
	_ = probe.Shutdown()
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		t.Fatalf("NVML works but nvidia-smi is not on PATH: %v", err)
	}

	const name = "gpu-node-real"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "real-node-uid", ResourceVersion: "1"}}
	kube := fake.NewClientset(n)
	gpus := gpufake.NewSimpleClientset()
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(n); err != nil {
		t.Fatal(err)
	}
	inf, err := leases.Informer(leases.NewInformerFactory(kube, "gpu-scheduler", name, 0))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := dra.NewPublisher(dra.PublisherConfig{Client: kube})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		NodeName: name, GPUs: nvmlgpu.New(nvml.New(), nvmlgpu.Options{EventWaitTimeout: 500 * time.Millisecond}),
		GPUClient: gpus, KubeClient: kube, Nodes: corelisters.NewNodeLister(nodes), Leases: inf.GetIndexer(),
		TelemetryInterval: time.Second, MinWriteInterval: -1, OnDevices: pub.Hook(n),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- a.Run(ctx) }()
	go func() { pub.Run(ctx); done <- nil }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("agent Run: %v", err)
			}
		}
	}()

	var st *apiv1.GpuNodeStatus
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		st = got
		return pub.Published() > 0 && len(got.Status.Devices) > 0 && got.Status.Devices[0].UtilizationPercent != nil, nil
	})
	if err != nil {
		t.Fatalf("the agent wrote no GpuNodeStatus with telemetry and no ResourceSlice in 30s (last status %+v)", st)
	}
	slice, err := kube.ResourceV1().ResourceSlices().Get(ctx, dra.SliceName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the DRA publisher wrote no ResourceSlice: %v", err)
	}
	for what, obj := range map[string]any{"GpuNodeStatus": st, "ResourceSlice": slice} {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s the agent wrote:\n%s", what, b)
	}

	// nvidia-smi orders GPUs by PCI bus ID, as NVML indexes them.
	out, err := exec.Command(smi, "--query-gpu=index,uuid,name,memory.total,pci.bus_id", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	rows := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(rows) != len(st.Status.Devices) || int(st.Status.Total) != len(rows) || int(st.Status.Healthy) != len(rows) {
		t.Fatalf("nvidia-smi lists %d GPUs; the status has %d devices, total %d, healthy %d", len(rows), len(st.Status.Devices), st.Status.Total, st.Status.Healthy)
	}
	for i, row := range rows {
		f := strings.Split(row, ", ")
		if len(f) != 5 {
			t.Fatalf("nvidia-smi row %q", row)
		}
		d := st.Status.Devices[i]
		mem, _ := strconv.ParseInt(f[3], 10, 64)
		if strconv.Itoa(int(d.ID)) != f[0] || d.UUID != f[1] || d.Product != f[2] || d.MemoryMiB != mem || !strings.EqualFold(d.PCIBusID, f[4]) {
			t.Errorf("GPU %d: the status says id %d uuid %s product %q memory %d MiB bus %s; nvidia-smi says %q", i, d.ID, d.UUID, d.Product, d.MemoryMiB, d.PCIBusID, row)
		}
		if d.Health != apiv1.Healthy || d.UtilizationPercent == nil {
			t.Errorf("GPU %d: health %s, utilisation %v", d.ID, d.Health, d.UtilizationPercent)
		}
		dev := slice.Spec.Devices[i]
		if dev.Name != dra.DeviceName(d.ID) || dev.Attributes[dra.AttrUUID].StringValue == nil || *dev.Attributes[dra.AttrUUID].StringValue != f[1] || len(dev.Taints) > 0 {
			t.Errorf("GPU %d: ResourceSlice device %s, uuid %v, taints %v", d.ID, dev.Name, dev.Attributes[dra.AttrUUID].StringValue, dev.Taints)
		}
	}
	islands := map[string]bool{}
	for _, d := range st.Status.Devices {
		islands[d.Island] = true
	}
	t.Logf("%d GPUs in %d NVLink island(s) %v", len(rows), len(islands), slices.Sorted(maps.Keys(islands)))
}
