package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"github.com/gpu-scheduler/gpu-scheduler/agent/nvmlgpu"
	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const node = "node-a"

type harness struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	srv    *mock.Server
	gpu    *gpufake.Clientset
	kube   *fake.Clientset
	leases cache.Indexer
	// nodes is the agent's node cache; refreshNode copies the fake's node into it.
	nodes cache.Indexer
	rv    int
	agent *agent.Agent
}

// newHarness runs an agent over a mock topology whose NVML initialisation fails with initErr
// (nvml.SUCCESS: it works), against fake clients holding the node and existing statuses.
func newHarness(t *testing.T, topology string, initErr nvml.Return, existing ...*apiv1.GpuNodeStatus) *harness {
	t.Helper()
	return newHarnessWith(t, topology, initErr, nil, existing...)
}

// newHarnessWith is newHarness with edit applied to the agent's configuration. The mock GPUs'
// load follows the harness's fake clock.
func newHarnessWith(t *testing.T, topology string, initErr nvml.Return, edit func(*agent.Config), existing ...*apiv1.GpuNodeStatus) *harness {
	t.Helper()
	return newHarnessOnNode(t, topology, initErr, nil, edit, existing...)
}

// newHarnessOnNode is newHarnessWith on a node that starts with labels.
func newHarnessOnNode(t *testing.T, topology string, initErr nvml.Return, labels map[string]string, edit func(*agent.Config), existing ...*apiv1.GpuNodeStatus) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	srv, err := mock.New(topology, mock.WithSeed(node), mock.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetInitError(initErr)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid", ResourceVersion: "1", Labels: labels}}
	h := &harness{t: t, clk: clk, srv: srv, kube: fake.NewClientset(n)}
	objs := make([]runtime.Object, 0, len(existing))
	for _, e := range existing {
		objs = append(objs, e)
	}
	h.gpu = gpufake.NewSimpleClientset(objs...)
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(n); err != nil {
		t.Fatal(err)
	}
	inf, err := leases.Informer(leases.NewInformerFactory(h.kube, "gpu-scheduler", node, 0))
	if err != nil {
		t.Fatal(err)
	}
	h.leases, h.nodes, h.rv = inf.GetIndexer(), nodes, 1
	cfg := agent.Config{
		NodeName: node, GPUs: nvmlgpu.New(srv, nvmlgpu.Options{EventWaitTimeout: 5 * time.Millisecond}),
		GPUClient: h.gpu, KubeClient: h.kube, Nodes: corelisters.NewNodeLister(nodes), Leases: h.leases, Clock: h.clk,
		HeartbeatInterval: 2 * time.Hour, StatusRefreshInterval: 2 * time.Hour, ProbeInterval: 30 * time.Second, MinWriteInterval: -1,
		RecoveryQuietPeriod: 5 * time.Minute, InitBackoff: 10 * time.Second, MaxInitBackoff: time.Minute,
	}
	if edit != nil {
		edit(&cfg)
	}
	h.agent, err = agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// eventually polls cond for a bounded real time.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		h.t.Fatalf("%s: never happened", what)
	}
}

// nudging polls cond like eventually, moving the fake clock on by 100ms every 20 polls: the
// loop may have been between two waits when the test moved the clock, and then waits for a
// deadline just past the new time.
func (h *harness) nudging(what string, cond func() bool) {
	h.t.Helper()
	polls := 0
	h.eventually(what, func() bool {
		if polls++; polls%20 == 0 {
			h.clk.Step(100 * time.Millisecond)
		}
		return cond()
	})
}

// probeRound steps the clock by one probe interval and waits until the agent has probed.
func (h *harness) probeRound() {
	h.t.Helper()
	before := h.srv.Calls()
	h.clk.Step(30 * time.Second)
	h.nudging("a probe round", func() bool { return h.srv.Calls() > before })
}

// watched waits until the agent listens to every GPU's events.
func (h *harness) watched() {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		for i := range h.srv.NumDevices() {
			if !h.srv.Watched(i) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		h.t.Fatal("the agent never registered for events")
	}
}

// until polls the status until cond holds, stepping the fake clock a second per poll for the
// first limit polls (0: never) for conditions that need time to pass.
func (h *harness) until(what string, limit int, cond func(*apiv1.GpuNodeStatus) bool) *apiv1.GpuNodeStatus {
	h.t.Helper()
	var last *apiv1.GpuNodeStatus
	err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		obj, err := h.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			last = obj
			if cond(obj) {
				return true, nil
			}
		}
		if limit > 0 {
			limit--
			h.clk.Step(time.Second)
		}
		return false, nil
	})
	if err != nil {
		h.t.Fatalf("%s: never happened; last status %+v", what, last)
	}
	return last
}

