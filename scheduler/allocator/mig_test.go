package allocator

import (
	"fmt"
	"strings"
	"testing"
)

// migNode is four GPUs: 0 and 1 in MIG mode with seven 1g.10gb devices (slots 0-6), 2 in MIG
// mode with a 3g.40gb at slot 0 and a 4g.40gb at slot 4, 3 whole.
func migNode() *Node {
	n := NewBuilder("n").Island("nv", 600, 0, 1, 2, 3).Node()
	for _, id := range []int{0, 1} {
		n.GPUs[id].MIGMode = true
		for s := 0; s < 7; s++ {
			n.GPUs[id].MIG = append(n.GPUs[id].MIG, MIGDevice{Slot: s, Profile: "1g.10gb"})
		}
	}
	n.GPUs[2].MIGMode = true
	n.GPUs[2].MIG = []MIGDevice{{Slot: 0, Profile: "3g.40gb"}, {Slot: 4, Profile: "4g.40gb"}}
	return n
}

func migReq(count int, profile string) Request {
	return Request{Count: count, Exclusivity: MIG, MIGProfile: profile}
}

func formatMIG(ms []MIGSlot) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%d:%d", m.GPU, m.Slot)
	}
	return strings.Join(parts, ",")
}

func TestMIGTakesFreeDevicesOfTheProfile(t *testing.T) {
	n := migNode()
	res, err := Allocate(n, migReq(1, "3g.40gb"))
	if err != nil || formatMIG(res.MIG) != "2:0" || FormatIDs(res.IDs) != "2" {
		t.Fatalf("3g.40gb: %v %v, %v; want 2:0 on GPU 2", res.MIG, res.IDs, err)
	}
	// Never the whole GPU 3, never a device of another profile.
	if _, err := Allocate(n, migReq(2, "3g.40gb")); err == nil || !strings.Contains(err.Error(), "needs 2 free MIG devices of profile 3g.40gb; node has 1") {
		t.Fatalf("two 3g.40gb: %v", err)
	}
	if _, err := Allocate(n, migReq(1, "2g.20gb")); err == nil || !strings.Contains(err.Error(), "free of other profiles: 14 1g.10gb, 1 3g.40gb, 1 4g.40gb") {
		t.Fatalf("2g.20gb: %v", err)
	}
}

func TestMIGSkipsHeldAndUnhealthyDevices(t *testing.T) {
	n := migNode()
	n.GPUs[2].MIG[0].Holder = "pod-a"
	if _, err := Allocate(n, migReq(1, "3g.40gb")); err == nil || !strings.Contains(err.Error(), "1 held") {
		t.Fatalf("held 3g.40gb taken: %v", err)
	}
	n = migNode()
	n.GPUs[2].MIG[0].Health = Unhealthy
	if _, err := Allocate(n, migReq(1, "3g.40gb")); err == nil || !strings.Contains(err.Error(), "1 not healthy") {
		t.Fatalf("unhealthy 3g.40gb taken: %v", err)
	}
	// A device of an unhealthy GPU is not offered, whatever its own health says.
	n = migNode()
	n.GPUs[2].Health = Unhealthy
	if _, err := Allocate(n, migReq(1, "3g.40gb")); err == nil {
		t.Fatal("3g.40gb of an unhealthy GPU taken")
	}
}

func TestMIGPacksOntoTheFullestGPU(t *testing.T) {
	n := migNode()
	for s := 0; s < 5; s++ {
		n.GPUs[1].MIG[s].Holder = "pod"
	}
	res, err := Allocate(n, migReq(3, "1g.10gb"))
	if err != nil {
		t.Fatal(err)
	}
	// GPU 1 has 2 free, GPU 0 has 7: GPU 1's two first, then one of GPU 0's.
	if got := formatMIG(res.MIG); got != "0:0,1:5,1:6" || FormatIDs(res.IDs) != "0,1" {
		t.Fatalf("got %s on %v; want 0:0,1:5,1:6 on 0,1", got, res.IDs)
	}
}

func TestMIGRequestValidation(t *testing.T) {
	for _, r := range []Request{
		{Count: 1, Exclusivity: MIG},
		{Count: 1, MIGProfile: "1g.10gb"},
		{Count: 1, Exclusivity: MIG, MIGProfile: "1g.10gb", Pinned: []int{0}},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: valid", r)
		}
	}
}

func TestCloneCopiesMIGDevices(t *testing.T) {
	n := migNode()
	c := n.Clone()
	c.GPUs[0].MIG[0].Holder = "x"
	if n.GPUs[0].MIG[0].Holder != "" {
		t.Fatal("a clone's MIG device change reached the original")
	}
}
