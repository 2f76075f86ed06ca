package mock

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
)

// GetGpuFabricInfo reports the multi-node NVLink domain, as NVML does on GB200 NVL72: every
// GPU of the nodes that share a domain has the same cluster UUID and clique ID. A node outside
// such a domain answers NOT_SUPPORTED, as GPUs without a fabric manager do.
//
// The domain is the node's place in its pool: the fleet seeds each server with the node name
// (<pool>-<index>), and nodes index/NodesPerDomain share one domain.
func (d *Device) GetGpuFabricInfo() (nvml.GpuFabricInfo, nvml.Return) {
	if ret := d.answer(); ret != nvml.SUCCESS {
		return nvml.GpuFabricInfo{}, ret
	}
	d.server.mu.Lock()
	override := d.fabric
	d.server.mu.Unlock()
	if override != nil {
		return override.Info, override.Return
	}
	m := d.server.multiNode
	if m == nil {
		return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	clique := m.CliqueID
	if clique == 0 {
		clique = 1
	}
	return nvml.GpuFabricInfo{
		ClusterUuid: FabricDomain(d.server.topology, d.server.seed, m.NodesPerDomain),
		Status:      uint32(nvml.SUCCESS),
		CliqueId:    uint32(clique),
		State:       nvml.GPU_FABRIC_STATE_COMPLETED,
	}, nvml.SUCCESS
}

// FabricDomain is the cluster UUID of the multi-node NVLink domain of the node named seed:
// its pool (the name without the trailing index) and index/perDomain.
func FabricDomain(topology, seed string, perDomain int) uuid.UUID {
	pool, domain := seed, 0
	if i := strings.LastIndexByte(seed, '-'); i >= 0 {
		if idx, err := strconv.Atoi(seed[i+1:]); err == nil && perDomain > 0 {
			pool, domain = seed[:i], idx/perDomain
		}
	}
	return uuid.NewSHA1(uuidSpace, fmt.Appendf(nil, "fabric/%s/%s/%d", topology, pool, domain))
}

// FabricAnswer is what GetGpuFabricInfo answers for one GPU when SetFabric overrides the
// hardware description: a fabric that registers late, fails, moves or disappears.
type FabricAnswer struct {
	Info   nvml.GpuFabricInfo
	Return nvml.Return
}

// SetFabric makes GPU index answer a instead of what its hardware describes; nil restores the
// description. It reports whether the GPU exists.
func (s *Server) SetFabric(index int, a *FabricAnswer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < 0 || index >= len(s.devices) {
		return false
	}
	s.devices[index].fabric = a
	return true
}

// Extensions gives LookupSymbol, which the adapter asks before a query older drivers lack.
func (s *Server) Extensions() nvml.ExtendedInterface { return s }

// LookupSymbol says the symbol exists, unless SetMissingSymbol removed it: a simulated driver
// has every query the agent makes.
func (s *Server) LookupSymbol(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.missing[name] {
		return fmt.Errorf("symbol %s not found in the simulated libnvml", name)
	}
	return nil
}

// SetMissingSymbol makes LookupSymbol say name is not in the library, as a driver older than
// the query; it takes effect at the next Init of the adapter.
func (s *Server) SetMissingSymbol(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.missing == nil {
		s.missing = map[string]bool{}
	}
	s.missing[name] = true
}
