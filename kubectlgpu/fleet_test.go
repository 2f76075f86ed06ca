package kubectlgpu

import (
	"bytes"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func lease(node, gpu, ns, pod string) coordinationv1.Lease {
	holder := "uid-" + pod
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + node + "-" + gpu, Labels: map[string]string{
			apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: gpu,
			apiv1.LabelPodNamespace: ns, apiv1.LabelPodName: pod,
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

func node(name string, devs ...apiv1.Device) apiv1.GpuNodeStatus {
	return apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: apiv1.GpuNodeStatusSpec{NodeName: name},
		Status: apiv1.GpuNodeStatusStatus{Devices: devs}}
}

func dev(id int32, island string, h apiv1.Health) apiv1.Device {
	return apiv1.Device{ID: id, Island: island, Health: h, Product: "H100", BandwidthGBps: 900}
}

func TestSummarise(t *testing.T) {
	statuses := []apiv1.GpuNodeStatus{
		// n1: island a has one held GPU and one free (fragmented), island b is whole and free.
		node("n1", dev(0, "a", apiv1.Healthy), dev(1, "a", apiv1.Healthy), dev(2, "b", apiv1.Healthy), dev(3, "b", apiv1.Healthy)),
		// n2: one unhealthy, one held, in the same island: no free GPU to count as fragmented.
		node("n2", dev(0, "a", apiv1.Unhealthy), dev(1, "a", apiv1.Healthy)),
	}
	leases := []coordinationv1.Lease{lease("n1", "0", "ml", "train"), lease("n2", "1", "ml", "eval"), lease("gone", "0", "ml", "x")}
	f := &Fleet{
		Nodes: Build(statuses, leases, map[string]string{"n1": "dgx-h100", "n2": "dgx-h100"}),
		Claims: []apiv1.GpuClaim{
			{Status: apiv1.GpuClaimStatus{Phase: apiv1.ClaimBound}},
			{Status: apiv1.GpuClaimStatus{Phase: apiv1.ClaimBound}},
			{},
		},
	}
	s := Summarise(f)
	if len(s.Rows) != 1 {
		t.Fatalf("rows = %+v, want one row for H100/dgx-h100", s.Rows)
	}
	want := SummaryRow{Model: "H100", Pool: "dgx-h100", Nodes: 2, Total: 6, Allocated: 2, Free: 3, Unhealthy: 1}
	if s.Rows[0] != want {
		t.Errorf("row = %+v, want %+v", s.Rows[0], want)
	}
	if s.Fragmented != 1 {
		t.Errorf("fragmented = %d, want 1", s.Fragmented)
	}
	if s.ClaimsByPhase["Bound"] != 2 || s.ClaimsByPhase["Pending"] != 1 {
		t.Errorf("claims by phase = %v, want Bound=2 Pending=1", s.ClaimsByPhase)
	}
	if got := f.Nodes[0].GPUs[0].Holders; len(got) != 1 || got[0] != "ml/train" {
		t.Errorf("holders of n1/0 = %v, want [ml/train]", got)
	}
}

func TestUnhealthy(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	failed := metav1.NewTime(now.Add(-90 * time.Minute))
	bad := dev(1, "a", apiv1.Unhealthy)
	bad.Reason, bad.LastTransitionTime, bad.RecoveryCount = "Xid 79", &failed, 3
	flapped := dev(2, "a", apiv1.Healthy)
	flapped.RecoveryCount = 1 // no time: published by an agent that did not record it
	nodes := Build([]apiv1.GpuNodeStatus{node("n1", dev(0, "a", apiv1.Healthy), bad, flapped)},
		[]coordinationv1.Lease{lease("n1", "1", "ml", "train")}, nil)
	got := Unhealthy(nodes, false)
	want := UnhealthyGPU{Node: "n1", ID: 1, Model: "H100", Health: "Unhealthy", Reason: "Xid 79", Holder: "ml/train",
		Since: &failed, Recoveries: 3}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Unhealthy = %+v, want [%+v]", got, want)
	}
	got = Unhealthy(nodes, true)
	if len(got) != 2 || got[1].ID != 2 || got[1].Recoveries != 1 || got[1].Since != nil {
		t.Fatalf("Unhealthy with recovered = %+v, want GPU 1 and the recovered GPU 2", got)
	}
	var out bytes.Buffer
	if err := printUnhealthy(&out, got, true, now); err != nil {
		t.Fatal(err)
	}
	wantOut := `NODE  GPU  MODEL  HEALTH     SINCE      RECOVERIES  REASON  HOLDER
n1    1    H100   Unhealthy  90m        3           Xid 79  ml/train
n1    2    H100   Healthy    <unknown>  1           -       -
`
	if out.String() != wantOut {
		t.Errorf("health table:\n%s\nwant:\n%s", out.String(), wantOut)
	}
}

func TestStaleness(t *testing.T) {
	l := lease("n1", "1", "ml", "train")
	l.Spec.HolderIdentity = ptr.To("uid-1")
	pod := func(uid, alloc string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Annotations: map[string]string{}}}
		if alloc != "" {
			p.Annotations[apiv1.AnnotationAllocated] = alloc
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"pod gone", nil, "holder pod gone"},
		{"name reused", pod("uid-2", "n1:1"), "holder pod gone (a new pod has its name)"},
		{"not in allocation", pod("uid-1", "n1:0,2"), "GPU not in the pod's allocation n1:0,2"},
		{"other node", pod("uid-1", "n2:1"), "GPU not in the pod's allocation n2:1"},
		{"held", pod("uid-1", "n1:1,2"), ""},
		{"allocation not written yet", pod("uid-1", ""), ""},
	} {
		got, err := Staleness(&l, func(_, _ string) (*corev1.Pod, error) { return tc.pod, nil })
		if err != nil || got != tc.want {
			t.Errorf("%s: Staleness = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	// A MIG device's lease: held while the pod's MIG devices name it.
	mig := lease("n1", "1", "ml", "train")
	mig.Labels[apiv1.LabelLeaseMIGSlot] = "4"
	mig.Spec.HolderIdentity = ptr.To("uid-1")
	for devs, want := range map[string]string{"1:4": "", "1:2": `MIG device 1:4 not in the pod's MIG devices "1:2"`} {
		p := pod("uid-1", "n1:1")
		p.Annotations[apiv1.AnnotationMIGDevices] = devs
		if got, err := Staleness(&mig, func(_, _ string) (*corev1.Pod, error) { return p, nil }); err != nil || got != want {
			t.Errorf("MIG lease, pod's devices %s: Staleness = %q, %v; want %q", devs, got, err, want)
		}
	}
	shared := lease("n1", "1", "ml", "train")
	shared.Labels[apiv1.LabelLeaseShared] = "true"
	if got, _ := Staleness(&shared, func(_, _ string) (*corev1.Pod, error) { return nil, nil }); got != "" {
		t.Errorf("shared lease judged stale (%q): shared leases are never provably stale", got)
	}
}

// A node's liveness lease gives its Renewed, never holders; the wide table shows how old the
// status heartbeat and the renewal are.
func TestBuildReadsLivenessLeases(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	n1 := node("n1", dev(0, "a", apiv1.Healthy))
	n1.Status.LastHeartbeatTime = metav1.NewTime(now.Add(-25 * time.Minute))
	live := coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-n1-agent", Labels: map[string]string{apiv1.LabelAgentLiveness: apiv1.SchedulerName}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1"), RenewTime: &metav1.MicroTime{Time: now.Add(-2 * time.Minute)}},
	}
	nodes := Build([]apiv1.GpuNodeStatus{n1}, []coordinationv1.Lease{live}, nil)
	if len(nodes) != 1 || nodes[0].Renewed == nil || !nodes[0].Renewed.Equal(&metav1.Time{Time: live.Spec.RenewTime.Time}) {
		t.Fatalf("nodes = %+v, want n1 renewed at %s", nodes, live.Spec.RenewTime)
	}
	if g := nodes[0].GPUs[0]; len(g.Holders) != 0 || !g.Free {
		t.Errorf("GPU 0 = %+v: the liveness lease made it held", g)
	}
	var out bytes.Buffer
	if err := printNodes(&out, nodes, true, false, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HEARTBEAT", "LIVENESS", "25m", "2m"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("wide output lacks %q:\n%s", want, out.String())
		}
	}
}

// A liveness lease held by another node than its name says keeps no node alive in the
// scheduler (claims.ParseLiveness), so kubectl gpu shows no renewal from it either.
func TestBuildIgnoresLivenessLeaseOfAnotherNode(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	n2 := node("n2", dev(0, "a", apiv1.Healthy))
	spoof := coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-n1-agent", Labels: map[string]string{apiv1.LabelAgentLiveness: apiv1.SchedulerName}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n2"), RenewTime: &metav1.MicroTime{Time: now}},
	}
	nodes := Build([]apiv1.GpuNodeStatus{n2}, []coordinationv1.Lease{spoof}, nil)
	if len(nodes) != 1 || nodes[0].Renewed != nil {
		t.Fatalf("nodes = %+v, want n2 with no renewal: lease %s names n1", nodes, spoof.Name)
	}
}
