package fleet

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// FailDriver makes NVML fail on node the way a crashed driver does (mock.Server.FailDriver):
// the node's agent loses its session, reports every GPU Unknown and keeps retrying NVML
// initialisation, which fails with ret.
func (f *Fleet) FailDriver(node string, ret nvml.Return) error {
	f.mu.Lock()
	m := f.members[node]
	f.mu.Unlock()
	if m == nil {
		return fmt.Errorf("fail the NVML driver of node %s: %w", node, ErrUnknownNode)
	}
	m.server.FailDriver(ret)
	m.agent.Poke()
	return nil
}
