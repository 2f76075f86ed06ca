package ledger

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Pin is a pod's entry in the explicit placement map of its gpu-scheduling-map annotation:
// the pod goes to exactly this node and these GPUs, or nowhere.
type Pin struct {
	Index int
	Alloc apiv1.Allocation
}

// String is the entry as the user wrote it ("1=node-b:2,3"), so messages name it.
func (p *Pin) String() string { return fmt.Sprintf("%d=%s", p.Index, p.Alloc) }

// PinOf returns the pod's entry in its scheduling map. It returns nil when the pod has no map,
// has no index (a Deployment's pod) or its index is not in the map: such a pod is placed as any
// other. A map that does not parse is an error naming its line; the webhook refuses such pods,
// but one created without the webhook must not crash nor be placed by guesswork.
func PinOf(pod *v1.Pod) (*Pin, error) {
	raw, ok := pod.Annotations[apiv1.AnnotationSchedulingMap]
	if !ok {
		return nil, nil
	}
	index, ok := apiv1.PodIndex(pod)
	if !ok {
		return nil, nil
	}
	m, err := apiv1.ParseSchedulingMap(raw)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, apiv1.AnnotationSchedulingMap, err)
	}
	a, ok := m[index]
	if !ok {
		return nil, nil
	}
	return &Pin{Index: index, Alloc: a}, nil
}

// Apply narrows a claim's request to the entry's GPUs. The entry must name as many GPUs as the
// claim asks for: the claim's count is what the webhook hands the container (and quota counts),
// so a mismatch is the user's to fix, not ours to guess. Topology and policy give way to the
// user's choice; exclusivity still holds (an Exclusive claim never takes a shared GPU).
func (p *Pin) Apply(req *allocator.Request, claimKey string) error {
	if req.Exclusivity == allocator.MIG {
		return fmt.Errorf("gpu-scheduling-map entry %s names whole GPUs, but GpuClaim %s asks for MIG devices (exclusivity MIG), which a map entry cannot name", p, claimKey)
	}
	if len(p.Alloc.IDs) != req.Count {
		return fmt.Errorf("gpu-scheduling-map entry %s names %d GPUs but GpuClaim %s asks for %d", p, len(p.Alloc.IDs), claimKey, req.Count)
	}
	req.Pinned = append([]int(nil), p.Alloc.IDs...)
	req.Policy, req.PreferIDs = allocator.Contiguous, nil
	req.Topology, req.MinBandwidthGBps = allocator.Ignore, 0
	return nil
}

// Message says why the pod waits on its entry, naming the entry and the pod.
func (p *Pin) Message(pod *v1.Pod, why string) string {
	return fmt.Sprintf("gpu-scheduling-map entry %s for pod %s/%s (index %d): %s", p, pod.Namespace, pod.Name, p.Index, why)
}
