package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// GetPreferredAllocation proposes the scheduler's IDs of the pod being prepared. The kubelet
// may ask before this agent's informer has delivered the pod bound (the two watches are
// separate): with no opinion the kubelet picks GPUs of its own, which Allocate must refuse, so a
// request no pod can be proposed for is looked at again for up to UnallocatedWait. Only then
// are pods already handed their GPUs proposed (a kubelet that lost its record of them): before,
// such a pod that the kubelet has just finished, while this agent still sees it running, would
// have its freed GPUs proposed for the pod being admitted, which are not that pod's.
func (s *server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p := s.p
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	sizes := make([]int, 0, len(req.ContainerRequests))
	for _, creq := range req.ContainerRequests {
		sizes = append(sizes, int(creq.AllocationSize))
	}
	deadline := time.Now().Add(p.cfg.UnallocatedWait)
	for {
		last := !time.Now().Before(deadline)
		resp, complete, err := p.propose(ctx, req, sizes, last)
		if err != nil || complete || last {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, nil
		case <-time.After(unallocatedPoll):
		}
	}
}

// propose answers req from the pods bound here now; complete is false when some container
// request has no pod to propose. Pods already handed their GPUs are proposed only when
// orTaken.
func (p *Plugin) propose(ctx context.Context, req *pluginapi.PreferredAllocationRequest, sizes []int, orTaken bool) (*pluginapi.PreferredAllocationResponse, bool, error) {
	cands, err := p.settled(ctx, sizes)
	if err != nil {
		return nil, false, fmt.Errorf("preferred allocation: %w", err)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	complete := true
	for _, creq := range req.ContainerRequests {
		available, err := p.parseIDs(creq.AvailableDeviceIDs, false)
		if err != nil {
			return nil, false, fmt.Errorf("preferred allocation on node %q: %w", p.cfg.NodeName, err)
		}
		must, err := p.parseIDs(creq.MustIncludeDeviceIDs, false)
		if err != nil {
			return nil, false, fmt.Errorf("preferred allocation on node %q: %w", p.cfg.NodeName, err)
		}
		c := p.preferred(cands, available, must, int(creq.AllocationSize), orTaken)
		if c == nil {
			// No opinion: Allocate refuses whatever the kubelet picks unless it is exactly a
			// pod's allocation, with an error naming the request.
			complete = false
			resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{})
			continue
		}
		ids := make([]string, len(c.ids))
		for i, id := range c.ids {
			ids[i] = p.id(id)
			if p.cfg.Mode == ModeShared {
				ids[i] = pickReplica(id, creq.MustIncludeDeviceIDs, creq.AvailableDeviceIDs)
			}
		}
		klog.FromContext(ctx).V(4).Info("Proposing the scheduler's GPUs", "pod", klog.KObj(c.pod), "ids", ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, complete, nil
}

// Allocate hands each container the GPUs of the one pod whose allocation is exactly the
// requested IDs, and refuses when no pod bound here holds exactly those GPUs.
func (s *server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p := s.p
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	sizes := make([]int, 0, len(req.ContainerRequests))
	for _, creq := range req.ContainerRequests {
		sizes = append(sizes, len(creq.DevicesIds))
	}
	cands, err := p.settled(ctx, sizes)
	if err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	gpus, _ := p.snapshot()
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		ids, err := p.parseIDs(creq.DevicesIds, true)
		if err != nil {
			return nil, fmt.Errorf("allocate on node %q: %w", p.cfg.NodeName, err)
		}
		var match *candidate
		for i := range cands {
			if slices.Equal(cands[i].ids, ids) {
				// A Shared GPU's pods may hold the same GPUs: the first not yet handed its
				// replicas is the one being admitted, as GetPreferredAllocation proposed.
				if match == nil || p.cfg.Mode == ModeShared && p.isTaken(match.pod) && !p.isTaken(cands[i].pod) {
					match = &cands[i]
				}
				if p.cfg.Mode != ModeShared {
					break
				}
			}
		}
		if match == nil {
			return nil, p.noMatch(ids)
		}
		if p.cfg.Mode == ModeShared {
			// Several pods hold one Shared GPU by design: neither check below applies.
		} else if p.isTaken(match.pod) {
			// Handed once already: only a kubelet that lost its record asks again. While a pod
			// of this size waits for its first GPUs, the request is more likely that pod's, and
			// these GPUs are not its own.
			if waiting := firstUntaken(p, cands, len(ids), match); waiting != nil {
				return nil, fmt.Errorf("allocate %s %s on node %q: those GPUs were handed to pod %s/%s already, and pod %s/%s, not yet handed its own, may be the pod being admitted; refusing rather than give it GPUs %s chose for another pod",
					p.cfg.ResourceName, apiv1.FormatIDs(ids), p.cfg.NodeName, match.pod.Namespace, match.pod.Name, waiting.pod.Namespace, waiting.pod.Name, p.cfg.SchedulerName)
			}
		}
		if other := contender(cands, match); other != nil && p.cfg.Mode != ModeShared {
			return nil, fmt.Errorf("allocate %s %s on node %q: pods %s/%s and %s/%s, neither started, both carry an allocation of GPU %d; "+
				"the scheduler's leases never give one GPU to two live pods, so one allocation was not written by %s: refusing both until one is gone",
				p.cfg.ResourceName, apiv1.FormatIDs(ids), p.cfg.NodeName, match.pod.Namespace, match.pod.Name, other.pod.Namespace, other.pod.Name,
				firstShared(match.ids, other.ids), p.cfg.SchedulerName)
		}
		var cresp *pluginapi.ContainerAllocateResponse
		switch p.cfg.Mode {
		case ModeMIG:
			cresp, err = p.migContainerResponse(ids, gpus)
		case ModeShared:
			if cresp, err = p.containerResponse(ids, gpus); err == nil {
				err = shareEnv(match.pod, len(ids), cresp.Envs)
			}
			if err == nil {
				err = p.mpsClient(ctx, ids, gpus, cresp)
			}
		default:
			cresp, err = p.containerResponse(ids, gpus)
		}
		if err != nil {
			return nil, fmt.Errorf("allocate %s %s to pod %s/%s on node %q: %w",
				p.cfg.ResourceName, p.formatKeys(ids), match.pod.Namespace, match.pod.Name, p.cfg.NodeName, err)
		}
		p.markTaken(match.pod, cands)
		klog.FromContext(ctx).V(2).Info("Handed the scheduler's GPUs to the kubelet", "pod", klog.KObj(match.pod), "resource", p.cfg.ResourceName, "ids", p.formatKeys(ids))
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// noMatch is Allocate's refusal of devices no pod bound here holds.
func (p *Plugin) noMatch(ids []int) error {
	switch p.cfg.Mode {
	case ModeMIG:
		refs := make([]apiv1.MIGDeviceRef, len(ids))
		for i, k := range ids {
			refs[i] = migRef(k)
		}
		return fmt.Errorf("allocate %s %s on node %q: no pod bound to this node has %s=%s; "+
			"the pod's GpuClaim or allocation is gone, or the pod was not scheduled by %s",
			p.cfg.ResourceName, apiv1.FormatMIGDevices(refs), p.cfg.NodeName, apiv1.AnnotationMIGDevices, apiv1.FormatMIGDevices(refs), p.cfg.SchedulerName)
	default:
		return fmt.Errorf("allocate %s %s on node %q: no pod bound to this node has %s=%s:%s; "+
			"the pod's GpuClaim or allocation is gone, or the pod was not scheduled by %s",
			p.cfg.ResourceName, apiv1.FormatIDs(ids), p.cfg.NodeName, apiv1.AnnotationAllocated, p.cfg.NodeName, apiv1.FormatIDs(ids), p.cfg.SchedulerName)
	}
}

// pickReplica is the replica of GPU gpu to propose: one the kubelet must include, else the
// first available.
func pickReplica(gpu int, must, available []string) string {
	prefix := deviceID(gpu) + "::"
	for _, l := range [][]string{must, available} {
		for _, id := range l {
			if strings.HasPrefix(id, prefix) {
				return id
			}
		}
	}
	return replicaID(gpu, 0)
}

// settled lists the candidates once no unallocated pod could be the one the kubelet asks GPUs
// for: one of the counts in sizes. The kubelet says nothing of the pod it admits, so while such
// a pod (placed by another scheduler, or with spec.nodeName, asking for the resource itself) is
// bound here and not started, a request of its size may be its own, and handing out a claim
// pod's GPUs could hand them to it. The wait covers the usual case: the kubelet refused that
// pod a moment ago (its own request, refused here) and its Failed status is on its way; the
// kubelet admits one pod at a time, so waiting holds nothing else back. After
// UnallocatedWait the request is refused, naming the pod.
func (p *Plugin) settled(ctx context.Context, sizes []int) ([]candidate, error) {
	deadline := time.Now().Add(p.cfg.UnallocatedWait)
	for {
		cands, rogue, err := p.candidates()
		if err != nil {
			return nil, err
		}
		var suspects []unallocated
		size := 0
		for _, n := range sizes {
			if s := mayBe(rogue, n); len(s) > 0 {
				suspects, size = s, n
				break
			}
		}
		if len(suspects) == 0 {
			return cands, nil
		}
		if !time.Now().Before(deadline) {
			return nil, p.refuseUnallocated(suspects, size)
		}
		select {
		case <-ctx.Done():
			return nil, p.refuseUnallocated(suspects, size)
		case <-time.After(unallocatedPoll):
		}
	}
}

// unallocatedPoll is how often settled looks again at the pods it waits for.
const unallocatedPoll = 20 * time.Millisecond

func (p *Plugin) refuseUnallocated(suspects []unallocated, size int) error {
	const most = 3
	names := make([]string, 0, most)
	for i, s := range suspects {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(suspects)-most))
			break
		}
		names = append(names, fmt.Sprintf("%s/%s (%s)", s.pod.Namespace, s.pod.Name, s.why))
	}
	return fmt.Errorf("refusing %d %s on node %q: pod %s asks for %d %s without an allocation by %s and is not started; "+
		"the kubelet does not say which pod it is admitting, and GPUs go only to the pod %s locked them for, "+
		"so no pod is handed %d GPUs here until that pod is gone or refused (a GPU pod must name a GpuClaim and be placed by %s)",
		size, p.cfg.ResourceName, p.cfg.NodeName, strings.Join(names, ", "), size, p.cfg.ResourceName, p.cfg.SchedulerName,
		p.cfg.SchedulerName, size, p.cfg.SchedulerName)
}

