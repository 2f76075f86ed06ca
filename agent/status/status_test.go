package status_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-80GB": "NVIDIA-A100-SXM4-80GB",
		" (weird) ":             "weird",
		"":                      "",
	} {
		if got := status.LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzLabelValue(f *testing.F) {
	f.Add("NVIDIA H100 80GB HBM3")
	f.Add("ü/ß-.-_")
	f.Fuzz(func(t *testing.T, s string) {
		if v := status.LabelValue(s); len(validation.IsValidLabelValue(v)) > 0 {
			t.Fatalf("LabelValue(%q) = %q is not a valid label value", s, v)
		}
	})
}

func TestSummarize(t *testing.T) {
	st := status.Summarize([]apiv1.Device{
		{ID: 0, Health: apiv1.Healthy},
		{ID: 1, Health: apiv1.Healthy, InUseBy: []string{"p"}},
		{ID: 2, Health: apiv1.Unhealthy},
		{ID: 3, Health: apiv1.Unknown},
	}, "")
	if st.Total != 4 || st.Healthy != 2 || st.Free != 1 {
		t.Errorf("Summarize: total %d healthy %d free %d, want 4 2 1", st.Total, st.Healthy, st.Free)
	}
}

func TestLabels(t *testing.T) {
	l := status.Labels([]apiv1.Device{{Product: "NVIDIA L40S"}, {Product: "NVIDIA L40S"}}, false)
	if l[apiv1.LabelGPUProduct] != "NVIDIA-L40S" || l[apiv1.LabelGPUCount] != "2" || l[apiv1.LabelNVLink] != "false" {
		t.Errorf("Labels: %v", l)
	}
}

// Due waits UsageInterval after a write when only inUseBy changed, MinInterval when health
// changed, and the heartbeat when nothing did.
func TestDueSeparatesUsageFromHealth(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	w := status.NewWriter(status.Config{
		Node: "n1", GPUClient: gpufake.NewSimpleClientset(), KubeClient: fake.NewSimpleClientset(node), Clock: clk,
		Heartbeat: time.Hour, MinInterval: time.Second, UsageInterval: 5 * time.Second,
	})
	dev := func(h apiv1.Health, users ...string) []apiv1.Device {
		return []apiv1.Device{{ID: 0, Health: h, InUseBy: users}, {ID: 1, Health: apiv1.Healthy}}
	}
	written := status.Summarize(dev(apiv1.Healthy), "")
	if ok, err := w.Sync(context.Background(), node, written); err != nil || !ok {
		t.Fatalf("first Sync wrote %v, %v", ok, err)
	}
	at := clk.Now()
	for _, c := range []struct {
		name string
		want apiv1.GpuNodeStatusStatus
		due  time.Time
	}{
		{"unchanged: next heartbeat", written, at.Add(w.HeartbeatInterval())},
		{"only inUseBy changed", status.Summarize(dev(apiv1.Healthy, "pod-1"), ""), at.Add(5 * time.Second)},
		{"health changed", status.Summarize(dev(apiv1.Unhealthy), ""), at.Add(time.Second)},
		{"health and usage changed", status.Summarize(dev(apiv1.Unhealthy, "pod-1"), ""), at.Add(time.Second)},
		{"message changed", status.Summarize(dev(apiv1.Healthy), "NVML failed"), at.Add(time.Second)},
	} {
		if got := w.Due(c.want); !got.Equal(c.due) {
			t.Errorf("%s: Due = +%s, want +%s", c.name, got.Sub(at), c.due.Sub(at))
		}
	}
	// A usage change is held back until its interval has passed, then written.
	usage := status.Summarize(dev(apiv1.Healthy, "pod-1"), "")
	clk.SetTime(at.Add(4 * time.Second))
	if ok, _ := w.Sync(context.Background(), node, usage); ok {
		t.Fatal("usage change written before UsageInterval")
	}
	clk.SetTime(at.Add(5 * time.Second))
	if ok, err := w.Sync(context.Background(), node, usage); err != nil || !ok {
		t.Fatalf("usage change not written after UsageInterval: %v, %v", ok, err)
	}
}

// With UsageInterval at the heartbeat or beyond, a usage change is due with the heartbeat and
// written with it, not before.
func TestUsageRidesAlongWithTheHeartbeat(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	w := status.NewWriter(status.Config{
		Node: "n1", GPUClient: gpufake.NewSimpleClientset(), KubeClient: fake.NewSimpleClientset(node), Clock: clk,
		Heartbeat: time.Minute, MinInterval: time.Second, UsageInterval: time.Hour,
	})
	dev := func(users ...string) []apiv1.Device {
		return []apiv1.Device{{ID: 0, Health: apiv1.Healthy, InUseBy: users}, {ID: 1, Health: apiv1.Healthy}}
	}
	if ok, err := w.Sync(context.Background(), node, status.Summarize(dev(), "")); err != nil || !ok {
		t.Fatalf("first Sync wrote %v, %v", ok, err)
	}
	at := clk.Now()
	heartbeat := at.Add(w.HeartbeatInterval())
	usage := status.Summarize(dev("pod-1"), "")
	if got := w.Due(usage); !got.Equal(heartbeat) {
		t.Fatalf("usage due +%s, want the heartbeat at +%s", got.Sub(at), heartbeat.Sub(at))
	}
	clk.SetTime(heartbeat.Add(-time.Second))
	if ok, _ := w.Sync(context.Background(), node, usage); ok {
		t.Fatal("usage written before the heartbeat")
	}
	clk.SetTime(heartbeat)
	if ok, err := w.Sync(context.Background(), node, usage); err != nil || !ok {
		t.Fatalf("usage not written with the heartbeat: %v, %v", ok, err)
	}
	if got := w.Last().Status.Devices[0].InUseBy; len(got) != 1 || got[0] != "pod-1" {
		t.Fatalf("written inUseBy %v", got)
	}
}

// Same and the usage-only comparison look at every field but the heartbeat: each field of
// the status and of a device is changed in turn (by reflection, so a field added later is
// covered or fails here), and only inUseBy, free and telemetry may differ for "same hardware".
func TestSameSeesEveryField(t *testing.T) {
	util := int32(40)
	base := apiv1.GpuNodeStatusStatus{Total: 2, Healthy: 2, Free: 1, Message: "m",
		LastHeartbeatTime: metav1.Unix(1, 0),
		Devices: []apiv1.Device{{ID: 0, Health: apiv1.Healthy, InUseBy: []string{"p"}, BandwidthGBps: 600, Island: "i",
			UUID: "u", Product: "p", MemoryMiB: 1, PCIBusID: "b", UtilizationPercent: &util, Reason: "r"}, {ID: 1}},
		Fabric: &apiv1.Fabric{ClusterUUID: "c", CliqueID: 1, Clique: "c.1", State: "Completed"}}
	clone := func() apiv1.GpuNodeStatusStatus { return *base.DeepCopy() }
	change := func(t *testing.T, v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "-changed")
		case reflect.Int32, reflect.Int64:
			v.SetInt(v.Int() + 7)
		case reflect.Pointer:
			if v.Type() == reflect.TypeFor[*metav1.Time]() {
				v.Set(reflect.ValueOf(ptr.To(metav1.Unix(99, 0))))
				return
			}
			n := reflect.New(v.Type().Elem())
			if n.Elem().Kind() == reflect.Struct {
				v.Set(n) // nil in base: an empty struct is a change (MIG, Shares)
				return
			}
			n.Elem().SetInt(99)
			v.Set(n)
		case reflect.Slice:
			v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
		default:
			t.Fatalf("field of kind %s: teach this test (and Same) about it", v.Kind())
		}
	}
	usage := map[string]bool{"InUseBy": true, "Free": true, "Shares": true}
	for _, f := range telemetryFields {
		usage[f] = true
	}
	st := reflect.TypeOf(base)
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Name == "LastHeartbeatTime" || f.Name == "TelemetryTime" || f.Name == "Devices" || f.Name == "Fabric" {
			continue
		}
		c := clone()
		change(t, reflect.ValueOf(&c).Elem().Field(i))
		if status.Same(base, c) {
			t.Errorf("Same ignores status.%s", f.Name)
		}
	}
	dt := reflect.TypeOf(apiv1.Device{})
	for i := range dt.NumField() {
		f := dt.Field(i)
		c := clone()
		change(t, reflect.ValueOf(&c.Devices[0]).Elem().Field(i))
		if status.Same(base, c) {
			t.Errorf("Same ignores device.%s", f.Name)
		}
		if got := status.SameHardware(base, c); got != usage[f.Name] {
			t.Errorf("SameHardware with device.%s changed = %v, want %v", f.Name, got, usage[f.Name])
		}
	}
	ft := reflect.TypeOf(apiv1.Fabric{})
	for i := range ft.NumField() {
		c := clone()
		change(t, reflect.ValueOf(c.Fabric).Elem().Field(i))
		if status.Same(base, c) || status.SameHardware(base, c) {
			t.Errorf("Same or SameHardware ignores fabric.%s", ft.Field(i).Name)
		}
	}
	for _, f := range []*apiv1.Fabric{nil, {}} {
		c := clone()
		c.Fabric = f
		if status.Same(base, c) || status.SameHardware(base, c) {
			t.Errorf("Same or SameHardware ignores a fabric that became %+v", f)
		}
	}
	c := clone()
	c.LastHeartbeatTime = metav1.Unix(2, 0)
	c.Devices[1].InUseBy = []string{}
	if !status.Same(base, c) {
		t.Error("a new heartbeat or an empty instead of a nil list made the statuses differ")
	}
	c.Devices = c.Devices[:1]
	if status.Same(base, c) || status.SameHardware(base, c) {
		t.Error("a missing device was not seen")
	}
}

