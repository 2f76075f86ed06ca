package kubectlgpu

import (
	"bytes"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// nodes shows a Shared GPU's sharers with the memory and compute they reserve, and a MIG-mode
// GPU's free MIG devices, which is never free whole.
func TestNodesShowsSharesAndMIG(t *testing.T) {
	shared := dev(0, "nv", apiv1.Healthy)
	shared.MemoryMiB = 81920
	mig := dev(1, "nv", apiv1.Healthy)
	mig.MIG = &apiv1.DeviceMIG{Enabled: true, Devices: []apiv1.MigDevice{
		{Slot: 0, Profile: "1g.10gb", Health: apiv1.Healthy, InUseBy: []string{"uid-x"}},
		{Slot: 1, Profile: "1g.10gb", Health: apiv1.Healthy},
		{Slot: 2, Profile: "1g.10gb", Health: apiv1.Unhealthy},
	}}
	l := lease("a", "0", "ns", "p")
	l.Labels[apiv1.LabelLeaseShared] = "true"
	*l.Spec.HolderIdentity = "uid-p,uid-q"
	l.Annotations = map[string]string{apiv1.AnnotationLeaseShares: "uid-p=20480/30,uid-q=0/0"}
	nodes := Build([]apiv1.GpuNodeStatus{node("a", shared, mig)}, []coordinationv1.Lease{l}, nil)
	g0, g1 := nodes[0].GPUs[0], nodes[0].GPUs[1]
	if g0.Sharers != 2 || g0.SharedMemoryMiB != 20480 || g0.SharedComputePercent != 30 {
		t.Fatalf("shared GPU %+v", g0)
	}
	if g1.Free || g1.MIG == nil || *g1.MIG != (MIGView{Free: 1, Total: 3}) {
		t.Fatalf("MIG GPU %+v %+v", g1, g1.MIG)
	}
	var out bytes.Buffer
	if err := printNodes(&out, nodes, false, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SHARE", "2 sharers, 20480/81920 MiB, 30% compute", "mig 1/3 free"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
