package gpuclaim

import (
	"fmt"
	"sync"

	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// stateData is what PreFilter learns about a pod, shared by the later extension points of the
// same cycle. Filter runs in parallel over nodes, so the per-node results have their own lock.
type stateData struct {
	claim *apiv1.GpuClaim
	key   string
	req   allocator.Request
	// reqKey is req's shape for the ledger's placement cache.
	reqKey string
	// tier is the fit tier PreFilter offered nodes from; PostFilter relaxes it when every
	// node of that tier failed for other reasons (taints, selectors of other plugins).
	tier fit
	// gang is "namespace/gangRef" of the claim; empty outside a gang.
	gang string

	mu sync.Mutex
	// results are Filter's placements per node, reused by Score.
	results map[string]allocator.Result

	// Written by Reserve and PreBind (one pod, one goroutine at a time).
	node    string
	ids     []int
	leases  []string
	islands int
}

// Clone shares the state: nothing here is changed by AddPod/RemovePod (this plugin has no
// PreFilterExtensions), and the per-node results are guarded by their lock.
func (s *stateData) Clone() fwk.StateData { return s }

func (s *stateData) setResult(node string, r allocator.Result) {
	s.mu.Lock()
	s.results[node] = r
	s.mu.Unlock()
}

func (s *stateData) result(node string) (allocator.Result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[node]
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
