package gpuclaim

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// A GPU is locked by the Lease named gpu-{node}-{id} (apiv1.LeaseName): the create is atomic on
// the name, whatever the lease says. A lease of that name that the scheduler did not make (no
// gpu.scheduling/node label, or labels that do not read as a GPU lock: made by hand, by an older
// version, or by anyone who may create leases in the namespace) holds the GPU all the same: no
// pod can lock it while the lease is there. Such a foreign lease is therefore counted as a hold
// by an unknown holder ("lease:<name>" in the ledger), so that pods are not placed on a GPU
// they cannot lock, and it is collected once it has expired: its renewTime plus
// leaseDurationSeconds is past (a renewTime in the future counts as the time it was seen), or it
// sets neither, as the scheduler's own locks do not. Each is logged when first seen and when
// collected, and its collection is an event on the lease.

// foreignSelector selects the leases that carry none of the project's lease labels: foreign GPU
// leases, and the few leader-election leases of the namespace. Half-labelled ones (a
// gpu.scheduling/node label but no valid GPU label or holder) reach the GPU lease informer.
const foreignSelector = "!" + apiv1.LabelLeaseNode + ",!" + apiv1.LabelAgentLiveness + ",!" + apiv1.LabelSchedulerPeer

// newForeignInformerFactory watches the unlabelled leases of namespace.
func newForeignInformerFactory(client kubernetes.Interface, namespace string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTransform(crcache.TransformStripManagedFields()),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = foreignSelector
		}))
}

// foreignLeases remembers when each foreign lease's current version was first seen, to clamp a
// renewTime in the future.
type foreignLeases struct {
	mu   sync.Mutex
	seen map[string]foreignSeen
}

type foreignSeen struct {
	resourceVersion string
	at              time.Time
}

func newForeignLeases() *foreignLeases { return &foreignLeases{seen: map[string]foreignSeen{}} }

// foreignHandler keeps the ledger's holds of foreign leases.
func (p *Plugin) foreignHandler(ctx context.Context) cache.ResourceEventHandler {
	logger := klog.FromContext(ctx)
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observeForeign(logger, obj) },
		UpdateFunc: func(_, obj any) { p.observeForeign(logger, obj) },
		DeleteFunc: func(obj any) { p.forgetForeign(obj) },
	}
}

// observeForeign records a foreign lease's hold; it reports whether obj is one.
func (p *Plugin) observeForeign(logger klog.Logger, obj any) bool {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return false
	}
	node, id, ok := ledger.ForeignRef(l)
	if !ok {
		return false
	}
	p.foreign.mu.Lock()
	prev, known := p.foreign.seen[l.Name]
	if !known || prev.resourceVersion != l.ResourceVersion {
		p.foreign.seen[l.Name] = foreignSeen{resourceVersion: l.ResourceVersion, at: p.clock.Now()}
	}
	p.foreign.mu.Unlock()
	if !known {
		logger.Info("A lease not made by gpu-scheduler holds a GPU: it is counted as held until the lease expires, then collected",
			"lease", klog.KObj(l), "node", node, "gpu", id, "holder", ptrValue(l.Spec.HolderIdentity))
	}
	p.ledger.Add(ledger.ForeignHolder(l.Name), node, []int{id}, false, ledger.FromLease)
	return true
}

// forgetForeign drops a foreign lease's hold; it reports whether obj was one.
func (p *Plugin) forgetForeign(obj any) bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return false
	}
	node, id, ok := ledger.ForeignRef(l)
	if !ok {
		return false
	}
	p.foreign.mu.Lock()
	delete(p.foreign.seen, l.Name)
	p.foreign.mu.Unlock()
	p.ledger.Remove(ledger.ForeignHolder(l.Name), node, []int{id}, ledger.FromLease)
	p.gpusChanged(node)
	return true
}

// foreignExpired tells whether a foreign lease has expired (see above).
func (p *Plugin) foreignExpired(l *coordinationv1.Lease) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	now := p.clock.Now()
	renewed := l.Spec.RenewTime.Time
	p.foreign.mu.Lock()
	seen, ok := p.foreign.seen[l.Name]
	p.foreign.mu.Unlock()
	switch {
	case ok && seen.resourceVersion == l.ResourceVersion && renewed.After(seen.at):
		renewed = seen.at
	case renewed.After(now):
		renewed = now
	}
	return now.After(renewed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// collectForeign deletes the expired foreign leases among leases, each on the condition that it
// is still the version read, and returns how many it deleted.
func (p *Plugin) collectForeign(ctx context.Context, leases []*coordinationv1.Lease) int {
	n := 0
	for _, l := range leases {
		node, id, ok := ledger.ForeignRef(l)
		if !ok || !p.foreignExpired(l) {
			continue
		}
		err := p.client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Collecting an expired lease not made by gpu-scheduler", "lease", klog.KObj(l))
			continue
		}
		n++
		metrics.LeasesReleased.Inc()
		klog.FromContext(ctx).Info("Collected an expired lease not made by gpu-scheduler that held a GPU", "lease", klog.KObj(l), "node", node, "gpu", id, "holder", ptrValue(l.Spec.HolderIdentity))
		if p.handle == nil {
			// Tests without a framework.
		} else if rec := p.handle.EventRecorder(); rec != nil {
			rec.Eventf(l, nil, v1.EventTypeWarning, "ForeignGpuLeaseCollected", "Collect",
				"lease %s named like the lock of GPU %d on node %s was not made by gpu-scheduler and has expired; deleted so that the GPU can be locked again", l.Name, id, node)
		}
		p.forgetForeign(l)
	}
	return n
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
