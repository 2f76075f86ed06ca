package deviceplugin

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// deviceID is the kubelet's name for GPU index: the index itself, so that the kubelet's view
// (kubectl describe node, the pod resources API) names the same IDs as our annotations.
func deviceID(index int) string { return strconv.Itoa(index) }

// candidate is a pod bound to this node with our allocation on it.
type candidate struct {
	pod   *corev1.Pod
	ids   []int
	bound time.Time
}

// unallocated is a pod bound to this node that asks for the resource, has not been started by
// the kubelet, and carries no allocation this plugin serves: the kubelet may be admitting it.
type unallocated struct {
	pod *corev1.Pod
	// sizes are the GPU counts its containers (init and app) ask for.
	sizes []int
	// why says why it has no allocation of ours.
	why string
}

// podsOfNode lists the live pods bound to this node: the pods that hold our resource,
// or may be about to.
func (p *Plugin) podsOfNode() ([]*corev1.Pod, error) {
	pods, err := p.cfg.Pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %q: %w", p.cfg.NodeName, err)
	}
	out := pods[:0:0]
	for _, pod := range pods {
		if pod.Spec.NodeName != p.cfg.NodeName || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, pod)
	}
	return out, nil
}

// candidates lists the live pods of our scheduler bound to this node that carry an allocation
// for it, bound first first (ties by creation, then name, so the order is stable), and the
// not yet started pods that ask for the resource without such an allocation.
func (p *Plugin) candidates() ([]candidate, []unallocated, error) {
	pods, err := p.podsOfNode()
	if err != nil {
		return nil, nil, err
	}
	var out []candidate
	var rogue []unallocated
	gpus, _ := p.snapshot()
	for _, pod := range pods {
		if p.cfg.Mode != ModeGPU && len(p.requestSizes(pod)) == 0 {
			// A MIG or Shared plugin's pods are those asking for its resource: a whole-GPU
			// pod's allocation is another plugin's.
			continue
		}
		alloc, why := p.allocation(pod)
		ids := alloc.IDs
		if why == "" && p.cfg.Mode == ModeMIG {
			ids, why = p.migAllocation(pod, gpus)
		}
		if why != "" {
			// The kubelet has written no status for it yet (StartTime is its first write, on
			// admission or refusal): it may be the pod being admitted now.
			if sizes := p.requestSizes(pod); len(sizes) > 0 && pod.Status.StartTime == nil {
				rogue = append(rogue, unallocated{pod: pod, sizes: sizes, why: why})
			}
			continue
		}
		c := candidate{pod: pod, ids: ids, bound: pod.CreationTimestamp.Time}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue {
				c.bound = cond.LastTransitionTime.Time
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b candidate) int {
		return cmp.Or(a.bound.Compare(b.bound),
			a.pod.CreationTimestamp.Compare(b.pod.CreationTimestamp.Time),
			cmp.Compare(a.pod.Namespace+"/"+a.pod.Name, b.pod.Namespace+"/"+b.pod.Name))
	})
	slices.SortFunc(rogue, func(a, b unallocated) int {
		return cmp.Compare(a.pod.Namespace+"/"+a.pod.Name, b.pod.Namespace+"/"+b.pod.Name)
	})
	return out, rogue, nil
}

// allocation is pod's allocation on this node by our scheduler, or why it has none.
func (p *Plugin) allocation(pod *corev1.Pod) (apiv1.Allocation, string) {
	if !claims.ScheduledBy(pod.Spec.SchedulerName, p.cfg.SchedulerName) {
		return apiv1.Allocation{}, fmt.Sprintf("it was not scheduled by %s (spec.schedulerName %q)", p.cfg.SchedulerName, pod.Spec.SchedulerName)
	}
	v, ok := pod.Annotations[apiv1.AnnotationAllocated]
	if !ok {
		return apiv1.Allocation{}, fmt.Sprintf("it carries no %s annotation (it names no GpuClaim, or its claim's allocation is gone)", apiv1.AnnotationAllocated)
	}
	alloc, err := apiv1.ParseAllocation(v)
	if err != nil {
		return apiv1.Allocation{}, fmt.Sprintf("its %s annotation is invalid: %v", apiv1.AnnotationAllocated, err)
	}
	if alloc.Node != p.cfg.NodeName {
		return apiv1.Allocation{}, fmt.Sprintf("its %s annotation is for node %q", apiv1.AnnotationAllocated, alloc.Node)
	}
	return alloc, ""
}

// requestSizes are the GPU counts of pod's containers (init, then app) that ask for the
// resource.
func (p *Plugin) requestSizes(pod *corev1.Pod) []int {
	return claims.RequestSizes(pod, corev1.ResourceName(p.cfg.ResourceName))
}

// mayBe lists the unallocated pods one of whose containers asks for size GPUs: the kubelet's
// request for size GPUs may be theirs, and it does not say whose it is.
func mayBe(rogue []unallocated, size int) []unallocated {
	var out []unallocated
	for _, r := range rogue {
		if slices.Contains(r.sizes, size) {
			out = append(out, r)
		}
	}
	return out
}

// parseDeviceIDs turns the kubelet's device IDs into GPU indexes, sorted.
func parseDeviceIDs(ids []string) ([]int, error) {
	out := make([]int, 0, len(ids))
	for _, s := range ids {
		i, err := strconv.Atoi(s)
		if err != nil || deviceID(i) != s || i < 0 {
			return nil, fmt.Errorf("device ID %q is not a GPU index this plugin advertised", s)
		}
		out = append(out, i)
	}
	slices.Sort(out)
	return out, nil
}

// preferred picks the pod the kubelet is most likely preparing: the first bound, not yet
// handed its GPUs, asking for size GPUs, all of them available and including mustInclude.
func (p *Plugin) preferred(cands []candidate, available, mustInclude []int, size int, orTaken bool) *candidate {
	passes := 1
	if orTaken {
		passes = 2
	}
	for pass := 0; pass < passes; pass++ {
		for i := range cands {
			c := &cands[i]
			// First pass: pods not yet handed their GPUs. Second pass: any (the kubelet
			// restarted and lost its record of a pod it had already prepared).
			if (pass == 0 && p.isTaken(c.pod)) || len(c.ids) != size {
				continue
			}
			if subset(c.ids, available) && subset(mustInclude, c.ids) {
				return c
			}
		}
	}
	return nil
}

func (p *Plugin) isTaken(pod *corev1.Pod) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.taken[string(pod.UID)]
}

// markTaken records that pod was handed its GPUs, and forgets pods no longer bound here.
func (p *Plugin) markTaken(pod *corev1.Pod, live []candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.taken[string(pod.UID)] = true
	keep := make(map[string]bool, len(live))
	for _, c := range live {
		keep[string(c.pod.UID)] = true
	}
	for uid := range p.taken {
		if !keep[uid] {
			delete(p.taken, uid)
		}
	}
}

func subset(a, b []int) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
