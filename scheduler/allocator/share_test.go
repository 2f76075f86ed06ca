package allocator

import (
	"strings"
	"testing"
)

// sharedNode is two 80 GiB GPUs; GPU 0 already carries shares.
func sharedNode(mem0 int64, comp0, sharers0 int) *Node {
	n := NewBuilder("n").Standalone(0, 0, 1).Node()
	for i := range n.GPUs {
		n.GPUs[i].MemoryMiB = 81920
	}
	n.GPUs[0].SharedHolders = sharers0
	n.GPUs[0].SharedMemoryMiB = mem0
	n.GPUs[0].SharedComputePercent = comp0
	return n
}

func TestShareFitsOnlyUnderCaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  *Node
		req   Request
		want  []int  // GPUs chosen; nil: unfit
		cause string // in the Unfit reason
	}{
		{"25 % memory fits beside 50 %", sharedNode(40960, 0, 2), Request{Count: 2, Exclusivity: Shared, Share: Share{MemoryPercent: 25}}, []int{0, 1}, ""},
		{"memory over-commit", sharedNode(61441, 0, 2), Request{Count: 2, Exclusivity: Shared, Share: Share{MemoryPercent: 25}}, nil, "memory cap"},
		{"memory exactly full fits", sharedNode(61440, 0, 2), Request{Count: 2, Exclusivity: Shared, Share: Share{MemoryMiB: 20480}}, []int{0, 1}, ""},
		{"compute over 100", sharedNode(0, 80, 2), Request{Count: 2, Exclusivity: Shared, Share: Share{ComputePercent: 30}}, nil, "compute cap"},
		{"sharers bound", sharedNode(0, 0, 4), Request{Count: 2, Exclusivity: Shared, MaxSharers: 4}, nil, "sharers cap"},
		{"share-less shares as before", sharedNode(81920, 100, 9), Request{Count: 2, Exclusivity: Shared}, []int{0, 1}, ""},
		{"pinned refuses the cap", sharedNode(81920, 0, 1), Request{Count: 1, Exclusivity: Shared, Pinned: []int{0}, Share: Share{MemoryMiB: 1}}, nil, "memory cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Allocate(tc.node, tc.req)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.cause) {
					t.Fatalf("Allocate = %v, %v; want unfit naming %q", res.IDs, err, tc.cause)
				}
				return
			}
			if err != nil || FormatIDs(res.IDs) != FormatIDs(tc.want) {
				t.Fatalf("Allocate = %v, %v; want %v", res.IDs, err, tc.want)
			}
		})
	}
}

func TestShareUnfitNamesNumbers(t *testing.T) {
	_, err := Allocate(sharedNode(61441, 0, 2), Request{Count: 2, Exclusivity: Shared, Share: Share{MemoryPercent: 25}})
	if err == nil || !strings.Contains(err.Error(), "61441 of 81920 MiB reserved, the share needs 20480") {
		t.Fatalf("reason %v does not give the memory numbers", err)
	}
}

func TestShareResolvedPerGPU(t *testing.T) {
	n := sharedNode(0, 0, 0)
	n.GPUs[1].MemoryMiB = 40960
	res, err := Allocate(n, Request{Count: 2, Exclusivity: Shared, Share: Share{MemoryPercent: 25, ComputePercent: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Shares) != 2 || res.Shares[0] != (Resolved{20480, 10}) || res.Shares[1] != (Resolved{10240, 10}) {
		t.Fatalf("shares %+v", res.Shares)
	}
}

func TestShareValidate(t *testing.T) {
	for _, r := range []Request{
		{Count: 1, Share: Share{MemoryMiB: 1}},
		{Count: 1, Exclusivity: Shared, Share: Share{MemoryMiB: 1, MemoryPercent: 1}},
		{Count: 1, Exclusivity: Shared, Share: Share{ComputePercent: 101}},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v validated", r)
		}
	}
}

func TestWholeRequestsNeverTakeMIGModeGPUs(t *testing.T) {
	n := NewBuilder("n").Island("nv", 600, 0, 1, 2, 3).Node()
	n.GPUs[1].MIGMode, n.GPUs[2].MIGMode = true, true
	for _, ex := range []Exclusivity{Exclusive, Shared} {
		res, err := Allocate(n, Request{Count: 2, Exclusivity: ex})
		if err != nil || FormatIDs(res.IDs) != "0,3" {
			t.Fatalf("%v: %v, %v; want 0,3", ex, res.IDs, err)
		}
		if _, err := Allocate(n, Request{Count: 3, Exclusivity: ex}); err == nil || !strings.Contains(err.Error(), "2 in MIG mode") {
			t.Fatalf("%v: 3 GPUs: %v", ex, err)
		}
	}
	if _, err := Allocate(n, Request{Count: 1, Pinned: []int{1}}); err == nil || !strings.Contains(err.Error(), "MIG mode") {
		t.Fatalf("pinned MIG GPU: %v", err)
	}
}

func TestPercentSharesSumToTheWholeGPU(t *testing.T) {
	n := NewBuilder("n").Standalone(0, 0).Node()
	n.GPUs[0].MemoryMiB = 23034 // an L4: not a multiple of 4
	req := Request{Count: 1, Exclusivity: Shared, Share: Share{MemoryPercent: 25}}
	for i := 0; i < 4; i++ {
		res, err := Allocate(n, req)
		if err != nil {
			t.Fatalf("quarter %d: %v", i+1, err)
		}
		n.GPUs[0].SharedHolders++
		n.GPUs[0].SharedMemoryMiB += res.Shares[0].MemoryMiB
	}
}