// firstUntaken is a pod other than match, not started and not yet handed its GPUs, with an
// allocation of size GPUs.
func firstUntaken(p *Plugin, cands []candidate, size int, match *candidate) *candidate {
	for i := range cands {
		c := &cands[i]
		if c.pod.UID != match.pod.UID && c.pod.Status.StartTime == nil && len(c.ids) == size && !p.isTaken(c.pod) {
			return c
		}
	}
	return nil
}

// contender is another pod, not started, whose allocation shares a GPU with match's: two such
// pods mean one of them copied the other's allocation, and which one cannot be told here.
func contender(cands []candidate, match *candidate) *candidate {
	for i := range cands {
		c := &cands[i]
		if c.pod.UID == match.pod.UID || c.pod.Status.StartTime != nil {
			continue
		}
		if firstShared(c.ids, match.ids) >= 0 {
			return c
		}
	}
	return nil
}

// firstShared is the first ID in both a and b, or -1.
func firstShared(a, b []int) int {
	for _, x := range a {
		if slices.Contains(b, x) {
			return x
		}
	}
	return -1
}

// containerResponse hands over GPUs ids as CDI devices, and for runtimes without CDI as
// device nodes and the NVIDIA variables.
func (p *Plugin) containerResponse(ids []int, gpus []GPU) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	uuids := make([]string, 0, len(ids))
	for _, id := range ids {
		i := slices.IndexFunc(gpus, func(g GPU) bool { return g.Index == id })
		if i < 0 {
			return nil, fmt.Errorf("GPU %d is not on this node", id)
		}
		g := gpus[i]
		if g.Minor < 0 {
			return nil, fmt.Errorf("GPU %d (%s) has no known device node: it did not answer when the agent discovered it", id, g.UUID)
		}
		uuids = append(uuids, g.UUID)
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: p.cfg.CDIKind + "=" + deviceID(id)})
		node := gpuDeviceNode(g.Minor)
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + node, HostPath: p.cfg.DevRoot + "/" + node, Permissions: "rw"})
	}
	for _, c := range controlDevices {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + c, HostPath: p.cfg.DevRoot + "/" + c, Permissions: "rw"})
	}
	setVisibleDevices(resp, uuids)
	return resp, nil
}

// setVisibleDevices names the handed devices to the container: NVIDIA_VISIBLE_DEVICES by UUID
// (GPU-... or MIG-...), and CUDA_VISIBLE_DEVICES by ordinal, since inside the container the
// handed devices are the only ones, numbered from 0.
func setVisibleDevices(resp *pluginapi.ContainerAllocateResponse, uuids []string) {
	resp.Envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(uuids, ",")
	ordinals := make([]string, len(uuids))
	for i := range uuids {
		ordinals[i] = strconv.Itoa(i)
	}
	resp.Envs["CUDA_VISIBLE_DEVICES"] = strings.Join(ordinals, ",")
}