func (h *harness) statusWrites() int {
	n := 0
	for _, a := range h.gpu.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func health(st *apiv1.GpuNodeStatus, id int) apiv1.Health {
	for _, d := range st.Status.Devices {
		if int(d.ID) == id {
			return d.Health
		}
	}
	return ""
}

func TestTwoIslandStatusAndLabels(t *testing.T) {
	h := newHarness(t, mock.TwoIsland, nvml.SUCCESS)
	st := h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Total == 8 })
	for _, d := range st.Status.Devices {
		wantIsland, wantBW, wantHealth := "nvlink-group-0", int32(600), apiv1.Healthy
		if d.ID >= 4 {
			wantIsland, wantBW = "nvlink-group-1", 64
		}
		if d.ID == 7 {
			wantBW, wantHealth = 0, apiv1.Unhealthy
		}
		if d.Island != wantIsland || d.BandwidthGBps != wantBW || d.Health != wantHealth {
			t.Errorf("GPU %d: %s %d GB/s %s (%s), want %s %d GB/s %s", d.ID, d.Island, d.BandwidthGBps, d.Health, d.Reason, wantIsland, wantBW, wantHealth)
		}
		if d.UUID == "" || d.PCIBusID == "" || d.Product != "NVIDIA A100-SXM4-40GB" || d.MemoryMiB != 40960 {
			t.Errorf("GPU %d facts: %+v", d.ID, d)
		}
	}
	if st.Status.Healthy != 7 || st.Status.Free != 7 || st.Status.LastHeartbeatTime.IsZero() || st.Spec.NodeName != node {
		t.Errorf("status summary: %+v", st.Status)
	}
	if len(st.OwnerReferences) != 1 || st.OwnerReferences[0].Kind != "Node" || st.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("owner references %+v, want the Node", st.OwnerReferences)
	}
	var n *corev1.Node
	h.eventually("node labels", func() bool {
		n, _ = h.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return n != nil && n.Labels[apiv1.LabelGPUCount] != ""
	})
	for k, v := range map[string]string{apiv1.LabelGPUProduct: "NVIDIA-A100-SXM4-40GB", apiv1.LabelGPUCount: "8", apiv1.LabelNVLink: "true"} {
		if n.Labels[k] != v {
			t.Errorf("node label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
}

func TestStatusWrittenOnceWithoutChange(t *testing.T) {
	// Telemetry moves by itself (TestTelemetryKeepsItsWriteBudget); here nothing may change.
	h := newHarnessWith(t, mock.DGXH100, nvml.SUCCESS, func(c *agent.Config) { c.TelemetryInterval = -1 })
	h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	h.eventually("node labels", func() bool { return h.patches() == 1 })
	if got := h.statusWrites(); got != 1 {
		t.Fatalf("%d status writes for the first status, want 1", got)
	}
	// 100 probe rounds, well inside the heartbeat interval: nothing changes, nothing is written.
	for range 100 {
		h.probeRound()
	}
	if got := h.statusWrites(); got != 1 {
		t.Fatalf("%d status writes after 100 unchanged probe rounds, want 1", got)
	}
	if got := h.patches(); got != 1 {
		t.Errorf("%d node label patches, want 1", got)
	}
	// Past the heartbeat interval, exactly one more write refreshes LastHeartbeatTime.
	h.clk.Step(2 * time.Hour)
	h.nudging("a heartbeat write", func() bool { return h.statusWrites() == 2 })
	h.probeRound()
	if got := h.statusWrites(); got != 2 {
		t.Fatalf("%d status writes after one heartbeat, want 2", got)
	}
}

func (h *harness) patches() int {
	n := 0
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

func TestXidMakesUnhealthyAndRecovers(t *testing.T) {
	h := newHarness(t, mock.DGXA100, nvml.SUCCESS)
	st := h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	if st.Status.Devices[0].Island != "nvlink-group-0" || st.Status.Devices[0].BandwidthGBps != 600 {
		t.Fatalf("DGX A100 GPU 0: %+v", st.Status.Devices[0])
	}
	h.watched()
	if err := h.srv.Inject(3, mock.Fault{Kind: mock.FaultXid, Xid: 13}); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Inject(3, mock.Fault{Kind: mock.FaultXid, Xid: mock.XidFallenOffBus}); err != nil {
		t.Fatal(err)
	}
	// Both the Xid and the probe's loss must be in before the reset (see the fleet test).
	st = h.until("GPU 3 lost after Xid 79", 0, func(s *apiv1.GpuNodeStatus) bool {
		r := s.Status.Devices[3].Reason
		return health(s, 3) == apiv1.Unhealthy && strings.Contains(r, "lost") && strings.Contains(r, "Xid 79")
	})
	for _, d := range st.Status.Devices {
		if d.ID != 3 && d.Health != apiv1.Healthy {
			t.Errorf("GPU %d is %s (%s); only GPU 3 had a fault", d.ID, d.Health, d.Reason)
		}
	}
	if d := st.Status.Devices[3]; d.BandwidthGBps != 0 || !strings.Contains(d.Reason, "lost") {
		t.Errorf("GPU 3: %+v", d)
	}
	if st.Status.Healthy != 7 || st.Status.Free != 7 {
		t.Errorf("summary %+v", st.Status)
	}
	if err := h.srv.Inject(3, mock.Fault{Kind: mock.FaultRecover}); err != nil {
		t.Fatal(err)
	}
	h.agent.Poke()
	st = h.until("GPU 3 Healthy again", 0, func(s *apiv1.GpuNodeStatus) bool { return health(s, 3) == apiv1.Healthy })
	if d := st.Status.Devices[3]; d.BandwidthGBps != 600 || d.Reason != "" {
		t.Errorf("recovered GPU 3: %+v", d)
	}
}

func TestDoubleBitECCRecoversAfterQuietPeriod(t *testing.T) {
	h := newHarness(t, mock.PCIeOnly, nvml.SUCCESS)
	h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	h.watched()
	if err := h.srv.Inject(5, mock.Fault{Kind: mock.FaultDoubleBitECC}); err != nil {
		t.Fatal(err)
	}
	h.until("GPU 5 Unhealthy", 0, func(s *apiv1.GpuNodeStatus) bool { return health(s, 5) == apiv1.Unhealthy })
	for range 8 { // 4 minutes of probes, each one passing: still inside the quiet period
		h.probeRound()
	}
	if st, _ := h.gpu.GpuV1().GpuNodeStatuses().Get(context.Background(), node, metav1.GetOptions{}); health(st, 5) != apiv1.Unhealthy {
		t.Fatalf("GPU 5 recovered before the quiet period")
	}
	h.until("GPU 5 Healthy after the quiet period", 120, func(s *apiv1.GpuNodeStatus) bool { return health(s, 5) == apiv1.Healthy })
}

func TestNVMLInitFailureFencesAndRetries(t *testing.T) {
	prev := &apiv1.GpuNodeStatus{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: apiv1.GpuNodeStatusStatus{Total: 2, Healthy: 2, Free: 2, Devices: []apiv1.Device{
			{ID: 0, Health: apiv1.Healthy, Island: "nvlink-group-0", BandwidthGBps: 900, UtilizationPercent: ptr.To[int32](70), PowerWatts: ptr.To[int32](500)},
			{ID: 1, Health: apiv1.Healthy, Island: "nvlink-group-0", BandwidthGBps: 900},
		}},
	}
	h := newHarness(t, mock.DGXH100, nvml.ERROR_LIBRARY_NOT_FOUND, prev)
	st := h.until("GPUs Unknown", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Message != "" })
	for _, d := range st.Status.Devices {
		if d.Health != apiv1.Unknown || d.BandwidthGBps != 0 {
			t.Errorf("GPU %d while NVML fails: %+v", d.ID, d)
		}
		if d.UtilizationPercent != nil || d.PowerWatts != nil {
			t.Errorf("GPU %d keeps the readings of before NVML failed: %+v", d.ID, d)
		}
	}
	if st.Status.Healthy != 0 || st.Status.Free != 0 || !strings.Contains(st.Status.Message, "NVML") {
		t.Errorf("status while NVML fails: %+v", st.Status)
	}
	// Still failing after a few backoffs: still Unknown, and the process keeps going.
	for range 3 {
		h.clk.Step(time.Minute)
	}
	if st, _ := h.gpu.GpuV1().GpuNodeStatuses().Get(context.Background(), node, metav1.GetOptions{}); st.Status.Healthy != 0 {
		t.Fatalf("GPUs Healthy while NVML fails: %+v", st.Status)
	}
	h.srv.SetInitError(nvml.SUCCESS)
	st = h.until("NVML works again", 120, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	if st.Status.Message != "" || st.Status.Total != 8 {
		t.Errorf("status after NVML came back: %+v", st.Status)
	}
}

func TestNVMLInitFailureWithoutHistory(t *testing.T) {
	h := newHarness(t, mock.DGXH100, nvml.ERROR_DRIVER_NOT_LOADED)
	st := h.until("a status saying why", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Message != "" })
	if st.Status.Total != 0 || !strings.Contains(st.Status.Message, "NVML initialisation failed") {
		t.Errorf("status: %+v", st.Status)
	}
}

const usageInterval = 30 * time.Second

func TestInUseByFromLeases(t *testing.T) {
	h := newHarnessWith(t, mock.PCIeNVLinkPairs, nvml.SUCCESS, func(c *agent.Config) { c.UsageWriteInterval = usageInterval })
	h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Free == 8 })
	addTwoLeases(t, h)
	h.agent.Poke()
	// Usage alone waits for the usage write interval...
	time.Sleep(100 * time.Millisecond)
	if st := h.until("status", 0, func(*apiv1.GpuNodeStatus) bool { return true }); st.Status.Free != 8 {
		t.Fatalf("inUseBy written before the usage write interval: free %d", st.Status.Free)
	}
	// ...then goes out (the harness steps the fake clock a second per poll).
	st := h.until("inUseBy", int(usageInterval/time.Second)+5, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Free == 6 })
	if got := st.Status.Devices[1].InUseBy; len(got) != 1 || got[0] != "pod-uid-1" {
		t.Errorf("GPU 1 inUseBy %v", got)
	}
	if got := st.Status.Devices[2].InUseBy; len(got) != 2 || got[0] != "pod-uid-2" {
		t.Errorf("GPU 2 inUseBy %v", got)
	}
}

