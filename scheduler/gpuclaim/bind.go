package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Bind binds a GPU pod with a Binding that carries the allocation annotations; the API server
// copies a Binding's annotations onto the pod, so the pod gets its node and its GPUs in one
// write. The webhook lets only the scheduler's identity do this. Pods without a claim are left
// to the default binder.
// podShare is the value of a Shared pod's apiv1.AnnotationShare: its share resolved against
// its GPUs, the smallest where GPUs of different memory resolve a percentage differently (the
// container gets one limit, which must hold on each of them); "" when it stated none.
func podShare(shares []allocator.Resolved) string {
	if len(shares) == 0 {
		return ""
	}
	least := shares[0]
	for _, s := range shares[1:] {
		least.MemoryMiB = min(least.MemoryMiB, s.MemoryMiB)
	}
	return apiv1.FormatShare(apiv1.ResolvedShare{MemoryMiB: least.MemoryMiB, ComputePercent: int32(least.ComputePercent)})
}

func (p *Plugin) Bind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if _, ok := claimName(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	s, err := getState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	alloc := apiv1.Allocation{Node: nodeName, IDs: s.ids}
	b := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace,
			Name:      pod.Name,
			UID:       pod.UID,
			Annotations: map[string]string{
				apiv1.AnnotationAllocated: alloc.String(),
				apiv1.AnnotationGPUIDs:    apiv1.FormatIDs(s.ids),
			},
		},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if len(s.mig) > 0 {
		b.Annotations[apiv1.AnnotationMIGDevices] = apiv1.FormatMIGDevices(ledger.MIGDeviceRefs(s.mig))
	}
	if share := podShare(s.shares); share != "" {
		b.Annotations[apiv1.AnnotationShare] = share
	}
	if err := p.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("binding pod %s/%s to node %s with GPUs %s: %w", pod.Namespace, pod.Name, nodeName, apiv1.FormatIDs(s.ids), err))
	}
	return nil
}
