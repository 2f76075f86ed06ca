package ledger

import (
	"fmt"
	"regexp"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// DefaultMaxSharersPerGPU is the scheduler's default maxSharersPerGPU: how many Shared pods
// one GPU serves at most. RequestFor sets it; the plugin puts its own setting in its place,
// and clients that cannot read the scheduler's configuration (kubectl gpu) judge with it.
const DefaultMaxSharersPerGPU = 16

// RequestFor turns a claim's spec into an allocator request. The CRD schema rejects most bad
// specs at apply time; this catches the rest (and objects written before the schema existed)
// with a message that names the field.
func RequestFor(claim *apiv1.GpuClaim) (allocator.Request, error) {
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
		req.MaxSharers = DefaultMaxSharersPerGPU
		if sh := d.Share; sh != nil {
			req.Share = allocator.Share{MemoryMiB: sh.MemoryMiB, MemoryPercent: int(sh.MemoryPercent), ComputePercent: int(sh.ComputePercent)}
			if err := checkShare(sh); err != nil {
				return req, err
			}
		}
	case apiv1.MIG:
		req.Exclusivity = allocator.MIG
		if err := checkMIGProfile(d.MigProfile); err != nil {
			return req, err
		}
		req.MIGProfile = d.MigProfile
		if req.Policy == allocator.PreferIDs {
			return req, fmt.Errorf("spec.devices.policy preferIds names whole GPUs; a MIG claim cannot use it")
		}
		// MIG devices have no islands: the claim's policy and topology play no part.
		req.Policy, req.PreferIDs = allocator.Contiguous, nil
	default:
		return req, fmt.Errorf("spec.devices.exclusivity %q is not one of Exclusive, Shared, MIG", d.Exclusivity)
	}
	if d.MigProfile != "" && req.Exclusivity != allocator.MIG {
		return req, fmt.Errorf("spec.devices.migProfile is only for exclusivity MIG, got %s", d.Exclusivity)
	}
	if d.Share != nil && req.Exclusivity != allocator.Shared {
		return req, fmt.Errorf("spec.devices.share is only for exclusivity Shared, got %s", d.Exclusivity)
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
	if req.Exclusivity == allocator.MIG {
		req.Topology, req.MinBandwidthGBps = allocator.Ignore, 0
	}
	if err := req.Validate(); err != nil {
		return req, fmt.Errorf("spec: %w", err)
	}
	return req, nil
}

// migProfilePattern is the CRD schema's pattern of spec.devices.migProfile.
var migProfilePattern = regexp.MustCompile(`^[1-8]g\.[0-9]+gb(\+[a-z]+)?$`)

// checkMIGProfile names what is wrong with a MIG profile the CRD schema would have refused.
func checkMIGProfile(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("spec.devices.migProfile is empty: a MIG claim names the MIG profile of its devices (for example 1g.10gb)")
	case len(p) > 32 || !migProfilePattern.MatchString(p):
		if len(p) > 32 {
			p = p[:32] + "..."
		}
		return fmt.Errorf("spec.devices.migProfile %q is no MIG profile: want <compute slices>g.<memory>gb, for example 1g.10gb or 3g.40gb", p)
	}
	return nil
}

// checkShare names what is wrong with a share the CRD schema would have refused.
func checkShare(sh *apiv1.GPUShare) error {
	switch {
	case sh.MemoryMiB < 0 || sh.MemoryMiB > 1<<20:
		return fmt.Errorf("spec.devices.share.memoryMiB must be between 1 and %d, got %d", 1<<20, sh.MemoryMiB)
	case sh.MemoryPercent < 0 || sh.MemoryPercent > 100:
		return fmt.Errorf("spec.devices.share.memoryPercent must be between 1 and 100, got %d", sh.MemoryPercent)
	case sh.ComputePercent < 0 || sh.ComputePercent > 100:
		return fmt.Errorf("spec.devices.share.computePercent must be between 1 and 100, got %d", sh.ComputePercent)
	case sh.MemoryMiB > 0 && sh.MemoryPercent > 0:
		return fmt.Errorf("spec.devices.share states memory twice: memoryMiB %d and memoryPercent %d; state one", sh.MemoryMiB, sh.MemoryPercent)
	case sh.MemoryMiB == 0 && sh.MemoryPercent == 0 && sh.ComputePercent == 0:
		return fmt.Errorf("spec.devices.share states nothing: set memoryMiB, memoryPercent or computePercent")
	}
	return nil
}

// SelectorMatches reports whether a node carries every label the claim selects on.
func SelectorMatches(claim *apiv1.GpuClaim, node *v1.Node) bool {
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
