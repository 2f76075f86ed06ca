package gpuclaim

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// The node agents' liveness Leases (apiv1.AgentLeaseName) say which agents live: an agent
// renews its lease every few minutes and rewrites an unchanged GpuNodeStatus only every 30
// (agent/liveness). A node is fresh while the newer of its status's LastHeartbeatTime and its
// lease's renewTime is younger than statusFreshnessSeconds (the ledger's heartbeat of the node).

// newLivenessInformerFactory watches the liveness leases in namespace, and only them: they
// carry apiv1.LabelAgentLiveness, never apiv1.LabelLeaseNode, so the GPU lease informer never
// sees them and this one never sees a GPU lease.
func newLivenessInformerFactory(client kubernetes.Interface, namespace string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTransform(slimLiveness),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = apiv1.LabelAgentLiveness
		}))
}

// slimLiveness keeps of a liveness lease what the plugin reads (its node, its renewal) and what
// the cache needs (its key and version): at 5,000 nodes the scheduler holds node -> renewTime,
// not 5,000 leases with their labels, owner references and managedFields.
func slimLiveness(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: l.Spec.HolderIdentity, RenewTime: l.Spec.RenewTime},
	}, nil
}

// livenessOf reads a liveness lease: the node whose agent holds it, and when it renewed it. A
// lease whose holder is not the node its name says (apiv1.AgentLeaseName) is no sign of life
// of any node: ok is false and err says why. The agents' admission policy binds each agent to
// the lease named after its own node; the holder is checked here so that one node's agent
// cannot keep another node alive through it.
func livenessOf(obj any) (node string, renewed time.Time, ok bool) {
	node, renewed, err := livenessOfErr(obj)
	return node, renewed, err == nil && node != ""
}

// livenessOfErr is livenessOf with the reason a lease is refused; node is empty and err nil for
// what is no liveness lease at all (claims.ParseLiveness).
func livenessOfErr(obj any) (node string, renewed time.Time, err error) {
	return claims.ParseLiveness(obj)
}

// livenessHandler keeps the ledger's renewals, and sends the waiting pods back to the queue
// when a renewal makes a stale node fresh again, as a fresh GpuNodeStatus does.
func (p *Plugin) livenessHandler(ctx context.Context) cache.ResourceEventHandler {
	logger := klog.FromContext(ctx)
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observeLiveness(logger, nil, obj) },
		UpdateFunc: func(old, obj any) { p.observeLiveness(logger, old, obj) },
		DeleteFunc: func(obj any) {
			if node, _, ok := livenessOf(obj); ok {
				p.ledger.SetRenewed(node, time.Time{})
			}
		},
	}
}

func (p *Plugin) observeLiveness(logger klog.Logger, old, obj any) {
	node, renewed, err := livenessOfErr(obj)
	if prev, _, ok := livenessOf(old); ok && prev != node {
		p.ledger.SetRenewed(prev, time.Time{}) // the lease names another node now, or none
	}
	if err != nil {
		if _, _, oldErr := livenessOfErr(old); old == nil || oldErr == nil {
			logger.Error(err, "Ignoring an agent liveness lease")
		}
		return
	}
	if node == "" {
		return
	}
	if before, after := p.ledger.SetRenewed(node, renewed); p.becameFresh(before, after) {
		p.gpusChanged(node)
	}
}

// becameFresh tells whether a node whose heartbeat (the ledger's heartbeat of the node) moved from before to
// after went from stale to fresh: the only heartbeat change that can help a waiting pod.
func (p *Plugin) becameFresh(before, after time.Time) bool {
	oldest := p.clock.Now().Add(-p.freshness)
	return after.After(before) && before.Before(oldest) && !after.Before(oldest)
}
