package gpuclaim

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
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
	if req, err = requestFor(claim); err != nil {
		return claim, req, true, err
	}
	pn, err := pinOf(pod)
	if err == nil && pn != nil {
		err = pn.apply(&req, claimKey(pod.Namespace, name))
	}
	return claim, req, true, err
}

// claimKey is "namespace/name".
func claimKey(namespace, name string) string { return namespace + "/" + name }

// requestFor turns a claim's spec into an allocator request. The CRD schema rejects most bad
// specs at apply time; this catches the rest (and objects written before the schema existed)
// with a message that names the field.
func requestFor(claim *apiv1.GpuClaim) (allocator.Request, error) {
	d := claim.Spec.Devices
	req := allocator.Request{Count: int(d.Count)}
	if d.Count < 1 || d.Count > apiv1.MaxGPUsPerClaim {
		return req, fmt.Errorf("spec.devices.count must be between 1 and %d, got %d", apiv1.MaxGPUsPerClaim, d.Count)
	}
	switch d.Policy {
	case apiv1.PolicyContiguous, "":
		req.Policy = allocator.Contiguous
	case apiv1.PolicySpread:
		req.Policy = allocator.Spread
	case apiv1.PolicyPreferIDs:
		req.Policy = allocator.PreferIDs
	default:
		return req, fmt.Errorf("spec.devices.policy %q is not one of contiguous, spread, preferIds", d.Policy)
	}
	for _, id := range d.PreferIDs {
		req.PreferIDs = append(req.PreferIDs, int(id))
	}
	switch d.Exclusivity {
	case apiv1.Exclusive, "":
		req.Exclusivity = allocator.Exclusive
	case apiv1.Shared:
		req.Exclusivity = allocator.Shared
	case apiv1.MIG:
		return req, fmt.Errorf("spec.devices.exclusivity MIG is not supported yet; use Exclusive or Shared")
	default:
		return req, fmt.Errorf("spec.devices.exclusivity %q is not one of Exclusive, Shared", d.Exclusivity)
	}
	if t := claim.Spec.Topology; t != nil {
		switch t.Mode {
		case apiv1.TopologyPreferred, "":
			req.Topology = allocator.Preferred
		case apiv1.TopologyRequired:
			req.Topology = allocator.Required
		case apiv1.TopologyIgnore:
			req.Topology = allocator.Ignore
		default:
			return req, fmt.Errorf("spec.topology.mode %q is not one of Required, Preferred, Ignore", t.Mode)
		}
		req.MinBandwidthGBps = int(t.MinBandwidthGBps)
	}
	if s := claim.Spec.Selector; s != nil {
		for k, v := range s.MatchLabels {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return req, fmt.Errorf("spec.selector.matchLabels key %q is not a valid label key: %s", k, errs[0])
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return req, fmt.Errorf("spec.selector.matchLabels[%q] value %q is not a valid label value: %s", k, v, errs[0])
			}
		}
	}
	if err := req.Validate(); err != nil {
		return req, fmt.Errorf("spec: %w", err)
	}
	return req, nil
}

// selectorMatches reports whether a node carries every label the claim selects on.
func selectorMatches(claim *apiv1.GpuClaim, node *v1.Node) bool {
	if claim.Spec.Selector == nil {
		return true
	}
	for k, v := range claim.Spec.Selector.MatchLabels {
		if got, ok := node.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// podFinished reports whether a pod no longer needs its GPUs.
func podFinished(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// claimNameOrEmpty is claimName without the flag.
func claimNameOrEmpty(pod *v1.Pod) string {
	name, _ := claimName(pod)
	return name
}