// By default usage causes no write of its own for DefaultUsageWriteInterval after the last
// write, whatever the liveness interval: tied to a liveness of a few minutes, a burst of pods
// would make nearly every node write its status within the burst (the harness writes any other
// change at once: MinWriteInterval -1).
func TestInUseByWaitsForTheUsageInterval(t *testing.T) {
	h := newHarnessWith(t, mock.PCIeNVLinkPairs, nvml.SUCCESS, func(c *agent.Config) {
		c.HeartbeatInterval, c.StatusRefreshInterval = time.Minute, 2*time.Hour
	})
	first := h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Free == 8 })
	addTwoLeases(t, h)
	h.agent.Poke()
	limit := int(agent.DefaultUsageWriteInterval/time.Second) + 60
	st := h.until("inUseBy after the usage interval", limit, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Free == 6 })
	if gap := st.Status.LastHeartbeatTime.Sub(first.Status.LastHeartbeatTime.Time); gap < agent.DefaultUsageWriteInterval {
		t.Fatalf("inUseBy written %s after the previous write; want it to wait %s", gap, agent.DefaultUsageWriteInterval)
	}
	if got := st.Status.Devices[1].InUseBy; len(got) != 1 || got[0] != "pod-uid-1" {
		t.Errorf("GPU 1 inUseBy %v", got)
	}
}

