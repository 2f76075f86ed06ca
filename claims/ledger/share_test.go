package ledger

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// oneGPUStatus is a node with one healthy 80 GiB GPU.
func oneGPUStatus(node string, now time.Time) *apiv1.GpuNodeStatus {
	s := ledgertest.SeedStatus(node, now)
	s.Status.Devices = s.Status.Devices[:1]
	s.Status.Devices[0].MemoryMiB = 81920
	return s
}

func TestLedgerCountsShares(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(oneGPUStatus("a", now))
	quarter := allocator.Request{Count: 1, Exclusivity: allocator.Shared, Share: allocator.Share{MemoryPercent: 25, ComputePercent: 30}, MaxSharers: 16}
	res, err := l.Reserve("p1", "ns/c1", "a", quarter)
	if err != nil || len(res.Shares) != 1 || res.Shares[0] != (allocator.Resolved{MemoryMiB: 20480, ComputePercent: 30}) {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	// Another holder known from its lease with half the memory: 75 % of the memory and 60 %
	// of the compute are reserved now.
	l.AddShare("p2", "a", []int{0}, allocator.Resolved{MemoryMiB: 40960, ComputePercent: 30}, FromLease)
	n, _ := l.NodeView("a")
	if g := n.GPUs[0]; g.SharedHolders != 2 || g.SharedMemoryMiB != 61440 || g.SharedComputePercent != 60 {
		t.Fatalf("view %+v", g)
	}
	if _, err := l.Reserve("p3", "ns/c3", "a", quarter); err != nil {
		t.Fatalf("the last quarter must fit: %v", err)
	}
	// The GPU's memory is taken in full: a fourth 25 % share is refused, by Reserve, by the
	// summary (Candidates) and by FitsOn alike, with the memory cap named.
	if _, err := l.Reserve("p4", "ns/c4", "a", quarter); err == nil || !strings.Contains(err.Error(), "memory cap") {
		t.Fatalf("over-commit reserved: %v", err)
	}
	byFit, _ := l.Candidates(&quarter, now.Add(-time.Minute), func(string) bool { return true })
	for f, c := range byFit {
		if len(c) > 0 {
			t.Fatalf("candidates at fit %d: %v", f, c)
		}
	}
	ReleaseCandidates(byFit)
	if l.FitsOn("a", &quarter, now.Add(-time.Minute)) {
		t.Fatal("FitsOn offers a full GPU")
	}
	why := l.CapsRuledOut(&quarter, now.Add(-time.Minute), func(string) bool { return true })
	if !strings.Contains(why, "1 GPUs at the memory cap") || !strings.Contains(why, "81920 of 81920 MiB reserved, the share needs 20480") {
		t.Fatalf("CapsRuledOut = %q", why)
	}
	// A share-less Shared request still fits: it reserves nothing.
	if _, err := l.Reserve("p5", "ns/c5", "a", allocator.Request{Count: 1, Exclusivity: allocator.Shared}); err != nil {
		t.Fatal(err)
	}
	// A holder gone gives its share back.
	l.Forget("p2")
	if _, err := l.Reserve("p4", "ns/c4", "a", quarter); err != nil {
		t.Fatalf("share not given back: %v", err)
	}
}

func TestLedgerSharerBound(t *testing.T) {
	l := New()
	now := time.Now()
	l.SetStatus(oneGPUStatus("a", now))
	req := allocator.Request{Count: 1, Exclusivity: allocator.Shared, MaxSharers: 2}
	for _, uid := range []string{"p1", "p2"} {
		if _, err := l.Reserve(types.UID(uid), "ns/"+uid, "a", req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Reserve("p3", "ns/p3", "a", req); err == nil || !strings.Contains(err.Error(), "sharers cap") {
		t.Fatalf("third sharer reserved: %v", err)
	}
	if l.FitsOn("a", &req, now.Add(-time.Minute)) {
		t.Fatal("FitsOn offers a GPU at its sharer bound")
	}
}

func TestRequestForShare(t *testing.T) {
	c := ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{MemoryPercent: 25, ComputePercent: 50}}})
	req, err := RequestFor(c)
	if err != nil || req.Share != (allocator.Share{MemoryPercent: 25, ComputePercent: 50}) {
		t.Fatalf("RequestFor = %+v, %v", req, err)
	}
	for _, bad := range []apiv1.DeviceRequest{
		{Count: 1, Exclusivity: apiv1.Exclusive, Share: &apiv1.GPUShare{MemoryMiB: 10}},
		{Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{MemoryMiB: 10, MemoryPercent: 10}},
		{Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{}},
	} {
		if _, err := RequestFor(ledgertest.Claim("c", apiv1.GpuClaimSpec{Devices: bad})); err == nil || !strings.Contains(err.Error(), "spec.devices.share") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestMIGModeGPUNeverOffered(t *testing.T) {
	l := New()
	now := time.Now()
	s := ledgertest.SeedStatus("a", now)
	s.Status.Devices = s.Status.Devices[:2]
	s.Status.Devices[1].MIG = &apiv1.DeviceMIG{Enabled: true}
	l.SetStatus(s)
	req := allocator.Request{Count: 2}
	if l.FitsOn("a", &req, now.Add(-time.Minute)) {
		t.Fatal("the summary offers a GPU in MIG mode")
	}
	if _, err := l.Reserve("p", "ns/c", "a", req); err == nil {
		t.Fatal("reserved a GPU in MIG mode")
	}
	req.Count = 1
	if res, err := l.Reserve("p", "ns/c", "a", req); err != nil || res.IDs[0] != 0 {
		t.Fatalf("reserve = %v, %v", res.IDs, err)
	}
}

func TestPartCounts(t *testing.T) {
	l := New()
	now := time.Now()
	s := ledgertest.SeedStatus("a", now)
	s.Status.Devices = s.Status.Devices[:2]
	for i := range s.Status.Devices {
		s.Status.Devices[i].Product = "H100"
	}
	s.Status.Devices[1].MIG = &apiv1.DeviceMIG{Enabled: true, Devices: []apiv1.MigDevice{
		{Slot: 0, Profile: "1g.10gb", Health: apiv1.Healthy},
		{Slot: 1, Profile: "1g.10gb", Health: apiv1.Healthy, InUseBy: []string{"u"}},
		{Slot: 2, Profile: "3g.40gb", Health: apiv1.Unhealthy},
	}}
	l.SetStatus(s)
	l.Add("p1", "a", []int{0}, true, FromLease)
	l.Add("p2", "a", []int{0}, true, FromLease)
	shared, mig := l.PartCounts()
	if len(shared) != 1 || shared[0] != (SharerCount{Model: "H100", Sharers: 2, Count: 1}) {
		t.Fatalf("shared %+v", shared)
	}
	got := map[MIGCount]bool{}
	for _, m := range mig {
		got[m] = true
	}
	for _, want := range []MIGCount{{"H100", "1g.10gb", StateFree, 1}, {"H100", "1g.10gb", StateAllocated, 1}, {"H100", "3g.40gb", StateUnhealthy, 1}} {
		if !got[want] || len(mig) != 3 {
			t.Fatalf("mig %+v lacks %+v", mig, want)
		}
	}
}