// telemetryFields are the Device fields the agent reads at the telemetry interval.
var telemetryFields = []string{"UtilizationPercent", "MemoryUtilizationPercent", "MemoryUsedMiB", "TemperatureCelsius",
	"PowerWatts", "XidErrors", "LastXid", "ECCCorrectedErrors", "ECCUncorrectedErrors"}

func TestTelemetryMoved(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	i64 := func(v int64) *int64 { return &v }
	base := apiv1.Device{ID: 0, MemoryMiB: 80000, UtilizationPercent: i32(40), MemoryUtilizationPercent: i32(20),
		MemoryUsedMiB: i64(10000), TemperatureCelsius: i32(50), PowerWatts: i32(300),
		ECCCorrectedErrors: i64(2), ECCUncorrectedErrors: i64(0)}
	for _, c := range []struct {
		name  string
		edit  func(d *apiv1.Device)
		moved bool
	}{
		{"nothing", func(*apiv1.Device) {}, false},
		{"utilisation +4", func(d *apiv1.Device) { d.UtilizationPercent = i32(44) }, false},
		{"utilisation +5", func(d *apiv1.Device) { d.UtilizationPercent = i32(45) }, true},
		{"utilisation -5", func(d *apiv1.Device) { d.UtilizationPercent = i32(35) }, true},
		{"utilisation gone", func(d *apiv1.Device) { d.UtilizationPercent = nil }, true},
		{"memory utilisation +6", func(d *apiv1.Device) { d.MemoryUtilizationPercent = i32(26) }, true},
		{"memory +3999 MiB (under 5%)", func(d *apiv1.Device) { d.MemoryUsedMiB = i64(13999) }, false},
		{"memory +4000 MiB (5%)", func(d *apiv1.Device) { d.MemoryUsedMiB = i64(14000) }, true},
		{"temperature +2", func(d *apiv1.Device) { d.TemperatureCelsius = i32(52) }, false},
		{"temperature +3", func(d *apiv1.Device) { d.TemperatureCelsius = i32(53) }, true},
		{"power +24 W", func(d *apiv1.Device) { d.PowerWatts = i32(324) }, false},
		{"power -25 W", func(d *apiv1.Device) { d.PowerWatts = i32(275) }, true},
		{"one corrected ECC error", func(d *apiv1.Device) { d.ECCCorrectedErrors = i64(3) }, true},
		{"one uncorrected ECC error", func(d *apiv1.Device) { d.ECCUncorrectedErrors = i64(1) }, true},
		{"an Xid", func(d *apiv1.Device) { d.XidErrors, d.LastXid = 1, 13 }, true},
	} {
		next := *base.DeepCopy()
		c.edit(&next)
		a := apiv1.GpuNodeStatusStatus{Devices: []apiv1.Device{base}}
		b := apiv1.GpuNodeStatusStatus{Devices: []apiv1.Device{next}}
		if got := status.TelemetryMoved(a, b); got != c.moved {
			t.Errorf("%s: TelemetryMoved = %v, want %v", c.name, got, c.moved)
		}
		if got := status.Same(a, b); got == c.moved {
			t.Errorf("%s: Same = %v, want %v", c.name, got, !c.moved)
		}
	}
}

