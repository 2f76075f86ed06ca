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
