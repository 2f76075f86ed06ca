package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Bind binds a GPU pod with a Binding that carries the allocation annotations; the API server
// copies a Binding's annotations onto the pod, so the pod gets its node and its GPUs in one
// write. The webhook lets only the scheduler's identity do this. Pods without a claim are left
// to the default binder.
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
	if err := p.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("binding pod %s/%s to node %s with GPUs %s: %w", pod.Namespace, pod.Name, nodeName, apiv1.FormatIDs(s.ids), err))
	}
	return nil
}
