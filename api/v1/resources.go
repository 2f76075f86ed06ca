package v1

import "strings"

// SharedResourceName is the extended resource of Shared claims in device-plugin mode: one per
// GPU the pod shares. The agent advertises each GPU not in MIG mode as several of them.
const SharedResourceName = GroupName + "/gpu-shared"

// MIGResourceName is the extended resource of the MIG devices of profile in device-plugin mode
// (gpu.scheduling/mig-1g.10gb, as NVIDIA's mixed strategy names nvidia.com/mig-1g.10gb). A
// resource name has no "+": a media-extension profile 1g.10gb+me is mig-1g.10gb.me.
func MIGResourceName(profile string) string {
	return GroupName + "/mig-" + strings.ReplaceAll(profile, "+", ".")
}
