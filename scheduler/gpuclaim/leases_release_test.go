package gpuclaim

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// releaseLease deletes from the informer's copy in one request when the copy names the pod,
// and reads the lease from the apiserver when the copy does not (it may lag behind).
func TestReleaseLeaseUsesCacheButNotBlindly(t *testing.T) {
	for _, c := range []struct {
		name       string
		cached     string // holder in the informer's copy; "" for no copy
		wantGets   int
		wantDelete bool
	}{
		{"fresh copy: delete only", "pod-a", 0, true},
		{"copy lags (names another pod): read, then delete", "pod-b", 1, true},
		{"no copy yet: read, then delete", "", 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			ns := *env.p.args.LeaseNamespace
			lease := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "gpu-n1-0", Namespace: ns, UID: "lease-uid", ResourceVersion: "7",
					Labels: map[string]string{apiv1.LabelLeaseNode: "n1", apiv1.LabelLeaseGPU: "0"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a")},
			}
			if _, err := env.kube.CoordinationV1().Leases(ns).Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var cached *coordinationv1.Lease
			if c.cached != "" {
				cached = lease.DeepCopy()
				cached.Spec.HolderIdentity = ptr.To(c.cached)
			}
			env.kube.ClearActions()
			if err := env.p.releaseLeaseFrom(t.Context(), cached, lease.Name, "pod-a"); err != nil {
				t.Fatal(err)
			}
			gets, deletes := 0, 0
			for _, a := range env.kube.Actions() {
				if a.GetResource().Resource != "leases" {
					continue
				}
				switch a.GetVerb() {
				case "get":
					gets++
				case "delete":
					deletes++
				}
			}
			if gets != c.wantGets || (deletes == 1) != c.wantDelete {
				t.Errorf("%d gets and %d deletes, want %d gets and a delete", gets, deletes, c.wantGets)
			}
			if _, err := env.kube.CoordinationV1().Leases(ns).Get(t.Context(), lease.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("lease still there after release: %v", err)
			}
		})
	}
}
