package v1

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// AnnotationClaim is set by the user on a pod: the name of the GpuClaim (same namespace).
	AnnotationClaim = GroupName + "/claim"
	// AnnotationAllocated is set by the scheduler only: "node:id,id,...".
	AnnotationAllocated = GroupName + "/allocated"
	// AnnotationGPUIDs is set by the scheduler only: just the IDs, "0,1". The webhook points
	// CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES at it through the Downward API, so the
	// kubelet resolves it when the container starts, after binding.
	AnnotationGPUIDs = GroupName + "/gpu-ids"

	// AnnotationMIGDevices is set by the scheduler only, on a pod of a MIG claim: its MIG
	// devices, "<gpu id>:<slot>" each, comma-separated ("3:0,3:4"; FormatMIGDevices). The
	// pod's AnnotationAllocated and AnnotationGPUIDs then name the GPUs those devices are on.
	AnnotationMIGDevices = GroupName + "/mig-devices"
	// AnnotationShare is set by the scheduler only, on a pod of a Shared claim that states a
	// share: the share resolved against the chosen GPUs, "memoryMiB=<n>,computePercent=<n>"
	// (either part absent when not stated; FormatShare). The node side tells the container
	// its limits from it.
	AnnotationShare = GroupName + "/share"

	// AnnotationClaimTemplate is set by the user on a pod or a controller's pod template: the name
	// of a GpuClaimTemplate (same namespace). A GpuClaim is made from it for every such pod, named
	// by ClaimNameForPod and owned by the pod.
	AnnotationClaimTemplate = GroupName + "/claim-template"
	// AnnotationSchedulingMap is set by the user on a pod template: an explicit placement map,
	// one "<pod-index>=<node>:<gpu-ids>" entry per line (seed 002's gpu-scheduling-map).
	AnnotationSchedulingMap = GroupName + "/gpu-scheduling-map"

	// SchedulerName is the default name of the profile our kube-scheduler serves. Every binary
	// takes --scheduler-name / SCHEDULER_NAME to serve another (two releases side by side).
	SchedulerName = "gpu-scheduler"
	// SchedulerNameEnv is the environment variable that overrides SchedulerName in every binary.
	SchedulerNameEnv = "SCHEDULER_NAME"

	// LabelPrefix prefixes every label this project puts on nodes and leases.
	LabelPrefix = GroupName + "/"
	// LabelLeaseNode, LabelLeaseGPU, LabelPodNamespace, LabelPodName and LabelPodUID are set
	// on every GPU Lease so that leases can be listed by node or by pod and cleaned up.
	LabelLeaseNode    = LabelPrefix + "node"
	LabelLeaseGPU     = LabelPrefix + "gpu"
	LabelPodNamespace = LabelPrefix + "pod-namespace"
	LabelPodName      = LabelPrefix + "pod-name"
	LabelPodUID       = LabelPrefix + "pod-uid"
	// LabelLeaseShared marks a lease held by Shared pods (holderIdentity lists no single owner).
	LabelLeaseShared = LabelPrefix + "shared"
	// LabelLeaseMIGSlot is set on the lease of a MIG device (MIGLeaseName), beside
	// LabelLeaseGPU naming its GPU: the device's slot. A reader that knows nothing of MIG sees
	// the GPU held, which it is: a GPU in MIG mode is never allocated whole.
	LabelLeaseMIGSlot = LabelPrefix + "mig-slot"
	// AnnotationLeaseShares is set on a Shared GPU's lease: each holder's share,
	// "<pod uid>=<memory MiB>/<compute percent>" comma-separated (FormatLeaseShares), so that
	// every scheduler joining the GPU sums the same shares before it adds its own; a holder
	// that stated no share is listed with 0/0.
	AnnotationLeaseShares = GroupName + "/shares"
	// LabelSchedulerName is set by the agent on the GpuNodeStatus it publishes: the scheduler
	// name (--scheduler-name) of the release whose agent runs on the node. A scheduler places
	// pods only on nodes whose status names it (or names none: an agent older than the label),
	// so two releases with disjoint agent node selectors each keep to their own pool.
	LabelSchedulerName = LabelPrefix + "scheduler-name"
	// LabelAgentLiveness marks a node agent's liveness Lease (AgentLeaseName), valued with the
	// agent's scheduler name. It is deliberately not LabelLeaseNode: the informers of GPU
	// leases (the scheduler's and the agent's) select on that label and must never see a
	// liveness lease as a lock.
	LabelAgentLiveness = LabelPrefix + "agent-liveness"
	// LabelSchedulerPeer marks a gpu-scheduler process's peer Lease (SchedulerPeerLeaseName),
	// valued with the profile (scheduler name) it serves. The processes serving one profile
	// divide its pods among themselves by these leases (scheduler/peers); like the liveness
	// label it is not LabelLeaseNode, so no GPU lease informer ever sees a peer lease.
	LabelSchedulerPeer = LabelPrefix + "scheduler-peer"
	// LabelTopology names the mock topology a simulated node carries.
	LabelTopology = LabelPrefix + "topology"
	// LabelGPUClique is the node label NVIDIA's GPU Feature Discovery sets to a node's NVLink
	// domain, "<clusterUUID>.<cliqueID>" (Fabric.Clique). The agent sets it too where nothing
	// else has, so that the scheduler's topology levels and pod affinities can name it.
	LabelGPUClique = "nvidia.com/gpu.clique"
	// LabelGPUProduct, LabelGPUCount and LabelNVLink are set on nodes by the agent for users
	// to select on.
	LabelGPUProduct = LabelPrefix + "product"
	LabelGPUCount   = LabelPrefix + "count"
	LabelNVLink     = LabelPrefix + "nvlink"
)

