package gpuclaim

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
)

// Gangs: the GpuClaims of a namespace with the same spec.gangRef are scheduled all or nothing.
// Each member claim serves one pod, as any claim does. Three gates keep a gang whole:
//
//   - PreFilter turns a member away until the gang has all its claims, each named by a pod,
//     and until the GPUs free now can take every member not yet placed at once (ledger.GangFits), so
//     that no member sits on GPUs waiting for others that cannot come;
//   - Permit holds each placed member (its GPUs reserved in the ledger, no lease taken yet)
//     until the last one is placed, then lets them all go on to PreBind together;
//   - a member that fails or times out in Permit rejects the others that are waiting, so the
//     gang's reservations are released together and it is retried as a whole.
//
// Members placed by another scheduler instance count as placed (their claim names their pod);
// a gang split across schedulers is not held back by this one.

// gangIndex indexes GpuClaims by "namespace/gangRef".
const gangIndex = "gang"

func claimGangIndex(obj any) ([]string, error) {
	c, ok := obj.(*apiv1.GpuClaim)
	if !ok || c.Spec.GangRef == "" {
		return nil, nil
	}
	return []string{ledger.GangKey(c)}, nil
}

// gangOfPod is the gang of the claim a pod names; empty when none.
func (p *Plugin) gangOfPod(pod *v1.Pod) string {
	name, ok := claimName(pod)
	if !ok || name == "" {
		return ""
	}
	c, err := p.claimLister.GpuClaims(pod.Namespace).Get(name)
	if err != nil {
		return ""
	}
	return ledger.GangKey(c)
}

// gang is a gang as PreFilter and Permit see it.
type gang struct {
	key     string
	size    int
	members []*apiv1.GpuClaim
}

// gangOf reads the gang of claim from the informer's index. Its size is the claim's gangSize,
// or the number of member claims when unset.
func (p *Plugin) gangOf(claim *apiv1.GpuClaim) (gang, error) {
	g := gang{key: ledger.GangKey(claim)}
	objs, err := p.claimIndexer.ByIndex(gangIndex, g.key)
	if err != nil {
		return g, fmt.Errorf("listing the GpuClaims of gang %s: %w", g.key, err)
	}
	for _, o := range objs {
		if c, ok := o.(*apiv1.GpuClaim); ok && c.DeletionTimestamp == nil {
			g.members = append(g.members, c)
		}
	}
	// Sorted, so that messages and the feasibility check do not depend on map order.
	slices.SortFunc(g.members, func(a, b *apiv1.GpuClaim) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	g.size = len(g.members)
	if claim.Spec.GangSize != nil {
		g.size = int(*claim.Spec.GangSize)
	}
	return g, nil
}

// placed counts the members whose claim has GPUs for a live pod: reserved in this scheduler's
// ledger (waiting in Permit, or binding) or recorded in the claim's status (bound).
func (p *Plugin) gangPlaced(g gang) int {
	n := 0
	for _, c := range g.members {
		if _, ok := p.claimHolder(c); ok {
			n++
		}
	}
	return n
}

// gangPreFilter says why a gang member may not be placed yet; nil when it may, with the
// topology domain its nodes must be in (gangtopology.go; the zero domain: anywhere).
func (p *Plugin) gangPreFilter(claim *apiv1.GpuClaim, oldest time.Time) (domain, *fwk.Status) {
	g, err := p.gangOf(claim)
	if err != nil {
		return domain{}, fwk.AsStatus(err)
	}
	if len(g.members) < g.size {
		return domain{}, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"gang %s has %d of its %d GpuClaims; its pods are scheduled together once all exist", g.key, len(g.members), g.size))
	}
	withPods := 0
	var unplaced []ledger.GangMember
	for _, c := range g.members {
		if !p.pods.claimHasPod(claims.Key(c.Namespace, c.Name)) {
			continue
		}
		withPods++
		if _, ok := p.claimHolder(c); ok {
			continue
		}
		req, err := ledger.RequestFor(c)
		if err != nil {
			return domain{}, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("gang %s: member GpuClaim %s/%s is invalid: %v", g.key, c.Namespace, c.Name, err))
		}
		p.capSharers(&req)
		unplaced = append(unplaced, ledger.GangMember{Claim: c, Req: req})
	}
	if withPods < g.size {
		return domain{}, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"gang %s: %d of its %d GpuClaims have a pod; its pods are scheduled together once all do", g.key, withPods, g.size))
	}
	need := max(0, g.size-(withPods-len(unplaced)))
	if claim.Spec.GangTopology != nil {
		// The domain check includes the fit: every member still to place, inside the domain.
		return p.gangDomain(g, claim, unplaced, need, oldest)
	}
	if need == 0 {
		return domain{}, nil
	}
	// The message leaves out how many would fit: it changes with every GPU freed or taken,
	// and each change would be one more claim status write and one more event per member.
	if fit := p.ledger.GangFits(unplaced, oldest, p.nodeSelected); fit < need {
		return domain{}, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"gang %s: the free GPUs cannot take all %d pods still to place at once; none is placed until they can", g.key, need))
	}
	return domain{}, nil
}

// allowGang lets every waiting member of a gang go on to PreBind.
func (p *Plugin) allowGang(ctx context.Context, key string) {
	p.holds.release(key)
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if p.gangOfPod(wp.GetPod()) == key {
			klog.FromContext(ctx).V(3).Info("Gang complete; letting a waiting member bind", "gang", key, "pod", klog.KObj(wp.GetPod()))
			wp.Allow(Name)
		}
	})
}

// rejectGang sends every waiting member of a gang back to the queue, which releases their
// reservations (Unreserve).
func (p *Plugin) rejectGang(ctx context.Context, key string, why string) {
	p.holds.release(key)
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if p.gangOfPod(wp.GetPod()) == key {
			klog.FromContext(ctx).V(3).Info("Releasing a waiting gang member", "gang", key, "pod", klog.KObj(wp.GetPod()), "reason", why)
			wp.Reject(Name, why)
		}
	})
}

// activateGang sends the pods of a gang that this plugin turned away back to the active
// queue: a member claim or pod appeared, which may complete the gang.
func (p *Plugin) activateGang(ctx context.Context, key string) {
	pods := p.waiting.selectPods(func(w waitingPod) bool { return w.gang == key })
	if len(pods) > 0 && p.handle != nil {
		p.handle.Activate(klog.FromContext(ctx), pods)
	}
}
