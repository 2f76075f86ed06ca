package status

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// GPUFabric is one GPU's fabric reading.
type GPUFabric struct {
	Index  int
	Fabric gpu.Fabric
}

// Fabric states as status.fabric.state spells them.
const (
	FabricNotSupported = "NotSupported"
	FabricNotStarted   = "NotStarted"
	FabricInProgress   = "InProgress"
	FabricCompleted    = "Completed"
)

// Clique is the value of the node label nvidia.com/gpu.clique for a fabric, as NVIDIA's GPU
// Feature Discovery writes it: "<clusterUUID>.<cliqueID>".
func Clique(clusterUUID string, cliqueID uint32) string {
	return clusterUUID + "." + strconv.FormatUint(uint64(cliqueID), 10)
}

// NodeFabric is the node's multi-node NVLink domain from its GPUs' readings, and a message
// when they do not add up to one. All of a node's GPUs sit in one domain, so:
//   - no GPU in a domain (all NotSupported, or no readings): nil;
//   - every GPU registered in the same clique: that clique, Completed;
//   - none failed or disagrees, but some are still registering: the least advanced state,
//     without a clique (NVML reports none until registration completes);
//   - GPUs in different cliques, some GPUs in a domain and others in none, or a failed
//     registration: nil, and the message says which GPUs said what. Publishing either clique
//     would put the node in a domain half its GPUs cannot reach over NVLink.
func NodeFabric(gpus []GPUFabric) (*apiv1.Fabric, string) {
	byKey := map[string][]int{} // what each GPU said -> the GPUs that said it
	var failed []string
	pending := gpu.FabricCompleted
	var cluster string
	var clique uint32
	for _, g := range gpus {
		f := g.Fabric
		var key string
		switch {
		case f.State == gpu.FabricNotSupported:
			key = "no NVLink domain"
		case f.State == gpu.FabricCompleted && f.Err != nil:
			failed = append(failed, fmt.Sprintf("GPU %d: %v", g.Index, f.Err))
			continue
		case f.State == gpu.FabricCompleted:
			key = "clique " + Clique(f.ClusterUUID, f.CliqueID)
			cluster, clique = f.ClusterUUID, f.CliqueID
		default:
			key = "a domain"
			pending = min(pending, f.State)
		}
		byKey[key] = append(byKey[key], g.Index)
	}
	if len(failed) > 0 {
		return nil, "NVLink fabric registration failed (" + strings.Join(failed, "; ") + "); publishing no fabric"
	}
	_, none := byKey["no NVLink domain"]
	_, registering := byKey["a domain"]
	if len(byKey) > 1 && (none || len(byKey) > 2 || !registering) {
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		// In GPU order, so that the message, and with it the status, does not change between
		// two loops that read the same.
		slices.SortFunc(keys, func(a, b string) int { return byKey[a][0] - byKey[b][0] })
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s in %s", gpuList(byKey[k]), k)
		}
		return nil, "the GPUs disagree on their NVLink domain (" + strings.Join(parts, ", ") + "); publishing no fabric"
	}
	switch {
	case len(byKey) == 0 || none:
		return nil, ""
	case registering:
		return &apiv1.Fabric{State: stateName(pending)}, ""
	}
	return &apiv1.Fabric{ClusterUUID: cluster, CliqueID: int64(clique), Clique: Clique(cluster, clique), State: FabricCompleted}, ""
}

func gpuList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	if len(ids) == 1 {
		return "GPU " + s[0]
	}
	return "GPUs " + strings.Join(s, ",")
}

func stateName(s gpu.FabricState) string {
	switch s {
	case gpu.FabricNotStarted:
		return FabricNotStarted
	case gpu.FabricInProgress:
		return FabricInProgress
	case gpu.FabricCompleted:
		return FabricCompleted
	default:
		return FabricNotSupported
	}
}

// fabricEqual tells whether two statuses' fabrics say the same.
func fabricEqual(a, b *apiv1.Fabric) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
