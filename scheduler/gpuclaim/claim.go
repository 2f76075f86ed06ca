package gpuclaim

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// claimName is the claim a pod uses and whether it names one (claims.Name): made by this
// plugin at PreBind, or by gpu-controller, from its template (template.go). An empty template
// name gives an empty claim name, which PreFilter reports.
func claimName(pod *v1.Pod) (string, bool) { return claims.Name(pod) }

// templateOf returns the claim template a pod names when it names no claim directly.
func templateOf(pod *v1.Pod) (string, bool) { return claims.Template(pod) }

// ownedBy reports whether the pod is the controller owner of the claim (claims.IsOwnedBy).
func ownedBy(claim *apiv1.GpuClaim, pod *v1.Pod) bool { return claims.IsOwnedBy(claim, pod) }

// podRequest reads the claim a pod names and turns it into a request, pinned to the pod's
// scheduling map entry if it has one. named is false when the pod names no claim; err is set
// when the claim cannot be read or is invalid, or the map or its entry is.
func (p *Plugin) podRequest(pod *v1.Pod) (claim *apiv1.GpuClaim, req allocator.Request, named bool, err error) {
	name, ok := claimName(pod)
	if !ok {
		return nil, req, false, nil
	}
	claim, err = p.claimLister.GpuClaims(pod.Namespace).Get(name)
	if template, templated := templateOf(pod); templated && apierrors.IsNotFound(err) {
		// Not made yet: PreFilter places the pod with the claim its template describes.
		if fromTemplate, ok, _ := p.claimFromTemplate(pod, template); ok {
			claim, err = fromTemplate, nil
		}
	}
	if err != nil {
		return nil, req, true, fmt.Errorf("reading GpuClaim %s/%s: %w", pod.Namespace, name, err)
	}
	if req, err = ledger.RequestFor(claim); err != nil {
		return claim, req, true, err
	}
	pn, err := ledger.PinOf(pod)
	if err == nil && pn != nil {
		err = pn.Apply(&req, claims.Key(pod.Namespace, name))
	}
	return claim, req, true, err
}

// claimNameOrEmpty is claimName without the flag.
func claimNameOrEmpty(pod *v1.Pod) string {
	name, _ := claimName(pod)
	return name
}
