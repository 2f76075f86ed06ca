package ledger

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Blocked says what keeps a claim from any node, before a node is looked at.
type Blocked int

const (
	// BlockedDeleted: the claim is being deleted.
	BlockedDeleted Blocked = iota + 1
	// BlockedNotOwned: the pod names a template, and the claim of that name is not its own.
	BlockedNotOwned
	// BlockedInvalid: the claim's spec cannot be turned into a request.
	BlockedInvalid
	// BlockedHeld: another live pod holds the claim.
	BlockedHeld
	// BlockedPin: the pod's gpu-scheduling-map does not parse, or its entry does not fit the
	// claim.
	BlockedPin
)

// Refusal is why a claim cannot be placed for a pod.
type Refusal struct {
	Blocked Blocked
	Message string
	// Err is the spec error of a BlockedInvalid claim (Message wraps it).
	Err error
}

// Prepared is a claim made ready to judge nodes with: its request, narrowed to the pod's
// scheduling map entry when it has one.
type Prepared struct {
	Key string
	Req allocator.Request
	Pin *Pin
}

// Prepare runs the checks that come before any node is judged, in one order for the scheduler
// (PreFilter) and for DryRun: a claim being deleted, a templated pod's claim that is not its
// own, an invalid spec, a claim another live pod holds (holder names it: the holder's name and
// whether one holds it), a scheduling map entry that does not parse or does not fit. pod may
// be nil (a claim judged alone).
func Prepare(claim *apiv1.GpuClaim, pod *v1.Pod, holder func(*apiv1.GpuClaim) (string, bool)) (Prepared, *Refusal) {
	key := claims.Key(claim.Namespace, claim.Name)
	out := Prepared{Key: key}
	if claim.DeletionTimestamp != nil {
		return out, &Refusal{Blocked: BlockedDeleted, Message: fmt.Sprintf("GpuClaim %s is being deleted", key)}
	}
	if pod != nil {
		if template, ok := claims.Template(pod); ok && !claims.IsOwnedBy(claim, pod) {
			return out, &Refusal{Blocked: BlockedNotOwned, Message: fmt.Sprintf("GpuClaim %s is not owned by pod %s (UID %s); it was not made from GpuClaimTemplate %s for this pod, so it is not used", key, pod.Name, pod.UID, template)}
		}
	}
	req, err := RequestFor(claim)
	if err != nil {
		return out, &Refusal{Blocked: BlockedInvalid, Message: fmt.Sprintf("GpuClaim %s is invalid: %v", key, err), Err: err}
	}
	if name, held := holder(claim); held {
		return out, &Refusal{Blocked: BlockedHeld, Message: fmt.Sprintf("GpuClaim %s is held by pod %s/%s; one claim serves one pod at a time", key, claim.Namespace, name)}
	}
	if pod != nil {
		pn, err := PinOf(pod)
		if err == nil && pn != nil {
			err = pn.Apply(&req, key)
		}
		if err != nil {
			return out, &Refusal{Blocked: BlockedPin, Message: err.Error()}
		}
		out.Pin = pn
	}
	out.Req = req
	return out, nil
}