// LeaseName is the name of the Lease that locks GPU id on node: gpu-{node}-{id}.
// It fails when the result is not a valid object name (node names can be 253 characters long).
func LeaseName(node string, id int) (string, error) {
	if node == "" {
		return "", fmt.Errorf("lease name for GPU %d: node name is empty", id)
	}
	if id < 0 || id > MaxGPUID {
		return "", fmt.Errorf("lease name for node %q: GPU id %d is out of range 0-%d", node, id, MaxGPUID)
	}
	name := "gpu-" + node + "-" + strconv.Itoa(id)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("lease name %q for node %q GPU %d is not a valid object name: %s", name, node, id, strings.Join(errs, "; "))
	}
	return name, nil
}

// CheckNodeName reports why GPUs of a node cannot be locked, nil when they can: every GPU lease
// carries its node's name in the LabelLeaseNode label, which the scheduler, the agent and
// kubectl gpu select and read, and a label value holds at most 63 characters (a node name up
// to 253). Such a node is refused rather than tried and failed at every lock.
func CheckNodeName(node string) error {
	if errs := validation.IsValidLabelValue(node); len(errs) > 0 {
		return fmt.Errorf("node name %q (%d characters) cannot label its GPU leases: %s; gpu-scheduler serves only nodes whose names are at most %d characters", truncate(node), len(node), strings.Join(errs, "; "), validation.LabelValueMaxLength)
	}
	if _, err := LeaseName(node, MaxGPUID); err != nil {
		return err
	}
	return nil
}

// ParseLeaseName reads a name of the form LeaseName makes: the node and the GPU ID whose lock it
// would be. ok is false for every other name (liveness, peer and leader-election leases among
// them: none ends in "-{digits}" with a GPU ID in range).
func ParseLeaseName(name string) (node string, id int, ok bool) {
	rest, found := strings.CutPrefix(name, "gpu-")
	i := strings.LastIndexByte(rest, '-')
	if !found || i <= 0 {
		return "", 0, false
	}
	node, digits := rest[:i], rest[i+1:]
	id, err := strconv.Atoi(digits)
	if err != nil || digits != strconv.Itoa(id) {
		return "", 0, false
	}
	if want, err := LeaseName(node, id); err != nil || want != name {
		return "", 0, false
	}
	return node, id, true
}

// AgentLeaseName is the name of the node agent's liveness Lease: gpu-{node}-agent, in the GPU
// lease namespace. A suffix, not a prefix: every GPU lease name gpu-{node}-{id} ends in
// "-{digits}" and this one never does, so the two can never collide, whatever the node names
// (a prefix "gpu-agent-{node}" would: node "foo-3"'s liveness lease and GPU 3 of node
// "agent-foo" are both gpu-agent-foo-3). It fails when the result is not a valid object name.
func AgentLeaseName(node string) (string, error) {
	if node == "" {
		return "", fmt.Errorf("liveness lease name: node name is empty")
	}
	name := "gpu-" + node + "-agent"
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("liveness lease name %q for node %q is not a valid object name: %s", name, node, strings.Join(errs, "; "))
	}
	return name, nil
}