func addTwoLeases(t *testing.T, h *harness) {
	t.Helper()
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-a-1", Namespace: "gpu-scheduler", Labels: map[string]string{apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: "1"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-uid-1")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-a-2", Namespace: "gpu-scheduler", Labels: map[string]string{apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: "2", apiv1.LabelLeaseShared: "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-uid-3,pod-uid-2")}},
	} {
		if err := h.leases.Add(l); err != nil {
			t.Fatal(err)
		}
	}
}

// device is GPU id of st.
func device(t *testing.T, st *apiv1.GpuNodeStatus, id int32) apiv1.Device {
	t.Helper()
	for _, d := range st.Status.Devices {
		if d.ID == id {
			return d
		}
	}
	t.Fatalf("status has no GPU %d: %+v", id, st.Status.Devices)
	return apiv1.Device{}
}

// since is d's LastTransitionTime, failing the test when it is not set.
func since(t *testing.T, d apiv1.Device) time.Time {
	t.Helper()
	if d.LastTransitionTime == nil {
		t.Fatalf("GPU %d (%s) has no lastTransitionTime", d.ID, d.Health)
	}
	return d.LastTransitionTime.Time
}

func TestHealthTransitionTimeAndRecoveries(t *testing.T) {
	h := newHarness(t, mock.DGXA100, nvml.SUCCESS)
	start := h.clk.Now()
	st := h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	for _, d := range st.Status.Devices {
		if !since(t, d).Equal(start) || d.RecoveryCount != 0 {
			t.Errorf("GPU %d first seen: lastTransitionTime %s, recoveryCount %d; want %s, 0", d.ID, since(t, d), d.RecoveryCount, start)
		}
	}
	h.watched()

	// GPU 3 fails a minute later: its time moves, nobody else's.
	h.clk.Step(time.Minute)
	if err := h.srv.Inject(3, mock.Fault{Kind: mock.FaultXid, Xid: mock.XidFallenOffBus}); err != nil {
		t.Fatal(err)
	}
	// Both the Xid and the probe's loss must be in before the reset (see the fleet test).
	st = h.until("GPU 3 lost after Xid 79", 0, func(s *apiv1.GpuNodeStatus) bool {
		r := s.Status.Devices[3].Reason
		return health(s, 3) == apiv1.Unhealthy && strings.Contains(r, "lost") && strings.Contains(r, "Xid 79")
	})
	failed := since(t, device(t, st, 3))
	if !failed.After(start) || failed.After(h.clk.Now()) || device(t, st, 3).RecoveryCount != 0 {
		t.Fatalf("GPU 3 failed: lastTransitionTime %s, recoveryCount %d; want in (%s, %s], 0",
			failed, device(t, st, 3).RecoveryCount, start, h.clk.Now())
	}
	for _, d := range st.Status.Devices {
		if d.ID != 3 && !since(t, d).Equal(start) {
			t.Errorf("GPU %d's lastTransitionTime moved to %s with GPU 3's fault", d.ID, since(t, d))
		}
	}

	// A later write (the heartbeat) while GPU 3 is still Unhealthy keeps the time.
	writes := h.statusWrites()
	h.clk.Step(2 * time.Hour)
	h.nudging("a heartbeat write", func() bool { return h.statusWrites() > writes })
	st = h.until("status", 0, func(*apiv1.GpuNodeStatus) bool { return true })
	if d := device(t, st, 3); d.Health != apiv1.Unhealthy || !since(t, d).Equal(failed) {
		t.Fatalf("after a heartbeat GPU 3 is %s since %s; want Unhealthy since %s", d.Health, since(t, d), failed)
	}

	// It recovers: a new time and one recovery.
	if err := h.srv.Inject(3, mock.Fault{Kind: mock.FaultRecover}); err != nil {
		t.Fatal(err)
	}
	h.agent.Poke()
	st = h.until("GPU 3 Healthy again", 0, func(s *apiv1.GpuNodeStatus) bool { return health(s, 3) == apiv1.Healthy })
	d := device(t, st, 3)
	if recovered := since(t, d); !recovered.After(failed) || d.RecoveryCount != 1 {
		t.Fatalf("GPU 3 recovered: lastTransitionTime %s, recoveryCount %d; want after %s, 1", recovered, d.RecoveryCount, failed)
	}
	for _, d := range st.Status.Devices {
		if d.ID != 3 && (!since(t, d).Equal(start) || d.RecoveryCount != 0) {
			t.Errorf("GPU %d: lastTransitionTime %s, recoveryCount %d; only GPU 3 changed", d.ID, since(t, d), d.RecoveryCount)
		}
	}
}

