package dra

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// discovered runs the agent's discovery on a mock topology and returns the devices as the
// agent reports them (all Healthy).
func discovered(t *testing.T, topo string) []apiv1.Device {
	t.Helper()
	srv, err := mock.New(topo, mock.WithSeed("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	lib := nvmlgpu.New(srv, nvmlgpu.Options{})
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lib.Shutdown() }()
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	inv, err := topology.Discover(devs)
	if err != nil {
		t.Fatal(err)
	}
	var out []apiv1.Device
	for _, d := range inv {
		out = append(out, apiv1.Device{ID: int32(d.Index), UUID: d.UUID, Product: d.Product, MemoryMiB: d.MemoryMiB,
			PCIBusID: d.PCIBusID, Island: d.Island, BandwidthGBps: d.BandwidthGBps, Health: apiv1.Healthy})
	}
	return out
}

// validSlice checks the slice the way the apiserver does.
func validSlice(t *testing.T, s *resourceapi.ResourceSlice) {
	t.Helper()
	var internal resourceinternal.ResourceSlice
	if err := legacyscheme.Scheme.Convert(s, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceSlice(&internal); len(errs) > 0 {
		t.Fatalf("the apiserver would refuse slice %s: %v", s.Name, errs.ToAggregate())
	}
}

func str(a resourceapi.DeviceAttribute) string {
	if a.StringValue == nil {
		return "<none>"
	}
	return *a.StringValue
}

func TestSliceFromDiscovery(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pairs-00003", UID: "u1"}}
	devices := discovered(t, "pcie-nvlink-pairs")
	devices[5].Health, devices[5].Reason, devices[5].BandwidthGBps = apiv1.Unhealthy, "Xid 79", 0
	s := Slice(node, devices, 3)
	validSlice(t, s)

	if s.Spec.Driver != DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node.Name ||
		s.Spec.Pool.Name != node.Name || s.Spec.Pool.Generation != 3 || s.Spec.Pool.ResourceSliceCount != 1 {
		t.Errorf("slice spec = %+v, want driver %s, node and pool %s, generation 3 of 1 slice", s.Spec, DriverName, node.Name)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].UID != "u1" {
		t.Errorf("owner references = %+v, want the node", s.OwnerReferences)
	}
	if len(s.Spec.Devices) != 8 {
		t.Fatalf("%d devices, want one per GPU (8)", len(s.Spec.Devices))
	}
	for i, d := range s.Spec.Devices {
		if d.Name != DeviceName(int32(i)) || *d.Attributes[AttrIndex].IntValue != int64(i) {
			t.Errorf("device %d is %s with index %v", i, d.Name, d.Attributes[AttrIndex].IntValue)
		}
		// The islands are the agent's: NVLink pairs {0,1} {2,3} ...
		if got, want := str(d.Attributes[AttrIsland]), devices[i].Island; got != want || want == "" {
			t.Errorf("device %d island %q, want the agent's %q", i, got, want)
		}
		if got := str(d.Attributes[AttrUUID]); got != devices[i].UUID {
			t.Errorf("device %d uuid %q, want %q", i, got, devices[i].UUID)
		}
		if mem := d.Capacity[CapMemory].Value; mem.Value() != devices[i].MemoryMiB<<20 {
			t.Errorf("device %d memory %s, want %d MiB", i, mem.String(), devices[i].MemoryMiB)
		}
		tainted := len(d.Taints) == 1 && d.Taints[0].Key == TaintUnhealthy && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
		if tainted != (i == 5) {
			t.Errorf("device %d taints %+v; only GPU 5 (Unhealthy) should carry %s NoSchedule", i, d.Taints, TaintUnhealthy)
		}
	}
	if str(s.Spec.Devices[0].Attributes[AttrIsland]) != str(s.Spec.Devices[1].Attributes[AttrIsland]) ||
		str(s.Spec.Devices[1].Attributes[AttrIsland]) == str(s.Spec.Devices[2].Attributes[AttrIsland]) {
		t.Errorf("GPUs 0 and 1 should share an island and 2 not: %s %s %s", str(s.Spec.Devices[0].Attributes[AttrIsland]),
			str(s.Spec.Devices[1].Attributes[AttrIsland]), str(s.Spec.Devices[2].Attributes[AttrIsland]))
	}
	if got := str(s.Spec.Devices[5].Attributes[AttrHealth]); got != "Unhealthy" {
		t.Errorf("GPU 5 health attribute %q, want Unhealthy", got)
	}
}

// A GPU lost during discovery has no facts: it must still make a valid device, without an island.
func TestSliceLostGPU(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u"}}
	s := Slice(node, []apiv1.Device{{ID: 0, Health: apiv1.Unknown}, {ID: 1, Island: "nvlink-group-1", Health: apiv1.Healthy, MemoryMiB: 1024}}, 1)
	validSlice(t, s)
	if _, ok := s.Spec.Devices[0].Attributes[AttrIsland]; ok {
		t.Errorf("a lost GPU got an island: %+v", s.Spec.Devices[0].Attributes)
	}
	if len(s.Spec.Devices[0].Taints) != 1 || s.Spec.Devices[0].Taints[0].Value != "Unknown" {
		t.Errorf("a GPU of Unknown health should be tainted: %+v", s.Spec.Devices[0].Taints)
	}
}

func TestDeviceClassValid(t *testing.T) {
	var internal resourceinternal.DeviceClass
	if err := legacyscheme.Scheme.Convert(DeviceClass(), &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateDeviceClass(&internal); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
}

func TestDeviceIndex(t *testing.T) {
	for name, want := range map[string]int{"gpu-0": 0, "gpu-15": 15} {
		if got, err := DeviceIndex(name); err != nil || got != want {
			t.Errorf("DeviceIndex(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	for _, bad := range []string{"", "gpu-", "gpu-x", "mig-1", "gpu--1"} {
		if _, err := DeviceIndex(bad); err == nil {
			t.Errorf("DeviceIndex(%q) took a name that is not ours", bad)
		}
	}
}

// The publisher writes a node's slice once, not again for usage, and again (with a higher pool
// generation) when a GPU's health changes.
func TestPublisherWritesOnChangeOnly(t *testing.T) {
	cs := fake.NewClientset()
	p, err := NewPublisher(PublisherConfig{Client: cs, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h100-00000", UID: "u"}}
	hook := p.Hook(node)
	devices := discovered(t, "dgx-h100")
	hook(devices)
	get := func() *resourceapi.ResourceSlice {
		var s *resourceapi.ResourceSlice
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			s, err = cs.ResourceV1().ResourceSlices().Get(ctx, SliceName(node.Name), metav1.GetOptions{})
			return err == nil && p.Published() == 1, nil // the count follows the write's return
		})
		if err != nil {
			t.Fatalf("no slice for %s: %v", node.Name, err)
		}
		return s
	}
	first := get()
	if len(first.Spec.Devices) != 8 || p.Published() != 1 {
		t.Fatalf("slice with %d devices, %d nodes published; want 8 and 1", len(first.Spec.Devices), p.Published())
	}

	writes := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetResource().Resource == "resourceslices" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
				n++
			}
		}
		return n
	}
	busy := append([]apiv1.Device(nil), devices...)
	busy[0].InUseBy = []string{"pod-uid"}
	hook(busy) // usage only
	sick := append([]apiv1.Device(nil), devices...)
	sick[3].Health, sick[3].BandwidthGBps = apiv1.Unhealthy, 0
	hook(sick)
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := cs.ResourceV1().ResourceSlices().Get(ctx, SliceName(node.Name), metav1.GetOptions{})
		return err == nil && len(s.Spec.Devices[3].Taints) == 1, nil
	})
	if err != nil {
		t.Fatalf("GPU 3 turned Unhealthy but its device was not tainted: %v", err)
	}
	s := get()
	if s.Spec.Pool.Generation <= first.Spec.Pool.Generation {
		t.Errorf("pool generation %d after a change, want above %d", s.Spec.Pool.Generation, first.Spec.Pool.Generation)
	}
	if n := writes(); n != 2 {
		t.Errorf("%d slice writes, want 2 (the create and the health change; none for usage): %v", n, cs.Actions())
	}
}

// A slice left by an earlier publisher is taken over (updated), not a reason to fail.
func TestPublisherTakesOverExistingSlice(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u"}}
	old := Slice(node, []apiv1.Device{{ID: 0, Health: apiv1.Healthy}}, 7)
	cs := fake.NewClientset(old)
	var updated *resourceapi.ResourceSlice
	cs.PrependReactor("update", "resourceslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		updated = a.(clienttesting.UpdateAction).GetObject().(*resourceapi.ResourceSlice)
		return false, nil, nil
	})
	p, err := NewPublisher(PublisherConfig{Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	p.Hook(node)(discovered(t, "dgx-h100"))
	if err := p.sync(context.Background(), node.Name); err != nil {
		t.Fatal(err)
	}
	if updated == nil || len(updated.Spec.Devices) != 8 || updated.Spec.Pool.Generation != 8 {
		t.Fatalf("the existing slice was not updated to 8 devices at generation 8: %+v", updated)
	}
}
