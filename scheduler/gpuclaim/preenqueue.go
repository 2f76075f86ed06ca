package gpuclaim

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/peers"
)

var _ fwk.PreEnqueuePlugin = &Plugin{}

// peerTakeover is how long a pod may wait, left to the peer that owns it, before this process
// tries it too: a peer can renew its lease and still not schedule (wedged, or its client
// throttled), and a pod must not wait on it for ever. Past this every peer tries the pod,
// which costs races on long-waiting pods only; the GPU leases keep it safe.
const peerTakeover = 2 * time.Minute

// PreEnqueue keeps out of this process's queue the GPU pods another gpu-scheduler process of
// the same profile owns (scheduler/peers): with several processes scheduling at once, each
// schedules its share instead of all of them racing for every pod. A pod left to a peer is
// kept in deferred and sent back through PreEnqueue when the peers change (the owner went:
// the pod may now be this process's) or when it has waited peerTakeover. Gating writes
// nothing: no event and no pod condition.
func (p *Plugin) PreEnqueue(_ context.Context, pod *v1.Pod) *fwk.Status {
	if p.peers == nil || pod.Spec.NodeName != "" {
		return nil
	}
	if _, ok := claimName(pod); !ok {
		return nil
	}
	view := p.peers.Current()
	if view.Size() == 1 {
		p.deferred.remove(pod.UID)
		return nil
	}
	owner := view.Owner(p.shardKey(pod))
	if owner == p.peers.Identity() {
		p.deferred.remove(pod.UID)
		return nil
	}
	if p.deferred.due(pod, p.clock.Now()) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("left to gpu-scheduler %s, the peer that owns this pod (%d processes serve this profile)", owner, view.Size()))
}

// shardKey is what decides a pod's owner: its gang when it has one, so that one process
// places every member (a gang's Permit waits for members this process placed), else the pod.
func (p *Plugin) shardKey(pod *v1.Pod) string {
	if g := p.gangOfPod(pod); g != "" {
		return "gang:" + g
	}
	if t, ok := templateOf(pod); ok && p.templateLister != nil {
		// The gang its claim will have, before gpu-controller has made that claim.
		if group, ok, _ := claims.PodGroupOf(pod); ok {
			if ref, err := claims.GangRefForGroup(group); err == nil {
				return "gang:" + pod.Namespace + "/" + ref
			}
		}
		if tmpl, err := p.templateLister.GpuClaimTemplates(pod.Namespace).Get(t); err == nil && tmpl.Spec.Spec.GangRef != "" {
			return "gang:" + pod.Namespace + "/" + tmpl.Spec.Spec.GangRef
		}
	}
	return string(pod.UID)
}

// startPeers makes this process a peer of the others serving its profile, when it knows its
// profile: it watches their leases before New returns (so the first pods are divided by the
// peers already running) and joins, renewing its own lease, at once without leader election
// (Process.JoinPeersAtStart) and otherwise at its first scheduling cycle (joinPeers).
func (p *Plugin) startPeers(ctx context.Context) error {
	if p.handle == nil || p.handle.ProfileName() == "" {
		return nil
	}
	identity := os.Getenv(peers.IdentityEnv)
	if identity == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return fmt.Errorf("%s: naming this scheduler among its peers: set %s (the host name is unknown: %w)", Name, peers.IdentityEnv, err)
		}
		identity = host
	}
	m, err := peers.New(peers.Config{
		Client:    p.client,
		Namespace: *p.args.LeaseNamespace,
		Profile:   p.handle.ProfileName(),
		Identity:  identity,
		OnChange:  func() { p.activateDeferred(ctx, func(deferredPod) bool { return true }) },
	})
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	if err := m.Watch(ctx); err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	p.peers = m
	p.joinPeers = func() { m.Join(ctx) }
	p.proc.addMembership(m)
	if p.proc.joinsAtStart() {
		m.Join(ctx)
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		now := p.clock.Now()
		p.activateDeferred(ctx, func(d deferredPod) bool { return !d.taken && now.Sub(d.since) >= peerTakeover })
	}, 10*time.Second)
	return nil
}

// activateDeferred sends the pods left to peers that keep says back through PreEnqueue.
func (p *Plugin) activateDeferred(ctx context.Context, keep func(deferredPod) bool) {
	pods := p.deferred.selectPods(keep)
	if len(pods) > 0 && p.handle != nil {
		klog.FromContext(ctx).V(2).Info("Sending pods left to peers back to the queue", "pods", len(pods))
		p.handle.Activate(klog.FromContext(ctx), pods)
	}
}

// deferredPods are the pods this process left to a peer, until they are bound or gone.
type deferredPods struct {
	mu   sync.Mutex
	pods map[types.UID]deferredPod
}

type deferredPod struct {
	pod *v1.Pod
	// since is when this process first left the pod to a peer.
	since time.Time
	// taken is set once the pod has waited peerTakeover: this process tries it from then on.
	taken bool
}

func newDeferredPods() *deferredPods { return &deferredPods{pods: map[types.UID]deferredPod{}} }

// due records that pod is left to a peer, and tells whether it has waited long enough that
// this process tries it anyway.
func (d *deferredPods) due(pod *v1.Pod, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.pods[pod.UID]
	if !ok {
		e.since = now
	}
	e.pod = pod
	if now.Sub(e.since) >= peerTakeover {
		e.taken = true
	}
	d.pods[pod.UID] = e
	return e.taken
}

func (d *deferredPods) remove(uid types.UID) {
	d.mu.Lock()
	delete(d.pods, uid)
	d.mu.Unlock()
}

func (d *deferredPods) selectPods(keep func(deferredPod) bool) map[string]*v1.Pod {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]*v1.Pod{}
	for _, e := range d.pods {
		if keep(e) {
			out[e.pod.Namespace+"/"+e.pod.Name] = e.pod
		}
	}
	return out
}

// leftToPeers counts the pods this process leaves to peers now.
func (d *deferredPods) leftToPeers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.pods {
		if !e.taken {
			n++
		}
	}
	return n
}

// preferOwnNodes narrows each tier to the nodes this process owns among its peers, where the
// tier has any: two peers ranking nodes by the same strategy would otherwise pick the same
// fullest (or emptiest) node for their pods and race for its GPUs. A tier where this process
// owns no node is kept whole, so the partition never costs a pod a better fit.
func preferOwnNodes(view *peers.View, tiers [][]ledger.Candidate) [][]ledger.Candidate {
	if view == nil || view.Size() == 1 {
		return tiers
	}
	out := make([][]ledger.Candidate, len(tiers))
	for i, t := range tiers {
		var own []ledger.Candidate
		for _, c := range t {
			if view.Mine("node:" + c.Name) {
				own = append(own, c)
			}
		}
		if len(own) == 0 {
			own = t
		}
		out[i] = own
	}
	return out
}
