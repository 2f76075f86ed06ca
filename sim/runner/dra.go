package runner

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/dra"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// The DRA baseline: each pod names a ResourceClaimTemplate made from its claim (one template per
// distinct shape; kube-controller-manager makes a ResourceClaim from it for every pod), and the
// stock kube-scheduler's DynamicResources plugin allocates devices from the ResourceSlices the
// agents publish (package sim/dra). What our claims say and DRA cannot is left out of the
// template, and the run's notes say so (draGaps).

// draRequest is the name of the one request in each template, and of the pod's claim;
// draIsland and draFallback name the subrequests of a Preferred claim's prioritized list.
const (
	draRequest  = "gpus"
	draIsland   = "island"
	draFallback = "any"
)

// draShape is what of a claim goes into a template: count, topology mode and bandwidth floor.
// The claim's node selector goes into the pod, as for the nvidia.com/gpu baseline.
type draShape struct {
	count int
	mode  gpuv1.TopologyMode
	minBW int
}

func shapeOf(c scenario.ClaimSpec) draShape {
	s := draShape{count: c.Count, mode: gpuv1.TopologyPreferred}
	if t := c.Topology; t != nil {
		if t.Mode != "" {
			s.mode = gpuv1.TopologyMode(t.Mode)
		}
		s.minBW = t.MinBandwidthGBps
	}
	if s.mode == gpuv1.TopologyIgnore {
		s.minBW = 0 // Ignore does not consider topology at all, bandwidth included
	}
	if s.count <= 1 && s.minBW == 0 {
		s.mode = gpuv1.TopologyIgnore // one GPU is always in one island
	}
	return s
}

// name is the template's name: gpus-<count>[-required|-preferred][-bw<GB/s>].
func (s draShape) name() string {
	n := "gpus-" + strconv.Itoa(s.count)
	if s.mode != gpuv1.TopologyIgnore {
		n += "-" + strings.ToLower(string(s.mode))
	}
	if s.minBW > 0 {
		n += "-bw" + strconv.Itoa(s.minBW)
	}
	return n
}

// draTemplate is the ResourceClaimTemplate of a shape:
//   - Ignore (and single GPUs): exactly count GPUs of our DeviceClass.
//   - Required: the same, with a matchAttribute constraint on the island (all GPUs in one
//     island) and, with a bandwidth floor, a CEL selector on every GPU's bandwidth.
//   - Preferred: a prioritized list (firstAvailable, GA in 1.36): first the GPUs in one island
//     at the floor, else any count GPUs. The scheduler allocates the first subrequest a node
//     can serve and scores nodes higher where an earlier one fit.
func draTemplate(s draShape, ns string) *resourceapi.ResourceClaimTemplate {
	var selectors []resourceapi.DeviceSelector
	if s.minBW > 0 {
		selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].%s >= %d", dra.DriverName, dra.AttrBandwidth, s.minBW),
		}}}
	}
	exact := func(sel []resourceapi.DeviceSelector) *resourceapi.ExactDeviceRequest {
		return &resourceapi.ExactDeviceRequest{
			DeviceClassName: dra.DeviceClassName, Selectors: sel,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(s.count),
		}
	}
	island := func(requests ...string) resourceapi.DeviceConstraint {
		a := dra.IslandAttribute
		return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: &a}
	}
	var spec resourceapi.DeviceClaim
	switch s.mode {
	case gpuv1.TopologyRequired:
		spec.Requests = []resourceapi.DeviceRequest{{Name: draRequest, Exactly: exact(selectors)}}
		spec.Constraints = []resourceapi.DeviceConstraint{island(draRequest)}
	case gpuv1.TopologyPreferred:
		spec.Requests = []resourceapi.DeviceRequest{{Name: draRequest, FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: draIsland, DeviceClassName: dra.DeviceClassName, Selectors: selectors,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(s.count)},
			{Name: draFallback, DeviceClassName: dra.DeviceClassName,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(s.count)},
		}}}
		spec.Constraints = []resourceapi.DeviceConstraint{island(draRequest + "/" + draIsland)}
	default:
		spec.Requests = []resourceapi.DeviceRequest{{Name: draRequest, Exactly: exact(selectors)}}
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: s.name(), Namespace: ns},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}},
	}
}

