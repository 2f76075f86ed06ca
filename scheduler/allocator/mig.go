package allocator

import (
	"fmt"
	"sort"
	"strings"
)

// migGPU is one GPU in MIG mode as a MIG request sees it.
type migGPU struct {
	id int
	// free are the slots of its free, healthy devices of the request's profile.
	free []int
	// freeAll counts its free, healthy devices of every profile.
	freeAll int
}

// allocateMIG takes req.Count MIG devices of req.MIGProfile: free and healthy devices on
// healthy GPUs in MIG mode. It packs: the GPUs with the fewest free devices (of any profile)
// are taken from first, so that GPUs with much free stay so for the requests of other
// profiles. The layout is the operator's (docs/sharing.md): a profile is served by the
// devices that exist, never by making new ones.
func allocateMIG(n *Node, req *Request) (Result, error) {
	var gpus []migGPU
	total, unhealthy, held := 0, 0, 0
	others := map[string]int{}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.MIGMode {
			continue
		}
		mg := migGPU{id: g.ID}
		for _, d := range g.MIG {
			ok := g.Health == Healthy && d.Health == Healthy && d.Holder == ""
			if ok {
				mg.freeAll++
			}
			switch {
			case d.Profile != req.MIGProfile:
				if ok {
					others[d.Profile]++
				}
			case !ok && d.Holder != "":
				held++
			case !ok:
				unhealthy++
			default:
				mg.free = append(mg.free, d.Slot)
			}
		}
		if len(mg.free) > 0 {
			sort.Ints(mg.free)
			gpus = append(gpus, mg)
			total += len(mg.free)
		}
	}
	if total < req.Count {
		return Result{}, &Unfit{Reason: migNotEnough(req, total, held, unhealthy, others)}
	}
	sort.SliceStable(gpus, func(i, j int) bool {
		if gpus[i].freeAll != gpus[j].freeAll {
			return gpus[i].freeAll < gpus[j].freeAll
		}
		return gpus[i].id < gpus[j].id
	})
	res := Result{Score: 100, IslandLocal: true, Islands: 1, Fit: 100 * req.Count / total}
	for _, g := range gpus {
		if len(res.MIG) == req.Count {
			break
		}
		take := min(len(g.free), req.Count-len(res.MIG))
		for _, slot := range g.free[:take] {
			res.MIG = append(res.MIG, MIGSlot{GPU: g.id, Slot: slot})
		}
		res.IDs = append(res.IDs, g.id)
	}
	sort.Ints(res.IDs)
	sort.Slice(res.MIG, func(i, j int) bool {
		if res.MIG[i].GPU != res.MIG[j].GPU {
			return res.MIG[i].GPU < res.MIG[j].GPU
		}
		return res.MIG[i].Slot < res.MIG[j].Slot
	})
	return res, nil
}

// migNotEnough explains why a node has too few free devices of a MIG request's profile,
// naming the free devices of other profiles it has.
func migNotEnough(req *Request, free, held, unhealthy int, others map[string]int) string {
	msg := fmt.Sprintf("needs %d free MIG devices of profile %s; node has %d", req.Count, req.MIGProfile, free)
	var causes []string
	if held > 0 {
		causes = append(causes, fmt.Sprintf("%d held", held))
	}
	if unhealthy > 0 {
		causes = append(causes, fmt.Sprintf("%d not healthy", unhealthy))
	}
	if len(causes) > 0 {
		msg += " (" + strings.Join(causes, ", ") + ")"
	}
	if len(others) > 0 {
		msg += "; free of other profiles: " + FormatProfileCounts(others)
	}
	return msg
}

// FormatProfileCounts formats counts by MIG profile as "2 1g.10gb, 1 3g.40gb", by profile.
func FormatProfileCounts(counts map[string]int) string {
	profiles := make([]string, 0, len(counts))
	for p := range counts {
		profiles = append(profiles, p)
	}
	sort.Strings(profiles)
	parts := make([]string, len(profiles))
	for i, p := range profiles {
		parts[i] = fmt.Sprintf("%d %s", counts[p], p)
	}
	return strings.Join(parts, ", ")
}

// FreeMIG counts the free, healthy MIG devices of node n by profile (devices of GPUs that
// are not healthy are not free).
func FreeMIG(n *Node) map[string]int {
	var out map[string]int
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.MIGMode || g.Health != Healthy {
			continue
		}
		for _, d := range g.MIG {
			if d.Health == Healthy && d.Holder == "" {
				if out == nil {
					out = map[string]int{}
				}
				out[d.Profile]++
			}
		}
	}
	return out
}
