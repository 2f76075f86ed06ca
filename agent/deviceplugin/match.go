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

// candidates lists the live pods of our scheduler bound to this node that carry an allocation
// for it, bound first first (ties by creation, then name, so the order is stable).
func (p *Plugin) candidates() ([]candidate, error) {
	pods, err := p.cfg.Pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %q: %w", p.cfg.NodeName, err)
	}
	var out []candidate
	for _, pod := range pods {
		if pod.Spec.NodeName != p.cfg.NodeName || pod.Spec.SchedulerName != p.cfg.SchedulerName || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		v, ok := pod.Annotations[apiv1.AnnotationAllocated]
		if !ok {
			continue
		}
		alloc, err := apiv1.ParseAllocation(v)
		if err != nil || alloc.Node != p.cfg.NodeName {
			continue // not ours to hand out; Allocate names the problem if nothing else matches
		}
		c := candidate{pod: pod, ids: alloc.IDs, bound: pod.CreationTimestamp.Time}
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
	return out, nil
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
func (p *Plugin) preferred(cands []candidate, available, mustInclude []int, size int) *candidate {
	for pass := 0; pass < 2; pass++ {
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
