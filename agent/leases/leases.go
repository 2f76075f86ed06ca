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

// Holders maps each GPU ID of node to the sorted pod UIDs holding it. Malformed leases are
// skipped (claims.ParseGPULease): a malformed lease must not make the agent fail.
func Holders(indexer cache.Indexer, node string) map[int][]string {
	objs, err := indexer.ByIndex(ByNode, node)
	if err != nil || len(objs) == 0 {
		return nil
	}
	out := map[int][]string{}
	for _, obj := range objs {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		ref, ok := claims.ParseGPULease(l)
		if !ok {
			continue
		}
		for _, uid := range ref.Holders {
			out[ref.GPU] = append(out[ref.GPU], string(uid))
		}
	}
	for id, uids := range out {
		slices.Sort(uids)
		out[id] = slices.Compact(uids)
		if len(out[id]) == 0 {
			delete(out, id)
		}
	}
	return out
}