func TestHealthTransitionsSurviveARestart(t *testing.T) {
	before := metav1.Unix(5e8, 0)
	prev := &apiv1.GpuNodeStatus{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: apiv1.GpuNodeStatusStatus{Total: 3, Healthy: 2, Free: 2, Devices: []apiv1.Device{
			{ID: 0, Health: apiv1.Healthy, LastTransitionTime: &before, RecoveryCount: 4},
			{ID: 1, Health: apiv1.Unhealthy, Reason: "Xid 79", LastTransitionTime: &before, RecoveryCount: 1},
			{ID: 2, Health: apiv1.Healthy}, // written by an agent that did not stamp transitions
		}},
	}
	// The restarted agent finds every GPU of its DGX A100 Healthy.
	h := newHarness(t, mock.DGXA100, nvml.SUCCESS, prev)
	now := h.clk.Now()
	st := h.until("the restarted agent's status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	want := []struct {
		since *time.Time
		count int32
	}{{&before.Time, 4}, {&now, 2}, {nil, 0}, {&now, 0}, {&now, 0}, {&now, 0}, {&now, 0}, {&now, 0}}
	for i, w := range want {
		d := device(t, st, int32(i))
		got := d.LastTransitionTime
		if (got == nil) != (w.since == nil) || got != nil && !got.Time.Equal(*w.since) || d.RecoveryCount != w.count {
			t.Errorf("GPU %d after restart: lastTransitionTime %v, recoveryCount %d; want %v, %d", i, got, d.RecoveryCount, w.since, w.count)
		}
	}
}