// Telemetry alone is written at most once per TelemetryInterval (the per-node budget), and
// not at all when it did not move significantly; a health change is not held back by it.
func TestDueKeepsTheTelemetryBudget(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	w := status.NewWriter(status.Config{
		Node: "n1", GPUClient: gpufake.NewSimpleClientset(), KubeClient: fake.NewSimpleClientset(node), Clock: clk,
		Heartbeat: time.Hour, MinInterval: time.Second, UsageInterval: 5 * time.Second, TelemetryInterval: 30 * time.Second,
	})
	at := func(h apiv1.Health, util int32) apiv1.GpuNodeStatusStatus {
		return status.Summarize([]apiv1.Device{{ID: 0, Health: h, UtilizationPercent: &util}}, "")
	}
	if ok, err := w.Sync(context.Background(), node, at(apiv1.Healthy, 10)); err != nil || !ok {
		t.Fatalf("first Sync wrote %v, %v", ok, err)
	}
	start := clk.Now()
	for _, c := range []struct {
		name string
		want apiv1.GpuNodeStatusStatus
		due  time.Duration
	}{
		{"utilisation moved 2 points: next heartbeat", at(apiv1.Healthy, 12), w.HeartbeatInterval()},
		{"utilisation moved 60 points: the budget's interval", at(apiv1.Healthy, 70), 30 * time.Second},
		{"health changed: at once", at(apiv1.Unhealthy, 70), time.Second},
	} {
		if got := w.Due(c.want); got.Sub(start) != c.due {
			t.Errorf("%s: Due = +%s, want +%s", c.name, got.Sub(start), c.due)
		}
	}
	busy := at(apiv1.Healthy, 70)
	clk.SetTime(start.Add(29 * time.Second))
	if ok, _ := w.Sync(context.Background(), node, busy); ok {
		t.Fatal("telemetry written before its interval")
	}
	clk.SetTime(start.Add(30 * time.Second))
	if ok, err := w.Sync(context.Background(), node, busy); err != nil || !ok {
		t.Fatalf("telemetry not written after its interval: %v, %v", ok, err)
	}
}

