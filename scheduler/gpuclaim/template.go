package gpuclaim

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// Claims made from GpuClaimTemplates. A pod of this scheduler that names a template and whose
// claim does not exist yet is placed with the claim the template describes, and PreBind makes
// that claim, owned by the pod, before it takes the GPU leases. The pod thus needs no claim made
// ahead of it: no failed attempt, no wait for gpu-controller, no backoff. gpu-controller still
// makes the claims of gang templates (a gang is held back until all its claims exist) and of
// other schedulers' pods; whichever of the two creates second gets AlreadyExists and uses the
// claim that is there if it is the pod's own and asks for what the pod was placed with.

// claimFromTemplate is the claim the plugin would make for a templated pod whose claim does not
// exist: ok is false when the template is missing, when it forms a gang, when the pod is in a
// pod group (claims.PodGroupOf), or when the pod names no template. why says what the pod waits for when ok is false.
func (p *Plugin) claimFromTemplate(pod *v1.Pod, template string) (claim *apiv1.GpuClaim, ok bool, why string) {
	tmpl, err := p.templateLister.GpuClaimTemplates(pod.Namespace).Get(template)
	if err != nil {
		return nil, false, fmt.Sprintf("GpuClaimTemplate %s/%s does not exist", pod.Namespace, template)
	}
	if tmpl.Spec.Spec.GangRef != "" {
		return nil, false, fmt.Sprintf("the claims of gang template %s are made by gpu-controller before the gang is placed", template)
	}
	if group, ok, err := claims.PodGroupOf(pod); ok || err != nil {
		// The group's gang (claims.GangRefForGroup) must have every member's claim before
		// any is placed, and gpu-controller reads the group's size; it also reports a pod
		// that names two groups.
		what := "the pod's pod groups"
		if ok {
			what = group.String()
		}
		return nil, false, fmt.Sprintf("the claims of the pods of %s are made by gpu-controller, with the group's gang, before the gang is placed", what)
	}
	if tmpl.Spec.Spec.GangTopology != nil {
		// Allowed in a template for the pods of pod groups, whose claims get the group's gang;
		// a claim with gangTopology and no gang would be refused by the API server at PreBind.
		return nil, false, fmt.Sprintf("GpuClaimTemplate %s sets gangTopology without gangRef, which only the pods of a PodGroup can use (their claims take the group's gang): set gangRef in the template or put the pod in a PodGroup", template)
	}
	claim, err = apiv1.ClaimFromTemplate(pod, tmpl)
	if err != nil {
		return nil, false, err.Error()
	}
	return claim, true, ""
}

// groupConflict says why a pod in a pod group cannot be placed with its claim: the claim is in
// another gang than the group's (a claim the pod names itself, with a gangRef of its own). A
// pod belongs to one gang. Empty when there is no conflict.
func groupConflict(pod *v1.Pod, claim *apiv1.GpuClaim) string {
	group, ok, _ := claims.PodGroupOf(pod)
	if !ok || claim.Spec.GangRef == "" {
		return ""
	}
	want, err := claims.GangRefForGroup(group)
	if err != nil || claim.Spec.GangRef == want {
		return ""
	}
	return fmt.Sprintf("pod %s/%s is in %s (%s) and its GpuClaim %s is in gang %q: a pod belongs to one gang; set the claim's gangRef to %q (and gangSize to the group's size), drop its gangRef, or take the pod out of the group",
		pod.Namespace, pod.Name, group, group.Field(), claim.Name, claim.Spec.GangRef, want)
}

// makeClaim creates the claim PreFilter placed the pod with. A claim of that name made
// meanwhile (by an earlier attempt for this pod, or by gpu-controller) is used if it is the
// pod's own and asks for the same GPUs; otherwise the attempt fails and the next one reads the
// claim that is there (claims.Existing: every writer of a pod's claim follows that policy).
func (p *Plugin) makeClaim(ctx context.Context, pod *v1.Pod, want *apiv1.GpuClaim) (*apiv1.GpuClaim, error) {
	client := p.gpuClient.GpuV1().GpuClaims(want.Namespace)
	made, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: p.fieldManager})
	if err == nil {
		klog.FromContext(ctx).V(4).Info("Made the pod's GpuClaim from its template", "pod", klog.KObj(pod), "claim", klog.KObj(made))
		return made, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating GpuClaim %s/%s for pod %s from its GpuClaimTemplate: %w", want.Namespace, want.Name, pod.Name, err)
	}
	got, err := client.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading GpuClaim %s/%s, made meanwhile for pod %s: %w", want.Namespace, want.Name, pod.Name, err)
	}
	switch existing := claims.JudgeExisting(got, pod); {
	case existing == claims.ExistingOfEarlierPod:
		return nil, fmt.Errorf("GpuClaim %s/%s belongs to an earlier pod named %s; the garbage collector deletes it, and the pod's own is made then", want.Namespace, want.Name, pod.Name)
	case existing != claims.ExistingOwn:
		return nil, fmt.Errorf("GpuClaim %s/%s exists and is not owned by pod %s (UID %s)", want.Namespace, want.Name, pod.Name, pod.UID)
	case got.DeletionTimestamp != nil:
		return nil, fmt.Errorf("GpuClaim %s/%s is being deleted", want.Namespace, want.Name)
	case !apiequality.Semantic.DeepEqual(got.Spec, want.Spec):
		return nil, fmt.Errorf("GpuClaim %s/%s, made meanwhile, asks for other GPUs than its template did when pod %s was placed", want.Namespace, want.Name, pod.Name)
	}
	return got, nil
}

// templateHandler sends the pods waiting for a template back to the queue when it appears or
// changes.
func (p *Plugin) templateHandler(ctx context.Context) cache.ResourceEventHandler {
	activate := func(obj any) {
		if t, ok := obj.(*apiv1.GpuClaimTemplate); ok {
			p.activateTemplate(ctx, t.Namespace, t.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: activate,
		UpdateFunc: func(old, obj any) {
			prev, ok := old.(*apiv1.GpuClaimTemplate)
			cur, ok2 := obj.(*apiv1.GpuClaimTemplate)
			if ok && ok2 && prev.Generation != cur.Generation {
				activate(obj)
			}
		},
	}
}

// activateTemplate sends the waiting pods that name a template back to the active queue.
func (p *Plugin) activateTemplate(ctx context.Context, namespace, name string) {
	pods := p.waiting.selectPods(func(w waitingPod) bool {
		t, ok := templateOf(w.pod)
		return ok && t == name && w.pod.Namespace == namespace
	})
	if len(pods) > 0 && p.handle != nil {
		p.handle.Activate(klog.FromContext(ctx), pods)
	}
}
