package gpuclaim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// PreFilter reads and validates the pod's claim and narrows the nodes to those that can serve
// it, best fit tier first: when any node has a free island that fits (at the bandwidth asked
// for), only such nodes are considered, so island-local placement holds wherever it is
// possible even when the scheduler samples a share of a large cluster. Of those it offers at
// most maxCandidateNodes, the best-placed for the node strategy (ledger.PickCandidates), so that the
// other plugins' Filter and Score do not run over thousands of nodes for every pod.
func (p *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if p.joinPeers != nil {
		// This process schedules (a standby under leader election never gets here): from now
		// on its peers leave it its share of the pods (preenqueue.go).
		p.joinPeers()
	}
	res, st, reason := p.preFilter(ctx, cs, pod, nodes)
	if st.IsRejected() {
		name, _ := claimName(pod)
		p.waiting.add(pod, claims.Key(pod.Namespace, name), p.gangOfPod(pod))
		metrics.Placement(metrics.ResultUnschedulable, reason)
	} else if !st.IsSuccess() && !st.IsSkip() {
		metrics.Placement(metrics.ResultError, reason)
	}
	return res, st
}

func (p *Plugin) preFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status, string) {
	name, ok := claimName(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip), ""
	}
	logger := klog.FromContext(ctx)
	strategy, err := p.podStrategy(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error()), metrics.ReasonInvalidPod
	}
	template, templated := templateOf(pod)
	if name == "" {
		if templated {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("pod %s/%s has an empty %s annotation; set it to the name of a GpuClaimTemplate in namespace %s", pod.Namespace, pod.Name, apiv1.AnnotationClaimTemplate, pod.Namespace)), metrics.ReasonInvalidPod
		}
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("pod %s/%s has an empty %s annotation; set it to the name of a GpuClaim in namespace %s", pod.Namespace, pod.Name, apiv1.AnnotationClaim, pod.Namespace)), metrics.ReasonInvalidPod
	}
	if templated {
		// Registered before the claim is read, not only after the rejection below: a claim
		// the controller adds between this read and that registration would otherwise find no
		// waiting pod to activate, and the pod would sit in the unschedulable pool until the
		// queue's periodic flush. Activating a pod still in this cycle is recorded by the
		// queue and requeues it as soon as the cycle rejects it.
		p.waiting.addIfAbsent(pod, claims.Key(pod.Namespace, name))
	}
	claim, err := p.claimLister.GpuClaims(pod.Namespace).Get(name)
	// unmade: the claim does not exist yet; the pod is placed with the one its template
	// describes, and PreBind makes it (template.go). Its status is not written before then.
	unmade := false
	if templated && apierrors.IsNotFound(err) {
		fromTemplate, ok, why := p.claimFromTemplate(pod, template)
		if !ok {
			// The template is missing (gpu-controller says so in an event on the pod too), or
			// it forms a gang, whose claims gpu-controller makes. The template's or the claim's
			// add event activates the pod (template.go, plugin.go), no poll.
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("waiting for GpuClaim %s/%s to be made from GpuClaimTemplate %s for pod %s: %s", pod.Namespace, name, template, pod.Name, why)), metrics.ReasonClaimNotFound
		}
		claim, err, unmade = fromTemplate, nil, true
	}
	if apierrors.IsNotFound(err) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("GpuClaim %s/%s named by pod %s does not exist", pod.Namespace, name, pod.Name)), metrics.ReasonClaimNotFound
	}
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("reading GpuClaim %s/%s: %w", pod.Namespace, name, err)), metrics.ReasonAPI
	}
	// pending and failed record in the claim's status why its pod waits; a claim not made
	// yet has no status to write.
	pending := func(msg string) {
		if !unmade {
			p.status.pending(claim, pod, msg)
		}
	}
	if msg := groupConflict(pod, claim); msg != "" {
		pending(msg)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg), metrics.ReasonInvalidPod
	}
	// The checks before any node, in the order kubectl gpu explain's dry run applies them too.
	prep, refused := ledger.Prepare(claim, pod, func(c *apiv1.GpuClaim) (string, bool) {
		holder, ok := p.claimHolder(c)
		return holder.Name, ok && holder.UID != pod.UID
	})
	if refused != nil {
		msg, reason := refused.Message, metrics.ReasonInvalidPod
		switch refused.Blocked {
		case ledger.BlockedDeleted, ledger.BlockedNotOwned:
			reason = metrics.ReasonClaimNotFound
		case ledger.BlockedInvalid:
			reason = metrics.ReasonInvalidClaim
			if unmade {
				msg = fmt.Sprintf("GpuClaimTemplate %s/%s is invalid: %v", pod.Namespace, template, refused.Err)
			} else {
				p.status.failed(claim, pod, msg)
			}
		case ledger.BlockedHeld:
			reason = metrics.ReasonClaimInUse
			pending(msg)
		case ledger.BlockedPin:
			pending(msg)
		}
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg), reason
	}
	key, req, pn := prep.Key, prep.Req, prep.Pin
	p.capSharers(&req)
	p.demand.arrived(pod.UID, claimShape(claim, &req, pod)) // the fragmentation strategy's demand

	oldest := p.clock.Now().Add(-p.freshness)
	var dom domain
	if claim.Spec.GangRef != "" {
		var st *fwk.Status
		if dom, st = p.gangPreFilter(claim, oldest); st != nil {
			pending(st.Message())
			// Kept for preemption's dry run, whose Filter calls must refuse every node: a gang
			// does not evict pods for one of its members.
			cs.Write(stateKey, &stateData{claim: claim, key: key, req: req, gang: ledger.GangKey(claim), gangHeld: st.Message(), makeClaim: unmade, results: newNodeResults()})
			return nil, st, metrics.ReasonGangIncomplete
		}
	}

	if pn != nil {
		// A pinned pod waits only for its entry's node and GPUs.
		res, st := p.preFilterPinned(cs, pod, claim, key, req, pn, oldest, unmade)
		reason := metrics.ReasonNoFit
		if st.Code() == fwk.Error {
			reason = metrics.ReasonAPI
		}
		return res, st, reason
	}

	tier, uncapped := p.relaxed.tier(pod.UID)
	gangKey := ledger.GangKey(claim)
	nodes, stale := p.ledger.Candidates(&req, oldest, func(node string) bool {
		return p.nodeSelected(claim, node) && p.inDomain(dom, node) && p.holds.holder(node, gangKey) == ""
	})
	defer ledger.ReleaseCandidates(nodes)
	// The best tier that has nodes is offered; a pod whose earlier attempt saw every offered
	// node fail another plugin's filter (a taint, say: PostFilter relaxed its tier) gets the
	// lower tiers down to its relaxed one as well. Better tiers are never dropped: whatever
	// turned their nodes away may be gone by now.
	var tiers [][]ledger.Candidate
	used := tier
	for f := ledger.FitIslandBandwidth; f >= ledger.FitNode; f-- {
		if len(nodes[f]) == 0 {
			continue
		}
		tiers = append(tiers, nodes[f])
		if req.Topology == allocator.Ignore || req.Count == 1 {
			used = ledger.FitNode // no tiers without topology: any fitting node will do
			continue
		}
		if f <= tier {
			used = f
			break
		}
	}
	// Of those, the best-placed maxCandidateNodes (ledger.PickCandidates); all of them once a capped
	// offer failed the other filters.
	limit := int(*p.args.MaxCandidateNodes)
	if p.packsDomains(strategy, dom) {
		tiers = p.packTiers(tiers)
	}
	if uncapped {
		limit = 0
	} else if p.peers != nil {
		tiers = preferOwnNodes(p.peers.Current(), tiers)
	}
	chosen, capped := ledger.PickCandidates(tiers, strategy, limit)
	// A pod that still holds leases from an attempt that crashed before binding may use those
	// GPUs again (Filter ignores its own holds), even if the summary counts them as taken.
	if own, _ := p.ledger.HoldsOf(pod.UID); own != "" && pod.Spec.NodeName == "" && !slices.Contains(chosen, own) && p.nodeSelected(claim, own) && p.inDomain(dom, own) {
		chosen = append(chosen, own)
	}
	s := &stateData{claim: claim, key: key, req: req, reqKey: ledger.RequestKey(&req), tier: used, capped: capped, gang: ledger.GangKey(claim), domain: dom, offered: len(chosen) > 0, makeClaim: unmade, results: newNodeResults()}
	// Written even when no node has room, so that preemption (a PostFilter) can ask Filter
	// whether evicting lower-priority pods would make some.
	cs.Write(stateKey, s)
	if len(chosen) == 0 {
		msg := p.noNodeMessage(claim, key, &req, stale, dom, oldest)
		pending(msg)
		return nil, fwk.NewStatus(fwk.Unschedulable, msg), metrics.ReasonNoFit
	}
	logger.V(5).Info("GPU candidates", "pod", klog.KObj(pod), "claim", key, "nodes", len(chosen), "capped", capped)
	return &fwk.PreFilterResult{NodeNames: sets.New(chosen...)}, nil, ""
}