// Without a budget telemetry never causes a write; it waits for the heartbeat.
func TestDueWithoutTelemetryBudget(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	w := status.NewWriter(status.Config{
		Node: "n1", GPUClient: gpufake.NewSimpleClientset(), KubeClient: fake.NewSimpleClientset(node), Clock: clk,
		Heartbeat: time.Hour, MinInterval: time.Second,
	})
	util := func(v int32) apiv1.GpuNodeStatusStatus {
		return status.Summarize([]apiv1.Device{{ID: 0, Health: apiv1.Healthy, UtilizationPercent: &v}}, "")
	}
	if ok, err := w.Sync(context.Background(), node, util(0)); err != nil || !ok {
		t.Fatalf("first Sync wrote %v, %v", ok, err)
	}
	if got, want := w.Due(util(100)), clk.Now().Add(w.HeartbeatInterval()); !got.Equal(want) {
		t.Errorf("Due = %s, want the heartbeat %s", got, want)
	}
}

// With the fleet's shared limiter empty, a telemetry-only write yields (it is retried a
// TelemetryInterval later) while a health write waits for its token.
func TestTelemetryYieldsToTheSharedLimiter(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	limiter := &countingLimiter{tokens: 1}
	w := status.NewWriter(status.Config{
		Node: "n1", GPUClient: gpufake.NewSimpleClientset(), KubeClient: fake.NewSimpleClientset(node), Clock: clk,
		Heartbeat: time.Hour, MinInterval: time.Second, TelemetryInterval: 30 * time.Second, Limiter: limiter,
	})
	at := func(h apiv1.Health, util int32) apiv1.GpuNodeStatusStatus {
		return status.Summarize([]apiv1.Device{{ID: 0, Health: h, UtilizationPercent: &util}}, "")
	}
	if ok, err := w.Sync(context.Background(), node, at(apiv1.Healthy, 10)); err != nil || !ok {
		t.Fatalf("first Sync wrote %v, %v", ok, err)
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	if ok, err := w.Sync(context.Background(), node, at(apiv1.Healthy, 90)); ok || err != nil {
		t.Fatalf("telemetry written with the limiter empty: %v, %v", ok, err)
	}
	if got, want := w.Due(at(apiv1.Healthy, 90)), clk.Now().Add(30*time.Second); !got.Equal(want) {
		t.Errorf("held telemetry due %s, want %s", got, want)
	}
	if ok, err := w.Sync(context.Background(), node, at(apiv1.Unhealthy, 90)); !ok || err != nil {
		t.Fatalf("health change not written: %v, %v", ok, err)
	}
	if limiter.waits != 2 {
		t.Errorf("%d waits on the limiter, want 2 (the first write and the health change)", limiter.waits)
	}
}

// countingLimiter hands out tokens to Wait always and to TryAccept while it has some.
type countingLimiter struct {
	tokens, waits int
}

func (l *countingLimiter) TryAccept() bool {
	if l.tokens > 0 {
		l.tokens--
		return true
	}
	return false
}
func (l *countingLimiter) Accept()                        { l.waits++ }
func (l *countingLimiter) Stop()                          {}
func (l *countingLimiter) QPS() float32                   { return 1 }
func (l *countingLimiter) Wait(ctx context.Context) error { l.waits++; l.tokens = 0; return nil }

// Two releases' agents on one node (overlapping node selectors) do not take turns on its
// status: the first labels it for its scheduler, the other refuses while that one heartbeats
// and takes over only once it has been silent for TakeoverAfter.
func TestWriterKeepsToItsScheduler(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	gpus := gpufake.NewSimpleClientset()
	kube := fake.NewSimpleClientset(node)
	writer := func(name string) *status.Writer {
		w := status.NewWriter(status.Config{
			Node: "n1", GPUClient: gpus, KubeClient: kube, Clock: clk, SchedulerName: name,
			Heartbeat: 30 * time.Minute, MinInterval: -1, TakeoverAfter: 10 * time.Minute,
		})
		if err := w.Load(ctx); err != nil {
			t.Fatalf("Load for %s: %v", name, err)
		}
		return w
	}
	say := func(msg string) apiv1.GpuNodeStatusStatus {
		return status.Summarize([]apiv1.Device{{ID: 0, Health: apiv1.Healthy}}, msg)
	}
	stored := func() *apiv1.GpuNodeStatus {
		t.Helper()
		gns, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get GpuNodeStatus n1: %v", err)
		}
		return gns
	}
	check := func(step, owner, msg string) {
		t.Helper()
		gns := stored()
		if got := gns.Labels[apiv1.LabelSchedulerName]; got != owner {
			t.Errorf("%s: label %s = %q, want %q", step, apiv1.LabelSchedulerName, got, owner)
		}
		if gns.Status.Message != msg {
			t.Errorf("%s: message %q, want %q (written by the wrong agent?)", step, gns.Status.Message, msg)
		}
	}

	a := writer("team-a")
	if ok, err := a.Sync(ctx, node, say("a1")); err != nil || !ok {
		t.Fatalf("team-a's first Sync wrote %v, %v", ok, err)
	}
	check("team-a created it", "team-a", "a1")

	b := writer("team-b")
	refused := func(step string) {
		t.Helper()
		ok, err := b.Sync(ctx, node, say("b"))
		var owned *status.OwnedError
		if ok || !errors.As(err, &owned) {
			t.Fatalf("%s: team-b's Sync = %v, %v; want an *OwnedError", step, ok, err)
		}
		if owned.Owner != "team-a" || owned.Self != "team-b" || owned.Node != "n1" {
			t.Errorf("%s: OwnedError %+v names the wrong owner, self or node", step, owned)
		}
		for _, want := range []string{`"team-a"`, `"team-b"`, "disjoint agent node selectors"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %s", step, err, want)
			}
		}
	}
	refused("team-a heartbeats")
	check("team-b refused", "team-a", "a1")

	// team-a is alive (it renews its liveness lease) but its status is unchanged: it rewrites
	// it only once per refresh interval (30 minutes). 29 minutes of silence in the status say
	// nothing about team-a's agent, and team-b must not take the status over.
	clk.SetTime(clk.Now().Add(29 * time.Minute))
	refused("team-a refreshed its status 29 minutes ago")
	if ok, err := a.Sync(ctx, node, say("a2")); err != nil || !ok {
		t.Fatalf("team-a's heartbeat wrote %v, %v", ok, err)
	}
	// team-b, 39 minutes on, must see that heartbeat (not its own old copy of the status) and
	// still refuse: the refresh interval and TakeoverAfter have not both passed.
	clk.SetTime(clk.Now().Add(39 * time.Minute))
	refused("team-a heartbeated 39 minutes ago")
	check("team-b refused again", "team-a", "a2")

	// team-a stops: a refresh interval and 10 minutes after its last heartbeat team-b takes
	// the status over.
	clk.SetTime(clk.Now().Add(time.Minute))
	if ok, err := b.Sync(ctx, node, say("b")); err != nil || !ok {
		t.Fatalf("team-b's takeover of a silent status: %v, %v", ok, err)
	}
	check("team-b took over", "team-b", "b")

	// team-a's agent comes back: now it is the one that refuses.
	if ok, err := writer("team-a").Sync(ctx, node, say("a3")); ok || err == nil {
		t.Fatalf("a restarted team-a agent wrote over team-b's live status: %v, %v", ok, err)
	}
	check("team-a refused after restart", "team-b", "b")
}

