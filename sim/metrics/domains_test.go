package metrics

import (
	"testing"
	"time"
)

func tray(name, clique string) Node {
	return Node{Name: name, Pool: "nvl", Islands: []string{"t", "t", "t", "t"}, Labels: map[string]string{"clique": clique}}
}

// member is a gang member of 4 GPUs with gangTopology at level clique.
func member(gang, mode string, created time.Duration) Pod {
	return Pod{Name: gang, GPUs: 4, Created: created, Gang: gang, GangLevel: "clique", GangMode: mode}
}

func on(p Pod, at time.Duration, node string) Pod {
	p.Bound, p.BoundOK, p.Node = at, true, node
	return p
}

// TestComputeDomains: two domains of three trays (a, b) and an unlabelled 8-GPU node x, five
// gangs placed by hand. Worked out in the comments.
func TestComputeDomains(t *testing.T) {
	x := Node{Name: "x", Pool: "dgx", Islands: []string{"a", "a", "a", "a", "b", "b", "b", "b"}}
	in := Input{
		Nodes: []Node{tray("a0", "A"), tray("a1", "A"), tray("a2", "A"), tray("b0", "B"), tray("b1", "B"), tray("b2", "B"), x},
		Pods: []Pod{
			// g1, Required: arrives at 0 with both domains free, placed inside A at 1s, ends at 10s.
			ended(on(member("g1", "Required", 0), 1*s, "a0"), 10*s),
			ended(on(member("g1", "Required", 0), 1*s, "a1"), 10*s),
			// A single pod on b2 until 3s: b2 is no free tray then, but b0 and b1 are.
			ended(bound("single", 1, 0, 0, "b2", 0), 3*s),
			// g2, Preferred: arrives at 2s, when B has room (A only a2); split across A and B.
			ended(on(member("g2", "Preferred", 2*s), 3*s, "a2"), 11*s),
			ended(on(member("g2", "Preferred", 2*s), 3*s, "b0"), 11*s),
			// g3, Required, 3 trays: arrives at 4s when no domain has 3 free; inside A at 12s.
			on(member("g3", "Required", 4*s), 12*s, "a0"),
			on(member("g3", "Required", 4*s), 12*s, "a1"),
			on(member("g3", "Required", 4*s), 12*s, "a2"),
			// g4, Required: arrives at 5s and is never placed.
			member("g4", "Required", 5*s),
			member("g4", "Required", 5*s),
			// g5, Required: arrives at 13s with B free, placed across b0 and the unlabelled x.
			on(member("g5", "Required", 13*s), 14*s, "b0"),
			on(member("g5", "Required", 13*s), 14*s, "x"),
			// A gang without gangTopology is not counted.
			{Name: "plain", GPUs: 4, Gang: "plain", Created: 0, Bound: 1 * s, BoundOK: true, Node: "x"},
			{Name: "plain", GPUs: 4, Gang: "plain", Created: 0, Bound: 1 * s, BoundOK: true, Node: "x"},
		},
		End: 16 * s,
	}
	d := Compute(in).Domains
	if d == nil {
		t.Fatal("Domains = nil, want the figures of the gangs with gangTopology")
	}
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("Level", d.Level, "clique")
	check("Gangs", d.Gangs, 5)
	check("Placed", d.Placed, 4)           // g1, g2, g3, g5
	check("InOneDomain", d.InOneDomain, 2) // g1, g3 (x is in no domain)
	check("InOneRatio", d.InOneRatio, 0.5)
	check("FitOnArrival", d.FitOnArrival, 3) // g1, g2, g5; not g3
	check("FitInOne", d.FitInOne, 1)
	check("FitSplit", d.FitSplit, 2)
	check("FitInOneRate", d.FitInOneRate, 1.0/3.0)
	check("RequiredSplit", d.RequiredSplit, 1) // g5; g2 is Preferred
	// Placement times 1s (g1), 1s (g2), 8s (g3), 1s (g5).
	check("PlaceP50", d.PlaceP50, 1*s)
	check("PlaceP99", d.PlaceP99, 8*s)
	// A gang waits at 0 (g1), 2 (g2), and 4..16 (g3, then g4 to the end): 15 samples. Stranded:
	// at 2s A's one free tray (g2 needs two), at 4s B's two free trays (g3 needs three, g4 has
	// not arrived); from 5s g4 fits wherever two trays are free.
	check("WaitingSamples", d.WaitingSamples, 15)
	check("StrandedMax", d.StrandedMax, 2)
	check("StrandedMean", d.StrandedMean, 3.0/15.0)
}

func TestComputeDomainsNone(t *testing.T) {
	in := Input{
		Nodes: []Node{tray("a0", "A"), tray("a1", "A")},
		Pods: []Pod{
			{Name: "p0", GPUs: 4, Gang: "g", Bound: s, BoundOK: true, Node: "a0"},
			{Name: "p1", GPUs: 4, Gang: "g", Bound: s, BoundOK: true, Node: "a1"},
		},
		End: 2 * s,
	}
	if d := Compute(in).Domains; d != nil {
		t.Errorf("Domains = %+v, want nil without gangTopology", d)
	}
}