// draPod turns a pod built for the nvidia.com/gpu baseline into the DRA one: the extended
// resource gives way to a claim made from the shape's template.
func draPod(pod *corev1.Pod, p scenario.PodPlan) *corev1.Pod {
	c := &pod.Spec.Containers[0]
	delete(c.Resources.Requests, cluster.ResourceGPU)
	c.Resources.Limits = nil
	c.Resources.Claims = []corev1.ResourceClaim{{Name: draRequest}}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: draRequest, ResourceClaimTemplateName: ptr.To(shapeOf(p.Claim).name())}}
	return pod
}

// draTemplates makes the templates the plan needs, by name.
func draTemplates(plan []scenario.PodPlan, ns string) []*resourceapi.ResourceClaimTemplate {
	seen := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, p := range plan {
		s := shapeOf(p.Claim)
		if _, ok := seen[s.name()]; !ok {
			seen[s.name()] = draTemplate(s, ns)
		}
	}
	out := make([]*resourceapi.ResourceClaimTemplate, 0, len(seen))
	for _, t := range seen {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// createTemplates creates the plan's templates before the clock starts, as the gpu-scheduler
// run creates its GpuClaims: they are the user's standing requests.
func createTemplates(ctx context.Context, cs kubernetes.Interface, plan []scenario.PodPlan, ns string) error {
	for _, t := range draTemplates(plan, ns) {
		err := retryTransient(ctx, func() error {
			_, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", ns, t.Name, err)
		}
	}
	return nil
}

// draGaps says, for the report, which of the plan's claim features DRA could not be asked for
// and how many pods had them, and how the rest was expressed.
func draGaps(plan []scenario.PodPlan) []string {
	var preferred, required, bw, contiguous, spread, preferIDs, shared, gangPods int
	gangs := map[string]bool{}
	for _, p := range plan {
		c, s := p.Claim, shapeOf(p.Claim)
		switch s.mode {
		case gpuv1.TopologyPreferred:
			preferred++
		case gpuv1.TopologyRequired:
			required++
		}
		if s.minBW > 0 {
			bw++
		}
		if c.Count > 1 {
			switch c.Policy {
			case "", string(gpuv1.PolicyContiguous):
				contiguous++
			case string(gpuv1.PolicySpread):
				spread++
			}
		}
		if len(c.PreferIDs) > 0 || c.Policy == string(gpuv1.PolicyPreferIDs) {
			preferIDs++
		}
		if c.Exclusivity == string(gpuv1.Shared) {
			shared++
		}
		if p.Gang != "" {
			gangPods++
			gangs[p.Gang] = true
		}
	}
	var out []string
	add := func(n int, format string, args ...any) {
		if n > 0 {
			out = append(out, fmt.Sprintf(format, append([]any{n}, args...)...))
		}
	}
	add(required, "DRA: %d pods with topology Required ask for all GPUs in one island (matchAttribute %s)", dra.IslandAttribute)
	add(preferred, "DRA: %d multi-GPU pods with topology Preferred ask through a prioritized list (firstAvailable: one island, else any GPUs); the scheduler scores a node by the subrequest it could serve, but takes the first devices that fit inside it, with no regard for the islands it leaves broken")
	add(bw, "DRA: %d pods with a bandwidth floor get it as a CEL selector on each GPU's %s attribute", dra.AttrBandwidth)
	add(contiguous, "DRA cannot express: policy contiguous (%d multi-GPU pods): the allocator takes the first free devices in slice order, adjacent or not")
	add(spread, "DRA cannot express: policy spread (%d pods): they ask for any GPUs")
	add(preferIDs, "DRA cannot express: preferIds (%d pods): they ask for any GPUs")
	add(shared, "DRA cannot express: Shared exclusivity (%d pods): a device is given to one claim at a time, so these pods got GPUs of their own")
	add(gangPods, "DRA cannot express: gangs (%d pods in %d gangs): each member is allocated and bound on its own, as in the nvidia.com/gpu run", len(gangs))
	return out
}
