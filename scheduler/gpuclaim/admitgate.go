package gpuclaim

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// admitGate keeps, on every node, at most one pod per GPU count bound and not yet admitted by
// the kubelet, for pods that ask for the device plugin's resource.
//
// Why: the kubelet asks a device plugin for "n devices" without saying for which pod. When two
// pods asking for the same n are bound to a node and neither is admitted yet, the agent's
// device plugin cannot tell which one the kubelet is admitting, and may hand one pod the GPUs
// locked for the other (the kubelet never hands one GPU out twice, but the leases then name the
// wrong pod, and the GPUs of the first to finish are given to a third pod while still in use).
// Pods of different counts are told apart by their count, so only the same count waits. The
// kubelet's first status write (status.startTime) follows admission or refusal; until then the
// next pod of that count waits in PreBind, holding its reservation, then binds. Gang members on
// one node are bound one after the other this way, never deadlocked: each has passed Permit.
//
// The gate is off (nil) when the scheduler is not told the device plugin's resource name.
type admitGate struct {
	resource v1.ResourceName

	mu sync.Mutex
	// unstarted holds, per node and GPU count, the pods bound (or about to be, by this
	// process) that the kubelet has not yet admitted.
	unstarted map[string]map[int]map[types.UID]string
	// changed is closed and replaced whenever unstarted loses a pod.
	changed chan struct{}
}

// admitWait is how long PreBind waits for the kubelet to admit the pod before it on the node.
// A kubelet admits a pod in well under a second; one that takes minutes is down, and the pod
// is better retried (perhaps elsewhere) than held.
const admitWait = 2 * time.Minute

func newAdmitGate(resource string) *admitGate {
	if resource == "" {
		return nil
	}
	return &admitGate{resource: v1.ResourceName(resource), unstarted: map[string]map[int]map[types.UID]string{}, changed: make(chan struct{})}
}

// sizes are the GPU counts pod's containers ask for through the resource.
func (g *admitGate) sizes(pod *v1.Pod) []int { return claims.RequestSizes(pod, g.resource) }

// observe follows a pod from the scheduler's informer. A pod not yet bound is left as it is:
// PreBind may have entered it (acquire) ahead of its binding.
func (g *admitGate) observe(pod *v1.Pod) {
	if g == nil || pod.Spec.NodeName == "" {
		return
	}
	if pod.Status.StartTime != nil || claims.PodFinished(pod) || pod.DeletionTimestamp != nil {
		g.forget(pod.UID)
		return
	}
	sizes := g.sizes(pod)
	if len(sizes) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enterLocked(pod.Spec.NodeName, sizes, pod.UID, pod.Namespace+"/"+pod.Name)
}

func (g *admitGate) enterLocked(node string, sizes []int, uid types.UID, name string) {
	bySize := g.unstarted[node]
	if bySize == nil {
		bySize = map[int]map[types.UID]string{}
		g.unstarted[node] = bySize
	}
	for _, n := range sizes {
		if bySize[n] == nil {
			bySize[n] = map[types.UID]string{}
		}
		bySize[n][uid] = name
	}
}

// forget drops a pod: admitted, refused, finished, deleted, or its binding attempt failed.
func (g *admitGate) forget(uid types.UID) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	dropped := false
	for node, bySize := range g.unstarted {
		for n, pods := range bySize {
			if _, ok := pods[uid]; ok {
				delete(pods, uid)
				dropped = true
			}
			if len(pods) == 0 {
				delete(bySize, n)
			}
		}
		if len(bySize) == 0 {
			delete(g.unstarted, node)
		}
	}
	if dropped {
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// blockerLocked names a pod other than uid on node, of one of sizes, not yet admitted.
func (g *admitGate) blockerLocked(node string, sizes []int, uid types.UID) string {
	for _, n := range sizes {
		for other, name := range g.unstarted[node][n] {
			if other != uid {
				return name
			}
		}
	}
	return ""
}

// acquire waits until no other pod of pod's GPU counts is bound to node and not yet admitted,
// then enters pod, so that the pods after it wait for its admission in turn.
func (g *admitGate) acquire(ctx context.Context, pod *v1.Pod, node string) error {
	if g == nil {
		return nil
	}
	sizes := g.sizes(pod)
	if len(sizes) == 0 {
		return nil
	}
	timeout := time.NewTimer(admitWait)
	defer timeout.Stop()
	for {
		g.mu.Lock()
		blocker := g.blockerLocked(node, sizes, pod.UID)
		if blocker == "" {
			g.enterLocked(node, sizes, pod.UID, pod.Namespace+"/"+pod.Name)
			g.mu.Unlock()
			return nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for node %s to admit pod %s first: %w", node, blocker, ctx.Err())
		case <-timeout.C:
			return fmt.Errorf("node %s has not admitted pod %s in %s; pods asking for the same number of %s are bound to a node one at a time, "+
				"because the kubelet does not tell the device plugin which of them it admits", node, blocker, admitWait, g.resource)
		}
	}
}
