package mock

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// FailDriver makes NVML stop working on the server, as when the driver crashes or is unloaded
// under a running agent: every session ends, every event set is freed (a Wait in progress
// returns ERROR_UNINITIALIZED), every device query answers ERROR_UNINITIALIZED, and Init fails
// with ret until SetInitError(nvml.SUCCESS).
func (s *Server) FailDriver(ret nvml.Return) {
	s.mu.Lock()
	s.initErr = ret
	s.inits = 0
	sets := slices.Clone(s.sets)
	s.mu.Unlock()
	for _, e := range sets {
		_ = e.Free() // the mock's Free always succeeds
	}
}