// SchedulerPeerLeaseName is the name of a gpu-scheduler process's peer Lease:
// gpu-{identity}-scheduler, in the GPU lease namespace. Like AgentLeaseName it ends in a word
// no GPU lease (digits) and no liveness lease ("-agent") ends in, so the three kinds never
// collide. An identity that would not make a valid name (upper case, characters a name cannot
// hold, too long: it comes from a host name or a flag) is reduced to one that does, so every
// process gets a name; two identities that reduce alike share a lease and count as one peer,
// which costs races, never safety.
func SchedulerPeerLeaseName(identity string) string {
	id := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, identity)
	id = strings.Trim(id, "-")
	if id == "" || len(id) > 200 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(identity))
		id = strings.Trim(fmt.Sprintf("%.40s-%016x", id, h.Sum64()), "-")
	}
	return "gpu-" + id + "-scheduler"
}

// Allocation is a node and the GPU IDs allocated on it.
type Allocation struct {
	Node string
	IDs  []int
}

// String formats the allocation as "node:0,1,2", the value of AnnotationAllocated.
func (a Allocation) String() string {
	return a.Node + ":" + FormatIDs(a.IDs)
}

// FormatIDs formats GPU IDs as "0,1,2", the value of AnnotationGPUIDs.
func FormatIDs(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(id))
	}
	return b.String()
}

// maxIDs bounds how many IDs a value may carry; no node has more GPUs than a claim may ask for.
const maxIDs = MaxGPUsPerClaim

// ParseIDs parses "0,1,2". IDs must be non-negative decimal integers without signs or spaces,
// and must not repeat; at least one is required. The result is sorted.
func ParseIDs(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("GPU ID list is empty; want comma-separated IDs like 0,1")
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxIDs {
		return nil, fmt.Errorf("GPU ID list %q has %d IDs; at most %d are allowed", truncate(s), len(parts), maxIDs)
	}
	ids := make([]int, 0, len(parts))
	seen := make(map[int]bool, len(parts))
	for _, p := range parts {
		if p == "" || len(p) > 9 { // more digits could overflow; none is a GPU ID

			return nil, fmt.Errorf("GPU ID list %q: %q is not a GPU ID; want comma-separated IDs like 0,1", truncate(s), truncate(p))
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return nil, fmt.Errorf("GPU ID list %q: %q is not a non-negative integer", truncate(s), p)
			}
		}
		if len(p) > 1 && p[0] == '0' {
			return nil, fmt.Errorf("GPU ID list %q: %q has a leading zero", truncate(s), p)
		}
		id, _ := strconv.Atoi(p) // at most 9 digits: cannot fail
		if id > MaxGPUID {
			return nil, fmt.Errorf("GPU ID list %q: GPU ID %d is out of range 0-%d", truncate(s), id, MaxGPUID)
		}
		if seen[id] {
			return nil, fmt.Errorf("GPU ID list %q: ID %d appears twice", truncate(s), id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids, nil
}

// ParseAllocation parses "node:0,1,2", the value of AnnotationAllocated.
func ParseAllocation(s string) (Allocation, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Allocation{}, fmt.Errorf("allocation %q has no ':'; want node:ids like node-a:0,1", truncate(s))
	}
	node := s[:i]
	if node == "" {
		return Allocation{}, fmt.Errorf("allocation %q has an empty node name; want node:ids like node-a:0,1", truncate(s))
	}
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return Allocation{}, fmt.Errorf("allocation %q: node name %q is invalid: %s", truncate(s), truncate(node), strings.Join(errs, "; "))
	}
	ids, err := ParseIDs(s[i+1:])
	if err != nil {
		return Allocation{}, fmt.Errorf("allocation %q: %w", truncate(s), err)
	}
	return Allocation{Node: node, IDs: ids}, nil
}

// truncate keeps error messages readable when the input is huge.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// PodAnnotations are the keys under LabelPrefix that a pod may carry: what users write
// (AnnotationClaim, AnnotationClaimTemplate, AnnotationSchedulingMap), what the GpuWorkload
// controller writes (AnnotationNodeStrategy) and what the scheduler writes (AnnotationAllocated,
// AnnotationGPUIDs). The webhook refuses a pod with any other key under the prefix: a misspelt
// key would otherwise be ignored and the pod placed without what it asked for. A new pod
// annotation belongs in this list.
var PodAnnotations = []string{
	AnnotationClaim,
	AnnotationClaimTemplate,
	AnnotationSchedulingMap,
	AnnotationNodeStrategy,
	AnnotationAllocated,
	AnnotationGPUIDs,
	AnnotationMIGDevices,
	AnnotationShare,
}
