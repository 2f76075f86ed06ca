// Package leases reads which pods hold which GPUs from the scheduler's GPU leases. The lease
// is the lock, so it is the truth for a GPU's inUseBy.
package leases

import (
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// ByNode is the name of the index from node name to its GPU leases.
const ByNode = "byNode"

// NewInformerFactory watches the GPU leases in namespace: those of node, or of every node
// when node is empty (fleet mode shares one informer among all simulated nodes).
func NewInformerFactory(client kubernetes.Interface, namespace, node string, resync time.Duration) informers.SharedInformerFactory {
	selector := apiv1.LabelLeaseNode // the label exists: every GPU lease
	if node != "" {
		selector = labels.Set{apiv1.LabelLeaseNode: node}.AsSelector().String()
	}
	return informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithNamespace(namespace),
		// Nothing reads the leases' managedFields; a fleet caches every GPU lease.
		informers.WithTransform(crcache.TransformStripManagedFields()),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
}

// Informer is the factory's lease informer with the ByNode index.
func Informer(f informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	inf := f.Coordination().V1().Leases().Informer()
	err := inf.AddIndexers(cache.Indexers{ByNode: func(obj any) ([]string, error) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return nil, nil
		}
		if n := l.Labels[apiv1.LabelLeaseNode]; n != "" {
			return []string{n}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("add lease index %s: %w", ByNode, err)
	}
	return inf, nil
}

// NodeOf names the node a lease event concerns ("" when none); it unwraps tombstones.
func NodeOf(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		return l.Labels[apiv1.LabelLeaseNode]
	}
	return ""
}

// Usage is what a node's GPU leases say of its GPUs.
type Usage struct {
	// GPUs maps each GPU ID to the sorted UIDs of the pods holding it whole or shared.
	GPUs map[int][]string
	// MIG maps each MIG device to the sorted UIDs of the pods holding it (its lease,
	// apiv1.MIGLeaseName).
	MIG map[apiv1.MIGDeviceRef][]string
	// Shares sums the shares of each Shared GPU's holders (apiv1.AnnotationLeaseShares); a
	// holder the annotation does not list counts as a sharer with no share.
	Shares map[int]apiv1.DeviceShares
}

// Holders maps each GPU ID of node to the sorted pod UIDs holding it. Malformed leases are
// skipped (claims.ParseGPULease): a malformed lease must not make the agent fail.
func Holders(indexer cache.Indexer, node string) map[int][]string {
	return Read(indexer, node).GPUs
}

// Read reads node's GPU and MIG device leases. Malformed leases are skipped, and a Shared
// lease's unreadable share entries count as no share: nothing a lease says may make the
// agent fail.
func Read(indexer cache.Indexer, node string) Usage {
	var u Usage
	objs, err := indexer.ByIndex(ByNode, node)
	if err != nil || len(objs) == 0 {
		return u
	}
	for _, obj := range objs {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		ref, ok := claims.ParseGPULease(l)
		if !ok {
			continue
		}
		if ref.MIG {
			// A MIG device's lease also names its GPU; it holds the device, not the GPU whole.
			if u.MIG == nil {
				u.MIG = map[apiv1.MIGDeviceRef][]string{}
			}
			r := apiv1.MIGDeviceRef{GPU: ref.GPU, Slot: ref.Slot}
			for _, uid := range ref.Holders {
				u.MIG[r] = append(u.MIG[r], string(uid))
			}
			continue
		}
		if u.GPUs == nil {
			u.GPUs = map[int][]string{}
		}
		for _, uid := range ref.Holders {
			u.GPUs[ref.GPU] = append(u.GPUs[ref.GPU], string(uid))
		}
		if ref.Shared && len(ref.Holders) > 0 {
			shares, _ := apiv1.ParseLeaseShares(l.Annotations[apiv1.AnnotationLeaseShares])
			if u.Shares == nil {
				u.Shares = map[int]apiv1.DeviceShares{}
			}
			sum := u.Shares[ref.GPU]
			seen := map[types.UID]bool{}
			for _, uid := range ref.Holders {
				if seen[uid] {
					continue
				}
				seen[uid] = true
				s := shares[string(uid)]
				sum.Sharers++
				sum.MemoryMiB += s.MemoryMiB
				sum.ComputePercent += s.ComputePercent
			}
			u.Shares[ref.GPU] = sum
		}
	}
	u.GPUs = sortedUnique(u.GPUs)
	u.MIG = sortedUnique(u.MIG)
	return u
}

func sortedUnique[K comparable](m map[K][]string) map[K][]string {
	for k, uids := range m {
		slices.Sort(uids)
		m[k] = slices.Compact(uids)
		if len(m[k]) == 0 {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
