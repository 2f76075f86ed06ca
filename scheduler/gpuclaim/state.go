package gpuclaim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// stateData is what PreFilter learns about a pod, shared by the later extension points of the
// same cycle. Filter runs in parallel over nodes, so the per-node results have their own lock.
// Preemption's dry runs clone it per node and remove pods from the clone (RemovePod); only
// removed differs between clones.
type stateData struct {
	claim *apiv1.GpuClaim
	key   string
	req   allocator.Request
	// reqKey is req's shape for the ledger's placement cache.
	reqKey string
	// tier is the fit tier PreFilter offered nodes from; PostFilter relaxes it when every
	// node of that tier failed for other reasons (taints, selectors of other plugins).
	tier ledger.Fit
	// capped is true when PreFilter left nodes of its tiers out (maxCandidateNodes): PostFilter
	// offers them all next time before it lowers the tier.
	capped bool
	// gang is "namespace/gangRef" of the claim; empty outside a gang.
	gang string
	// domain is the topology domain the gang's nodes must be in (gangtopology.go); the zero
	// domain outside a gang with spec.gangTopology.
	domain domain
	// offered is false when PreFilter found no node with room: the state is kept only so that
	// preemption can ask Filter whether evicting pods would make room.
	offered bool
	// gangHeld is why PreFilter held a gang member back; Filter refuses every node then.
	gangHeld string
	// makeClaim: the pod names a GpuClaimTemplate and its claim does not exist yet; claim is
	// the one the template describes, and PreBind creates it (template.go).
	makeClaim bool
	// pinNode is the node of the pod's scheduling map entry; Filter refuses every other node
	// (preemption's dry runs call Filter on nodes PreFilter did not offer).
	pinNode string

	// strategy is the node strategy of this pod (its annotation, else the plugin's); ranks
	// are a ranked strategy's scores of the candidate nodes, written by PreScore.
	strategy allocator.Strategy
	ranks    map[string]int
	// fragPicks are the GPUs the fragmentation strategy chose per node for a one-GPU Shared
	// claim (fragmentation.go); Reserve takes them when it can. Nil otherwise.
	fragPicks map[string][]int
	// fill is the domain fill of each candidate node for a pod packed around domains
	// (domainpack.go); nil otherwise.
	fill map[string]int

	// results are Filter's placements per node, reused by Score; shared by clones.
	results *nodeResults
	// removed lists, per node, the pods a preemption dry run took off it: Filter judges the
	// node as if they held no GPUs. Nil outside preemption.
	removed map[string][]types.UID

	// Written by Reserve, Permit and PreBind (one pod, one goroutine at a time). waitStart is
	// when a gang member began to wait in Permit; zero when it did not wait.
	waitStart time.Time
	node      string
	ids       []int
	// shares are a Shared pod's share resolved against each GPU of ids (Reserve).
	shares []allocator.Resolved
	// mig are a MIG pod's devices (Reserve); ids are then the GPUs they are on.
	mig     []allocator.MIGSlot
	leases  []string
	islands int
	// claimTaken: PreBind wrote the claim's status for this pod (claimlock.go); Unreserve
	// gives it back.
	claimTaken bool
}

// nodeResults are Filter's placements by node, behind a lock (Filter runs in parallel).
type nodeResults struct {
	mu sync.Mutex
	m  map[string]allocator.Result
}

func newNodeResults() *nodeResults { return &nodeResults{m: make(map[string]allocator.Result, 64)} }

// Clone copies the removed pods, which preemption changes per clone, and shares the rest:
// nothing else is changed after PreFilter but by Reserve and PreBind on the cycle's own state.
func (s *stateData) Clone() fwk.StateData {
	if len(s.removed) == 0 {
		c := *s
		return &c
	}
	c := *s
	c.removed = make(map[string][]types.UID, len(s.removed))
	for node, uids := range s.removed {
		c.removed[node] = slices.Clone(uids)
	}
	return &c
}

func (s *stateData) setResult(node string, r allocator.Result) {
	s.results.mu.Lock()
	s.results.m[node] = r
	s.results.mu.Unlock()
}

func (s *stateData) result(node string) (allocator.Result, bool) {
	s.results.mu.Lock()
	defer s.results.mu.Unlock()
	r, ok := s.results.m[node]
	return r, ok
}

func getState(cs fwk.CycleState) (*stateData, error) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", stateKey, err)
	}
	s, ok := d.(*stateData)
	if !ok {
		return nil, fmt.Errorf("%+v cannot be converted to *gpuclaim.stateData", d)
	}
	return s, nil
}