// TestMIGAndSharesPublished: on a node with GPUs in MIG mode the agent publishes each MIG
// device, its holder from its MIG lease and the Shared holders' shares; a GPU in MIG mode is
// not free; an Xid that loses a GPU makes its MIG devices Unhealthy with it.
func TestMIGAndSharesPublished(t *testing.T) {
	h := newHarnessWith(t, "dgx-h100-mig", nvml.SUCCESS, func(c *agent.Config) { c.UsageWriteInterval = usageInterval })
	st := h.until("first status", 0, func(s *apiv1.GpuNodeStatus) bool { return s.Status.Healthy == 8 })
	if st.Status.Free != 4 {
		t.Errorf("free %d, want 4: GPUs 0-3 are in MIG mode", st.Status.Free)
	}
	g1 := device(t, st, 1)
	if g1.MIG == nil || !g1.MIG.Enabled || g1.MIG.Slices != 8 || len(g1.MIG.Devices) != 2 ||
		g1.MIG.Devices[1].Slot != 4 || g1.MIG.Devices[1].Profile != "3g.40gb" || g1.MIG.Devices[1].Health != apiv1.Healthy ||
		!strings.HasPrefix(g1.MIG.Devices[1].UUID, "MIG-") {
		t.Fatalf("GPU 1 mig: %+v", g1.MIG)
	}
	if g4 := device(t, st, 4); g4.MIG == nil || g4.MIG.Enabled || len(g4.MIG.Devices) != 0 {
		t.Errorf("GPU 4 mig: %+v, want MIG-capable with the mode off", g4.MIG)
	}
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-a-1-mig4", Namespace: "gpu-scheduler", Labels: map[string]string{
			apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: "1", apiv1.LabelLeaseMIGSlot: "4"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-mig")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-a-5", Namespace: "gpu-scheduler", Labels: map[string]string{
			apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: "5", apiv1.LabelLeaseShared: "true"},
			Annotations: map[string]string{apiv1.AnnotationLeaseShares: "pod-s1=20390/25,pod-s2=10240/50"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-s1,pod-s2")}},
	} {
		if err := h.leases.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	h.agent.Poke()
	st = h.until("MIG holder and shares", int(usageInterval/time.Second)+5, func(s *apiv1.GpuNodeStatus) bool {
		return device(t, s, 5).Shares != nil
	})
	if got := device(t, st, 1); len(got.InUseBy) != 0 || !slices.Equal(got.MIG.Devices[1].InUseBy, []string{"pod-mig"}) || len(got.MIG.Devices[0].InUseBy) != 0 {
		t.Errorf("GPU 1: inUseBy %v, MIG devices %+v; want only MIG device 1:4 held, by pod-mig", got.InUseBy, got.MIG.Devices)
	}
	if got := *device(t, st, 5).Shares; got != (apiv1.DeviceShares{Sharers: 2, MemoryMiB: 30630, ComputePercent: 75}) {
		t.Errorf("GPU 5 shares %+v", got)
	}
	h.watched()
	if err := h.srv.Inject(1, mock.Fault{Kind: mock.FaultXid, Xid: mock.XidFallenOffBus}); err != nil {
		t.Fatal(err)
	}
	st = h.until("GPU 1 lost", 0, func(s *apiv1.GpuNodeStatus) bool { return health(s, 1) == apiv1.Unhealthy })
	for _, m := range device(t, st, 1).MIG.Devices {
		if m.Health != apiv1.Unhealthy || !strings.Contains(m.Reason, "Xid 79") {
			t.Errorf("MIG device 1:%d is %s (%s) on a lost GPU; want Unhealthy with the GPU's reason", m.Slot, m.Health, m.Reason)
		}
	}
}
