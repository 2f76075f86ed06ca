package claims

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Existing is what a writer about to make a pod's GpuClaim (the scheduler at PreBind, the
// claim-template controller, the GpuWorkload controller) finds under the claim's name. Every
// writer follows one policy for it, JudgeExisting's:
//   - the pod's own claim is used, whoever made it;
//   - the claim of an earlier pod of the same name is left to the garbage collector, which
//     deletes it with that pod; the writer makes the pod's claim once it is gone. No writer
//     deletes it itself: a writer whose cache still holds the earlier pod would take the new
//     pod's claim for the earlier one's and delete the claim in use;
//   - any other claim of that name (made by hand, or owned by something else) is never taken
//     over nor deleted: the writer reports it, and the user renames or deletes it.
type Existing int

const (
	// ExistingOwn is the pod's own claim: the pod is its controller owner.
	ExistingOwn Existing = iota
	// ExistingOfEarlierPod is the claim of an earlier pod of the same name, still to be
	// collected.
	ExistingOfEarlierPod
	// ExistingForeign is a claim of that name that no pod of that name controls.
	ExistingForeign
)

// JudgeExisting says which Existing claim is for pod.
func JudgeExisting(claim metav1.Object, pod *corev1.Pod) Existing {
	switch {
	case IsOwnedBy(claim, pod):
		return ExistingOwn
	case IsOfEarlierPod(claim, pod):
		return ExistingOfEarlierPod
	default:
		return ExistingForeign
	}
}
