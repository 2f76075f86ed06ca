package gpuclaim

import (
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// oneSharedGPU makes node a's GPU 0 its only healthy GPU, of 80 GiB, and waits for the ledger.
func (e *testEnv) oneSharedGPU(t *testing.T) {
	t.Helper()
	st, err := e.gpu.GpuV1().GpuNodeStatuses().Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range st.Status.Devices {
		st.Status.Devices[i].MemoryMiB = 81920
		if i > 0 {
			st.Status.Devices[i].Health = apiv1.Unhealthy
		}
	}
	if _, err := e.gpu.GpuV1().GpuNodeStatuses().UpdateStatus(t.Context(), st, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool {
		n, _ := e.p.ledger.NodeView("a")
		return n != nil && n.GPUs[0].MemoryMiB == 81920 && n.GPUs[1].Health != 0
	})
}

func sharedClaim(name string, share *apiv1.GPUShare) *apiv1.GpuClaim {
	return ledgertest.Claim(name, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.Shared, Share: share}})
}

func (e *testEnv) lease(t *testing.T, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := e.kube.CoordinationV1().Leases(*e.p.args.LeaseNamespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Four 25 %-memory claims share the GPU, their shares on its lease; a fifth stays Pending with
// the memory cap named; a share-less Shared claim still joins; a holder released leaves the
// lease's shares.
func TestSharedMemoryCap(t *testing.T) {
	quarter := &apiv1.GPUShare{MemoryPercent: 25}
	objs := []runtime.Object{sharedClaim("free", nil)}
	for _, n := range []string{"q1", "q2", "q3", "q4", "q5"} {
		objs = append(objs, sharedClaim(n, quarter))
	}
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, objs...)
	e.oneSharedGPU(t)
	for _, n := range []string{"q1", "q2", "q3", "q4"} {
		if got, st, _ := e.schedule(t, ledgertest.Pod(n, n)); st != nil || got != "a" {
			t.Fatalf("%s: %q %v", n, got, st)
		}
	}
	shares, err := apiv1.ParseLeaseShares(e.lease(t, "gpu-a-0").Annotations[apiv1.AnnotationLeaseShares])
	if err != nil || len(shares) != 4 || shares["uid-q3"] != (apiv1.ResolvedShare{MemoryMiB: 20480}) {
		t.Fatalf("lease shares %v, %v", shares, err)
	}
	_, st, _ := e.schedule(t, ledgertest.Pod("q5", "q5"))
	wantStatus(t, "fifth quarter", st, fwk.Unschedulable, "memory cap")
	if !strings.Contains(st.Message(), "81920 of 81920 MiB reserved, the share needs 20480") {
		t.Fatalf("reason without the numbers: %s", st.Message())
	}
	if got, st, _ := e.schedule(t, ledgertest.Pod("free", "free")); st != nil || got != "a" {
		t.Fatalf("share-less claim: %q %v", got, st)
	}
	// The fake API server does not refuse a stale resourceVersion: let the informer catch up.
	eventuallyTrue(t, func() bool {
		l, err := e.p.leaseLister.Leases(*e.p.args.LeaseNamespace).Get("gpu-a-0")
		return err == nil && strings.Contains(*l.Spec.HolderIdentity, "uid-free")
	})
	if err := e.p.releaseLease(t.Context(), "gpu-a-0", "uid-q1"); err != nil {
		t.Fatal(err)
	}
	l := e.lease(t, "gpu-a-0")
	shares, _ = apiv1.ParseLeaseShares(l.Annotations[apiv1.AnnotationLeaseShares])
	if _, left := shares["uid-q1"]; left || len(shares) != 4 || strings.Contains(*l.Spec.HolderIdentity, "uid-q1") {
		t.Fatalf("released holder still on the lease: %s %v", *l.Spec.HolderIdentity, shares)
	}
}

// joinShared decides on the API server's lease: a lease whose holders' shares (written by
// another scheduler this one's ledger has not heard of) leave no room is not joined.
func TestJoinSharedRefusesOverCommit(t *testing.T) {
	e := newTestEnvArgs(t, &Args{MaxSharersPerGPU: ptrTo[int32](3)}, []*v1.Node{ledgertest.Node("a", nil)})
	e.oneSharedGPU(t)
	ns := *e.p.args.LeaseNamespace
	pod := ledgertest.Pod("other", "")
	l, err := claims.NewGPULease(ns, pod, "a", 0, true, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	claims.SetLeaseShares(l, []types.UID{"x", "y"}, map[types.UID]apiv1.ResolvedShare{"x": {MemoryMiB: 61440, ComputePercent: 50}, "y": {ComputePercent: 40}})
	l.Spec.HolderIdentity = ptrTo("x,y")
	if _, err := e.kube.CoordinationV1().Leases(ns).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		share apiv1.ResolvedShare
		want  string // "" joins
	}{
		{apiv1.ResolvedShare{MemoryMiB: 20481}, "61440 of 81920 MiB"},
		{apiv1.ResolvedShare{ComputePercent: 11}, "90 % compute"},
		{apiv1.ResolvedShare{MemoryMiB: 20480, ComputePercent: 10}, ""},
		{apiv1.ResolvedShare{}, "4 sharers, more than maxSharersPerGPU 3"},
	} {
		uid := types.UID("new-" + c.want)
		err := e.p.joinShared(t.Context(), l.Name, "a", 0, uid, c.share)
		if c.want == "" {
			if err != nil {
				t.Fatalf("%+v: %v", c.share, err)
			}
			continue
		}
		if !errors.Is(err, errLeaseConflict) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v joined or refused without %q: %v", c.share, c.want, err)
		}
	}
	got, _ := apiv1.ParseLeaseShares(e.lease(t, l.Name).Annotations[apiv1.AnnotationLeaseShares])
	if len(got) != 3 || got["new-"] != (apiv1.ResolvedShare{MemoryMiB: 20480, ComputePercent: 10}) {
		t.Fatalf("lease shares %v", got)
	}
}

func TestPodShareAnnotation(t *testing.T) {
	quarter := &apiv1.GPUShare{MemoryPercent: 25, ComputePercent: 20}
	e := newTestEnv(t, []*v1.Node{ledgertest.Node("a", nil)}, sharedClaim("q", quarter))
	e.oneSharedGPU(t)
	if _, st, _ := e.schedule(t, ledgertest.Pod("q", "q")); st != nil {
		t.Fatal(st)
	}
	for _, a := range e.kube.Actions() {
		if a.GetSubresource() != "binding" {
			continue
		}
		b := a.(interface{ GetObject() runtime.Object }).GetObject().(*v1.Binding)
		if got := b.Annotations[apiv1.AnnotationShare]; got != "memoryMiB=20480,computePercent=20" {
			t.Fatalf("share annotation %q", got)
		}
		return
	}
	t.Fatal("no binding")
}

func TestMaxSharersPerGPUArg(t *testing.T) {
	a, err := decodeArgs(nil)
	if err != nil || *a.MaxSharersPerGPU != 16 {
		t.Fatalf("default maxSharersPerGPU: %v, %v", a, err)
	}
	if _, err := decodeArgs(&runtime.Unknown{Raw: []byte("maxSharersPerGPU: 0")}); err == nil || !strings.Contains(err.Error(), "maxSharersPerGPU") {
		t.Fatalf("maxSharersPerGPU 0 accepted: %v", err)
	}
}