// A status written before the label existed (an older agent) is claimed without waiting.
func TestWriterClaimsAnUnlabelledStatus(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	old := &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: apiv1.GpuNodeStatusSpec{NodeName: "n1"},
		Status: apiv1.GpuNodeStatusStatus{Message: "old", LastHeartbeatTime: metav1.NewTime(clk.Now())}}
	gpus := gpufake.NewSimpleClientset(old)
	w := status.NewWriter(status.Config{Node: "n1", GPUClient: gpus, KubeClient: fake.NewSimpleClientset(node), Clock: clk,
		Heartbeat: time.Minute, MinInterval: -1})
	if err := w.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.Sync(ctx, node, status.Summarize(nil, "new")); err != nil || !ok {
		t.Fatalf("Sync over an unlabelled status: %v, %v", ok, err)
	}
	gns, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gns.Labels[apiv1.LabelSchedulerName] != apiv1.SchedulerName || gns.Status.Message != "new" {
		t.Errorf("status labels %v message %q; want %s=%s and the new message", gns.Labels, gns.Status.Message, apiv1.LabelSchedulerName, apiv1.SchedulerName)
	}
}

// A status another source wrote for this node with another node's (or no) spec.nodeName: the
// scheduler would file its GPUs under that node, and the agent policy refuses the agent's
// writes to it. The agent puts its own node there.
func TestWriterPutsItsNodeInTheSpec(t *testing.T) {
	for _, spec := range []string{"n2", ""} {
		for _, label := range []string{apiv1.SchedulerName, ""} {
			ctx := context.Background()
			clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
			old := &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: apiv1.GpuNodeStatusSpec{NodeName: spec}}
			if label != "" {
				old.Labels = map[string]string{apiv1.LabelSchedulerName: label}
			}
			gpus := gpufake.NewSimpleClientset(old)
			w := status.NewWriter(status.Config{Node: "n1", GPUClient: gpus, KubeClient: fake.NewSimpleClientset(node), Clock: clk,
				Heartbeat: time.Minute, MinInterval: -1})
			if err := w.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if ok, err := w.Sync(ctx, node, status.Summarize(nil, "new")); err != nil || !ok {
				t.Fatalf("spec.nodeName %q, label %q: Sync: %v, %v", spec, label, ok, err)
			}
			gns, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if gns.Spec.NodeName != "n1" || gns.Status.Message != "new" {
				t.Errorf("spec.nodeName %q, label %q: after the agent of n1 wrote it, spec.nodeName is %q and the message %q; want n1 and the new message",
					spec, label, gns.Spec.NodeName, gns.Status.Message)
			}
		}
	}
}

