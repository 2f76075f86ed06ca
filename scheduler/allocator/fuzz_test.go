package allocator

import (
	"errors"
	"fmt"
	"testing"
)

// nodeFromBytes builds a node of up to 16 GPUs: per GPU one byte picks health, holders, island
// and bandwidth.
func nodeFromBytes(data []byte) *Node {
	if len(data) > 16 {
		data = data[:16]
	}
	n := &Node{Name: "fuzz"}
	for i, b := range data {
		g := GPU{ID: i, UtilizationPercent: -1}
		switch b & 0x7 {
		case 0:
			g.Health = Unhealthy
		case 1:
			g.Health = Unknown
		case 2:
			g.ExclusiveHolder = "pod"
		case 3:
			g.SharedHolders = 2
		}
		if isl := (b >> 3) & 0x3; isl != 3 {
			g.Island = fmt.Sprintf("island-%d", isl)
		}
		g.BandwidthGBps = []int{0, 64, 600, 900}[(b>>5)&0x3]
		n.GPUs = append(n.GPUs, g)
	}
	return n
}

func FuzzAllocate(f *testing.F) {
	f.Add([]byte{0x44, 0x44, 0x44, 0x44, 0x2c, 0x2c, 0x2c, 0x28}, uint8(4), uint8(0), uint8(0), uint8(0), uint16(600), []byte{2, 3})
	f.Add([]byte{0x44, 0x42, 0x40, 0x43}, uint8(2), uint8(1), uint8(1), uint8(1), uint16(0), []byte{})
	f.Add([]byte{0x4c, 0x4c, 0x54, 0x54}, uint8(2), uint8(2), uint8(0), uint8(2), uint16(64), []byte{3, 0, 3})
	f.Add([]byte{}, uint8(1), uint8(0), uint8(0), uint8(0), uint16(0), []byte{})
	f.Fuzz(func(t *testing.T, gpus []byte, count, policy, excl, mode uint8, minBW uint16, prefer []byte) {
		n := nodeFromBytes(gpus)
		req := Request{
			Count:            int(count % 20),
			Policy:           Policy(policy % 4),
			Exclusivity:      Exclusivity(excl % 3),
			Topology:         TopologyMode(mode % 4),
			MinBandwidthGBps: int(minBW % 1000),
		}
		for _, p := range prefer {
			req.PreferIDs = append(req.PreferIDs, int(p%20))
		}
		res, err := Allocate(n, req)
		if err != nil {
			var u *Unfit
			if errors.As(err, &u) && u.Reason == "" {
				t.Fatalf("Unfit without a reason")
			}
			if req.Validate() == nil && !errors.As(err, &u) {
				t.Fatalf("valid request got a non-Unfit error: %v", err)
			}
			return
		}
		if req.Validate() != nil {
			t.Fatalf("invalid request %+v was allocated %v", req, res.IDs)
		}
		if len(res.IDs) != req.Count {
			t.Fatalf("got %d GPUs, want %d", len(res.IDs), req.Count)
		}
		seen := map[int]bool{}
		island := ""
		for i, id := range res.IDs {
			if seen[id] {
				t.Fatalf("GPU %d chosen twice: %v", id, res.IDs)
			}
			seen[id] = true
			if i > 0 && res.IDs[i-1] > id {
				t.Fatalf("IDs not sorted: %v", res.IDs)
			}
			g, ok := n.GPU(id)
			if !ok {
				t.Fatalf("GPU %d does not exist", id)
			}
			if g.Health != Healthy {
				t.Fatalf("GPU %d is %v", id, g.Health)
			}
			if g.ExclusiveHolder != "" {
				t.Fatalf("GPU %d is held exclusively", id)
			}
			if req.Exclusivity == Exclusive && g.SharedHolders > 0 {
				t.Fatalf("Exclusive request got shared GPU %d", id)
			}
			if req.Topology == Required {
				if g.BandwidthGBps < req.MinBandwidthGBps {
					t.Fatalf("Required request got GPU %d at %d GB/s < %d", id, g.BandwidthGBps, req.MinBandwidthGBps)
				}
				if i > 0 && islandKey(g) != island {
					t.Fatalf("Required request spans islands: %v", res.IDs)
				}
				island = islandKey(g)
			}
		}
		if res.Score < 0 || res.Score > 100 {
			t.Fatalf("score %d outside 0..100", res.Score)
		}
		for _, s := range []Strategy{Binpack, SpreadNodes, LeastUtilized} {
			if v := NodeScore(n, res, s); v < 0 || v > 100 {
				t.Fatalf("NodeScore %s = %d outside 0..100", s, v)
			}
		}
	})
}
