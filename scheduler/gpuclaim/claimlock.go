package gpuclaim

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// One claim serves one pod. Within one process the ledger's claim reservations and PreFilter's
// holder check keep a second pod off a claim; across processes (peers without leader election,
// or the old and the new leader during a failover) they cannot, since each process reserves in
// memory. The claim's status is the lock: PreBind writes the holder into it with optimistic
// concurrency (the update carries the resourceVersion read, a conflict makes it read again), and
// refuses when the status it reads names another live pod. Two processes binding two pods of
// one claim thus serialize on the claim object, and the second one loses: its attempt fails,
// Unreserve releases its leases, and the pod is retried (PreFilter then reports the claim held).
//
// The lock costs no write of its own: it is the claim's Bound status (Reserved with
// recordReservedPhase), written before the Binding instead of after it.

// errClaimTaken means another live pod holds the claim: another scheduler process bound it
// first.
var errClaimTaken = errors.New("GpuClaim held by another pod")

// takeClaim records in the claim's status that pod holds it with alloc (and the MIG devices
// mig of a MIG claim), in phase, unless the status names another pod that still lives
// (errClaimTaken), or the claim is gone.
func (p *Plugin) takeClaim(ctx context.Context, claim *apiv1.GpuClaim, pod *v1.Pod, phase apiv1.ClaimPhase, alloc apiv1.Allocation, mig []apiv1.MIGDeviceRef, msg string) error {
	_, err := p.updateClaimStatusIf(ctx, claim, func(st *apiv1.GpuClaimStatus) error {
		if other := types.UID(st.PodUID); other != "" && other != pod.UID {
			live, err := p.holderLives(ctx, claim.Namespace, st.PodName, other)
			if err != nil {
				return err
			}
			if live {
				return fmt.Errorf("GpuClaim %s/%s is held by pod %s/%s (UID %s), bound by another scheduler process; one claim serves one pod at a time: %w",
					claim.Namespace, claim.Name, claim.Namespace, st.PodName, other, errClaimTaken)
			}
		}
		setAllocation(st, phase, pod, alloc, mig, msg)
		return nil
	}, claimWrite{mustExist: true})
	return err
}

// giveBackClaim undoes takeClaim after the attempt failed: the claim goes back to Pending,
// only if it still names pod.
func (p *Plugin) giveBackClaim(ctx context.Context, claim *apiv1.GpuClaim, pod *v1.Pod) error {
	_, err := p.updateClaimStatusIf(ctx, claim, func(st *apiv1.GpuClaimStatus) error {
		if st.PodUID == string(pod.UID) {
			*st = apiv1.GpuClaimStatus{Phase: apiv1.ClaimPending, Message: fmt.Sprintf("binding pod %s failed; it is retried", pod.Name)}
		}
		return nil
	}, claimWrite{fresh: true}) // the informer may not show takeClaim's write yet
	return err
}

// holderLives reports whether the pod a claim's status names (name and uid, in namespace) still
// needs the claim. The pod tracker answers for the pods this process has seen; a pod it has not
// seen (a scheduler started after that pod went, or an informer behind another process's
// binding) is looked up on the API server, so that a claim is neither taken from a live pod nor
// kept forever by one that is gone.
func (p *Plugin) holderLives(ctx context.Context, namespace, name string, uid types.UID) (bool, error) {
	if p.pods.wasDeleted(uid) {
		return false, nil
	}
	if _, ok := p.pods.get(uid); ok {
		return true, nil
	}
	if name == "" {
		return false, nil
	}
	pod, err := p.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading pod %s/%s, the holder the GpuClaim names: %w", namespace, name, err)
	}
	return pod.UID == uid && !claims.PodFinished(pod), nil
}