// TestFirstHeartbeatSpread: agents started together beat spread over the whole interval from
// their first heartbeat on, not all within its last fifth; after that first beat each keeps
// its own interval.
func TestFirstHeartbeatSpread(t *testing.T) {
	const interval = 3 * time.Minute
	start := time.Unix(1_000_000, 0)
	var quarters [4]int
	for i := range 1000 {
		clk := clocktesting.NewFakePassiveClock(start)
		name := fmt.Sprintf("node-%04d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
		w := status.NewWriter(status.Config{
			Node: name, GPUClient: gpufake.NewSimpleClientset(), KubeClient: fake.NewSimpleClientset(node), Clock: clk,
			Heartbeat: interval, SpreadFirstHeartbeat: true, MinInterval: -1,
		})
		written := status.Summarize([]apiv1.Device{{ID: 0, Health: apiv1.Healthy}}, "")
		if ok, err := w.Sync(context.Background(), node, written); err != nil || !ok {
			t.Fatalf("%s: first Sync wrote %v, %v", name, ok, err)
		}
		first := w.Due(written)
		if !first.After(start) || first.After(start.Add(interval)) {
			t.Fatalf("%s: first heartbeat at +%s, want within (0, %s]", name, first.Sub(start), interval)
		}
		quarters[int(first.Sub(start)*4/interval)%4]++
		if i%100 != 0 {
			continue
		}
		// The first beat is written when due, and the next comes a whole interval later.
		clk.SetTime(first)
		if ok, err := w.Sync(context.Background(), node, written); err != nil || !ok {
			t.Fatalf("%s: first heartbeat not written when due: %v, %v", name, ok, err)
		}
		if next := w.Due(written); !next.Equal(first.Add(w.HeartbeatInterval())) {
			t.Fatalf("%s: heartbeat after the first at +%s, want +%s", name, next.Sub(first), w.HeartbeatInterval())
		}
	}
	for q, n := range quarters {
		if n < 150 || n > 350 {
			t.Errorf("%d of 1000 first heartbeats in quarter %d of the interval, want about 250 in each: %v", n, q+1, quarters)
		}
	}
}

// TestMIGAndShares: a GPU in MIG mode is never counted free; a MIG device's health follows its
// GPU's and its holders its lease's; a change of MIG layout, MIG holders or shares is a
// change to write.
func TestMIGAndShares(t *testing.T) {
	mk := func() []apiv1.Device {
		return []apiv1.Device{
			{ID: 0, Health: apiv1.Unhealthy, Reason: "Xid 79", MIG: status.MIG(&gpu.MIG{Enabled: true, Slices: 8, Devices: []gpu.MIGDevice{
				{Slot: 0, Size: 4, Profile: "3g.40gb", UUID: "MIG-a", MemoryMiB: 40192},
				{Slot: 4, Size: 4, Profile: "3g.40gb", UUID: "MIG-b", MemoryMiB: 40192},
			}})},
			{ID: 1, Health: apiv1.Healthy, MIG: status.MIG(&gpu.MIG{Enabled: true, Slices: 8})},
			{ID: 2, Health: apiv1.Healthy, MIG: status.MIG(&gpu.MIG{Slices: 8})},
			{ID: 3, Health: apiv1.Healthy},
		}
	}
	devs := mk()
	holders := map[apiv1.MIGDeviceRef][]string{{GPU: 0, Slot: 4}: {"uid-b"}}
	for i := range devs {
		status.MIGUsage(&devs[i], holders)
	}
	if d := devs[0].MIG.Devices[1]; d.Health != apiv1.Unhealthy || d.Reason != "Xid 79" || len(d.InUseBy) != 1 || d.InUseBy[0] != "uid-b" {
		t.Errorf("MIG device 0:4 = %+v, want Unhealthy (Xid 79) held by uid-b", d)
	}
	st := status.Summarize(devs, "")
	if st.Free != 2 || st.Healthy != 3 {
		t.Errorf("Summarize: free %d healthy %d, want free 2 (GPUs 2 and 3; GPU 1 is in MIG mode), healthy 3", st.Free, st.Healthy)
	}
	for name, change := range map[string]func(d []apiv1.Device){
		"MIG holder": func(d []apiv1.Device) { d[0].MIG.Devices[0].InUseBy = []string{"uid-a"} },
		"MIG layout": func(d []apiv1.Device) { d[1].MIG.Devices = []apiv1.MigDevice{{Slot: 0, Size: 8, Profile: "7g.80gb"}} },
		"MIG mode":   func(d []apiv1.Device) { d[2].MIG.Enabled = true },
		"shares":     func(d []apiv1.Device) { d[3].Shares = &apiv1.DeviceShares{Sharers: 1, MemoryMiB: 20480} },
	} {
		b := mk()
		for i := range b {
			status.MIGUsage(&b[i], holders)
		}
		change(b)
		if status.Same(st, status.Summarize(b, "")) {
			t.Errorf("%s changed, but Same says the statuses are the same", name)
		}
	}
}
