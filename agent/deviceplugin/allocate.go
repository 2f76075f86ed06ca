package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// GetPreferredAllocation proposes the scheduler's IDs of the pod being prepared.
func (s *server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p := s.p
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	cands, err := p.candidates()
	if err != nil {
		return nil, err
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, creq := range req.ContainerRequests {
		available, err := parseDeviceIDs(creq.AvailableDeviceIDs)
		if err != nil {
			return nil, fmt.Errorf("preferred allocation on node %q: %w", p.cfg.NodeName, err)
		}
		must, err := parseDeviceIDs(creq.MustIncludeDeviceIDs)
		if err != nil {
			return nil, fmt.Errorf("preferred allocation on node %q: %w", p.cfg.NodeName, err)
		}
		c := p.preferred(cands, available, must, int(creq.AllocationSize))
		if c == nil {
			// No opinion: Allocate refuses whatever the kubelet picks unless it is exactly a
			// pod's allocation, with an error naming the request.
			resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{})
			continue
		}
		ids := make([]string, len(c.ids))
		for i, id := range c.ids {
			ids[i] = deviceID(id)
		}
		klog.FromContext(ctx).V(4).Info("Proposing the scheduler's GPUs", "pod", klog.KObj(c.pod), "ids", ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate hands each container the GPUs of the one pod whose allocation is exactly the
// requested IDs, and refuses when no pod bound here holds exactly those GPUs.
func (s *server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p := s.p
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	cands, err := p.candidates()
	if err != nil {
		return nil, err
	}
	gpus, _ := p.snapshot()
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		ids, err := parseDeviceIDs(creq.DevicesIds)
		if err != nil {
			return nil, fmt.Errorf("allocate on node %q: %w", p.cfg.NodeName, err)
		}
		var match *candidate
		for i := range cands {
			if slices.Equal(cands[i].ids, ids) {
				match = &cands[i]
				break
			}
		}
		if match == nil {
			return nil, fmt.Errorf("allocate %s %s on node %q: no pod bound to this node has %s=%s:%s; "+
				"the pod's GpuClaim or allocation is gone, or the pod was not scheduled by %s",
				p.cfg.ResourceName, apiv1.FormatIDs(ids), p.cfg.NodeName, apiv1.AnnotationAllocated, p.cfg.NodeName, apiv1.FormatIDs(ids), p.cfg.SchedulerName)
		}
		cresp, err := p.containerResponse(ids, gpus)
		if err != nil {
			return nil, fmt.Errorf("allocate GPUs %s to pod %s/%s on node %q: %w",
				apiv1.FormatIDs(ids), match.pod.Namespace, match.pod.Name, p.cfg.NodeName, err)
		}
		p.markTaken(match.pod, cands)
		klog.FromContext(ctx).V(2).Info("Handed the scheduler's GPUs to the kubelet", "pod", klog.KObj(match.pod), "ids", apiv1.FormatIDs(ids))
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
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
	resp.Envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(uuids, ",")
	// Inside the container the handed GPUs are the only ones, numbered from 0.
	ordinals := make([]string, len(ids))
	for i := range ids {
		ordinals[i] = strconv.Itoa(i)
	}
	resp.Envs["CUDA_VISIBLE_DEVICES"] = strings.Join(ordinals, ",")
	return resp, nil
}
