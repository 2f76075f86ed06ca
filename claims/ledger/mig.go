package ledger

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// AddLeaseHold records that holder uid of lease ref (claims.ParseGPULease) holds what the
// lease locks: its MIG device, or its GPU whole (with the holder's share when Shared).
func (c *Ledger) AddLeaseHold(uid types.UID, ref claims.GPULease) {
	if ref.MIG {
		c.AddMIG(uid, ref.Node, []allocator.MIGSlot{{GPU: ref.GPU, Slot: ref.Slot}}, FromLease)
		return
	}
	c.AddHold(uid, ref.Node, []int{ref.GPU}, ref.Shared, ref.Shares[uid], FromLease)
}

// RemoveLeaseHold drops what lease ref said holder uid holds (AddLeaseHold).
func (c *Ledger) RemoveLeaseHold(uid types.UID, ref claims.GPULease) {
	if ref.MIG {
		c.RemoveMIG(uid, ref.Node, []allocator.MIGSlot{{GPU: ref.GPU, Slot: ref.Slot}}, FromLease)
		return
	}
	c.Remove(uid, ref.Node, []int{ref.GPU}, FromLease)
}

// BoundMIG is the MIG devices a bound pod carries (apiv1.AnnotationMIGDevices) beside its
// allocation (BoundAllocation); ok is false for a pod without a readable one.
func BoundMIG(pod *v1.Pod) ([]allocator.MIGSlot, bool) {
	v, has := pod.Annotations[apiv1.AnnotationMIGDevices]
	if !has {
		return nil, false
	}
	refs, err := apiv1.ParseMIGDevices(v)
	if err != nil {
		return nil, false
	}
	out := make([]allocator.MIGSlot, len(refs))
	for i, r := range refs {
		out[i] = allocator.MIGSlot{GPU: r.GPU, Slot: r.Slot}
	}
	return out, true
}

// AddPodHold records what a bound pod's annotations say it holds on alloc.Node: its MIG
// devices when it carries them, else its GPUs (shared: its claim is Shared, with the pod's
// share). A MIG pod's allocation names the GPUs its devices are on, which it does not hold
// whole.
func (c *Ledger) AddPodHold(pod *v1.Pod, alloc apiv1.Allocation, shared bool) {
	if refs, ok := BoundMIG(pod); ok {
		c.AddMIG(pod.UID, alloc.Node, refs, FromPod)
		return
	}
	c.AddHold(pod.UID, alloc.Node, alloc.IDs, shared, PodShare(pod), FromPod)
}

// MIGDeviceRefs converts allocator MIG devices to the API's references.
func MIGDeviceRefs(ms []allocator.MIGSlot) []apiv1.MIGDeviceRef {
	out := make([]apiv1.MIGDeviceRef, len(ms))
	for i, m := range ms {
		out[i] = apiv1.MIGDeviceRef{GPU: m.GPU, Slot: m.Slot}
	}
	return out
}