// preFilterPinned offers a pod covered by its scheduling map exactly the entry's node, after
// checking that the node exists, is served by an agent and can give the entry's GPUs now. What
// stands in the way is reported with the entry, and the pod waits: the activator sends it back
// when that node's GPUs change, the node-add hint when the node appears. A held GPU is reported
// as Unschedulable, so that preemption may free it for a pod of higher priority; Reserve and the
// leases check again, so a GPU is never given twice.
func (p *Plugin) preFilterPinned(cs fwk.CycleState, pod *v1.Pod, claim *apiv1.GpuClaim, key string, req allocator.Request, pn *ledger.Pin, oldest time.Time, unmade bool) (*fwk.PreFilterResult, *fwk.Status) {
	node := pn.Alloc.Node
	s := &stateData{claim: claim, key: key, req: req, reqKey: ledger.RequestKey(&req), tier: ledger.FitNode, gang: ledger.GangKey(claim), offered: true, pinNode: node, makeClaim: unmade, results: newNodeResults()}
	reject := func(code fwk.Code, why string) (*fwk.PreFilterResult, *fwk.Status) {
		msg := pn.Message(pod, why)
		if !unmade {
			p.status.pending(claim, pod, msg)
		}
		return nil, fwk.NewStatus(code, msg)
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil || ni.Node() == nil {
		return reject(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node %s does not exist", node))
	}
	if err := apiv1.CheckNodeName(node); err != nil {
		return reject(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if !ledger.SelectorMatches(claim, ni.Node()) {
		return reject(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node %s does not match the selector of GpuClaim %s", node, key))
	}
	_, heartbeat, err, ok := p.ledger.Place(node, pod.UID, s.reqKey, req)
	if !ok {
		return reject(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node %s has no GpuNodeStatus (no gpu-agent reports it)", node))
	}
	if heartbeat.Before(oldest) {
		return reject(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("GpuNodeStatus of node %s and its agent's liveness lease are older than %s", node, p.freshness))
	}
	var unfit *allocator.Unfit
	if errors.As(err, &unfit) {
		cs.Write(stateKey, s) // for preemption's dry run on this node
		return reject(fwk.Unschedulable, fmt.Sprintf("on node %s: %s", node, unfit.Reason))
	}
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("placing pod %s/%s at its gpu-scheduling-map entry %s: %w", pod.Namespace, pod.Name, pn, err))
	}
	cs.Write(stateKey, s)
	return &fwk.PreFilterResult{NodeNames: sets.New(node)}, nil
}

// PreFilterExtensions lets preemption's dry runs take pods off a node (and put them back):
// Filter then judges the node as if their GPUs were free.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// RemovePod records that a preemption dry run took podInfoToRemove off the node.
func (p *Plugin) RemovePod(_ context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToRemove fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := getState(cs)
	if err != nil {
		return nil // not a GPU pod's cycle
	}
	node := nodeInfo.Node()
	if node == nil {
		return nil
	}
	if s.removed == nil {
		s.removed = map[string][]types.UID{}
	}
	s.removed[node.Name] = append(s.removed[node.Name], podInfoToRemove.GetPod().UID)
	return nil
}

// AddPod puts back a pod a dry run had taken off (preemption reprieves victims this way).
// Other pods added here are nominated pods not yet holding GPUs; their claims are re-checked
// against the ledger at Reserve, so they are not modelled.
func (p *Plugin) AddPod(_ context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := getState(cs)
	if err != nil || nodeInfo.Node() == nil {
		return nil
	}
	name, uid := nodeInfo.Node().Name, podInfoToAdd.GetPod().UID
	if i := slices.Index(s.removed[name], uid); i >= 0 {
		s.removed[name] = slices.Delete(s.removed[name], i, i+1)
	}
	return nil
}

// claimHolder returns the live pod holding a claim: recorded in the claim's status, or
// reserved by this scheduler and not yet recorded.
func (p *Plugin) claimHolder(claim *apiv1.GpuClaim) (podInfo, bool) {
	if uid := claim.Status.PodUID; uid != "" {
		if info, ok := p.pods.get(typesUID(uid)); ok {
			return info, true
		}
	}
	if uid, ok := p.ledger.ClaimReservedFor(claims.Key(claim.Namespace, claim.Name)); ok {
		if info, ok := p.pods.get(uid); ok {
			return info, true
		}
	}
	return podInfo{}, false
}

// nodeSelected applies the claim's node selector to a node from the scheduler's snapshot.
func (p *Plugin) nodeSelected(claim *apiv1.GpuClaim, node string) bool {
	if claim.Spec.Selector == nil || len(claim.Spec.Selector.MatchLabels) == 0 {
		return true
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil || ni.Node() == nil {
		return false
	}
	return ledger.SelectorMatches(claim, ni.Node())
}

func (p *Plugin) noNodeMessage(claim *apiv1.GpuClaim, key string, req *allocator.Request, stale int, dom domain, oldest time.Time) string {
	what := fmt.Sprintf("%d healthy free GPUs", req.Count)
	switch req.Exclusivity {
	case allocator.Shared:
		what = fmt.Sprintf("%d healthy shareable GPUs", req.Count)
	case allocator.MIG:
		what = fmt.Sprintf("%d free MIG devices of profile %s", req.Count, req.MIGProfile)
	}
	if req.Topology == allocator.Required {
		what += " in one island"
		if req.MinBandwidthGBps > 0 {
			what += fmt.Sprintf(" with ≥ %d GB/s", req.MinBandwidthGBps)
		}
	}
	msg := fmt.Sprintf("no node has %s for GpuClaim %s", what, key)
	if stale > 0 {
		msg += fmt.Sprintf(" (%d nodes ignored: GpuNodeStatus and agent liveness lease older than %s)", stale, p.freshness)
	}
	msg += p.ruledOut(claim, req, dom, oldest)
	keep := func(node string) bool { return p.nodeSelected(claim, node) && p.inDomain(dom, node) }
	return msg + p.ledger.CapsRuledOut(req, oldest, keep) + p.ledger.MIGElsewhere(req, oldest, keep)
}

// capSharers puts the plugin's maxSharersPerGPU in a Shared request.
func (p *Plugin) capSharers(req *allocator.Request) {
	if req.Exclusivity == allocator.Shared {
		req.MaxSharers = int(*p.args.MaxSharersPerGPU)
	}
}

// ruledOut names what kept nodes with room for the request away from the claim: its selector,
// its gang's topology domain, or another gang's hold on them, with how many nodes each ruled out. Empty when neither did.
// It runs only for a claim that found no node, and only judges the ledger's summaries.
func (p *Plugin) ruledOut(claim *apiv1.GpuClaim, req *allocator.Request, dom domain, oldest time.Time) string {
	hasSelector := claim.Spec.Selector != nil && len(claim.Spec.Selector.MatchLabels) > 0
	if (!hasSelector && dom.level == "" && !p.holds.any()) || p.handle == nil {
		return ""
	}
	gangKey := ledger.GangKey(claim)
	var heldFor []string
	infos, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return ""
	}
	bySelector, byDomain := 0, 0
	for _, ni := range infos {
		n := ni.Node()
		if n == nil || !p.ledger.FitsOn(n.Name, req, oldest) {
			continue
		}
		switch {
		case !ledger.SelectorMatches(claim, n):
			bySelector++
		case !dom.holds(n.Labels):
			byDomain++
		default:
			if g := p.holds.holder(n.Name, gangKey); g != "" {
				heldFor = append(heldFor, g)
			}
		}
	}
	out := ""
	if bySelector > 0 {
		keys := slices.Sorted(maps.Keys(claim.Spec.Selector.MatchLabels))
		pairs := make([]string, len(keys))
		for i, k := range keys {
			pairs[i] = k + "=" + claim.Spec.Selector.MatchLabels[k]
		}
		out += fmt.Sprintf("; %d nodes with room do not match its selector %s", bySelector, strings.Join(pairs, ","))
	}
	if byDomain > 0 {
		out += fmt.Sprintf("; %d nodes with room are outside its gang's domain %s", byDomain, dom)
	}
	if len(heldFor) > 0 {
		n := len(heldFor)
		slices.Sort(heldFor)
		out += fmt.Sprintf("; %d nodes with room are held for gang %s, placed in their topology domain (spec.gangTopology)", n, strings.Join(slices.Compact(heldFor), ", "))
	}
	return out
}
