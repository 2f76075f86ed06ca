package leases_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func lease(name, node, gpu string, holder *string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpu-scheduler", Labels: map[string]string{apiv1.LabelLeaseNode: node, apiv1.LabelLeaseGPU: gpu}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder},
	}
}

func TestHolders(t *testing.T) {
	f := leases.NewInformerFactory(fake.NewClientset(), "gpu-scheduler", "", 0)
	inf, err := leases.Informer(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*coordinationv1.Lease{
		lease("gpu-n1-0", "n1", "0", ptr.To("uid-a")),
		lease("gpu-n1-1", "n1", "1", ptr.To(" uid-c, uid-b,,uid-c ")),
		lease("gpu-n1-2", "n1", "x", ptr.To("uid-d")),
		lease("gpu-n1-3", "n1", "3", nil),
		lease("gpu-n1-4", "n1", "4", ptr.To("")),
		lease("gpu-n2-0", "n2", "0", ptr.To("uid-e")),
	} {
		if err := inf.GetIndexer().Add(l); err != nil {
			t.Fatal(err)
		}
	}
	got := leases.Holders(inf.GetIndexer(), "n1")
	want := map[int][]string{0: {"uid-a"}, 1: {"uid-b", "uid-c"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Holders(n1) (-want +got):\n%s", diff)
	}
	if got := leases.Holders(inf.GetIndexer(), "n3"); got != nil {
		t.Errorf("Holders(n3) = %v, want none", got)
	}
}

// TestReadMIGAndShares: a MIG device's lease holds the device, not its GPU whole, and a
// Shared GPU's lease sums its holders' shares.
func TestReadMIGAndShares(t *testing.T) {
	f := leases.NewInformerFactory(fake.NewClientset(), "gpu-scheduler", "", 0)
	inf, err := leases.Informer(f)
	if err != nil {
		t.Fatal(err)
	}
	mig := func(name, gpu, slot, holder string) *coordinationv1.Lease {
		l := lease(name, "n1", gpu, ptr.To(holder))
		l.Labels[apiv1.LabelLeaseMIGSlot] = slot
		return l
	}
	shared := lease("gpu-n1-2", "n1", "2", ptr.To("uid-s1,uid-s2,uid-s3"))
	shared.Labels[apiv1.LabelLeaseShared] = "true"
	// uid-s3 is not listed: a sharer with no share; the bad entry is skipped.
	shared.Annotations = map[string]string{apiv1.AnnotationLeaseShares: "uid-s1=20480/25,uid-s2=1024/0,junk"}
	for _, l := range []*coordinationv1.Lease{
		lease("gpu-n1-0", "n1", "0", ptr.To("uid-a")),
		mig("gpu-n1-3-mig0", "3", "0", "uid-m0"),
		mig("gpu-n1-3-mig4", "3", "4", "uid-m4"),
		mig("gpu-n1-3-migx", "3", "x", "uid-bad"),
		shared,
	} {
		if err := inf.GetIndexer().Add(l); err != nil {
			t.Fatal(err)
		}
	}
	if h := leases.Holders(inf.GetIndexer(), "n1"); len(h[3]) > 0 {
		t.Errorf("Holders(n1)[3] = %v: MIG device holders taken for holders of GPU 3 whole", h[3])
	}
	got := leases.Read(inf.GetIndexer(), "n1")
	want := leases.Usage{
		GPUs:   map[int][]string{0: {"uid-a"}, 2: {"uid-s1", "uid-s2", "uid-s3"}},
		MIG:    map[apiv1.MIGDeviceRef][]string{{GPU: 3, Slot: 0}: {"uid-m0"}, {GPU: 3, Slot: 4}: {"uid-m4"}},
		Shares: map[int]apiv1.DeviceShares{2: {Sharers: 3, MemoryMiB: 21504, ComputePercent: 25}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read(n1) (-want +got):\n%s", diff)
	}
}
