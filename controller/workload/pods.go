package workload

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// podName is the name of attempt a of replica i: "<workload>-<i>-<a>". Every retry gets a new
// name, so a new pod never waits for its failed predecessor to be gone, and creating the same
// attempt twice (a stale cache) is an AlreadyExists, never a second pod.
func podName(gw *apiv1.GpuWorkload, index, attempt int32) string {
	return fmt.Sprintf("%s-%d-%d", gw.Name, index, attempt)
}

// gangName is the gangRef of the claims of one attempt of a gang workload: every retry of a
// gang is a new gang, so claims of a failed round never count towards the next one.
func gangName(gw *apiv1.GpuWorkload, attempt int32) string {
	return fmt.Sprintf("%s-%d", gw.Name, attempt)
}

// replicaOf reads the replica index and attempt labels of a workload's pod.
func replicaOf(pod *corev1.Pod) (index, attempt int32, ok bool) {
	i, err1 := strconv.ParseInt(pod.Labels[apiv1.LabelReplicaIndex], 10, 32)
	a, err2 := strconv.ParseInt(pod.Labels[apiv1.LabelAttempt], 10, 32)
	if err1 != nil || err2 != nil || i < 0 || a < 0 {
		return 0, 0, false
	}
	return int32(i), int32(a), true
}

// Kueue's pod integration (sigs.k8s.io/kueue, docs/kueue.md). Kueue queues a pod that carries
// the queue label; pods that share a group label form one Kueue Workload, admitted as a whole
// once the group's total count of pods exists. Its webhook gates each such pod
// (kueue.x-k8s.io/admission) until the Workload is admitted.
const (
	// KueueQueueLabel names the LocalQueue. On a GpuWorkload it puts all its pods, as one
	// group, in that queue.
	KueueQueueLabel = "kueue.x-k8s.io/queue-name"
	// KueuePodGroupLabel names the pod group, and so Kueue's Workload.
	KueuePodGroupLabel = "kueue.x-k8s.io/pod-group-name"
	// KueuePodGroupTotalCountAnnotation is how many pods the group has.
	KueuePodGroupTotalCountAnnotation = "kueue.x-k8s.io/pod-group-total-count"
	// KueueRetriableInGroupAnnotation "false" on a pod of a group tells Kueue that the group
	// will not replace its failed pods: Kueue finishes the group once none of its pods runs,
	// releases its quota and takes its finalizer off the pods. Otherwise Kueue keeps the failed
	// or deleted pods of an admitted group, waiting for their replacements.
	KueueRetriableInGroupAnnotation = "kueue.x-k8s.io/retriable-in-group"
)

// inKueueGroup reports whether a pod is one of a Kueue pod group.
func inKueueGroup(pod *corev1.Pod) bool {
	return pod.Labels[KueuePodGroupLabel] != ""
}

// queueName is the Kueue LocalQueue of a workload's pods: the workload's queue label, else its
// template's ("" when neither names one). A queue named on the template alone would otherwise
// make each pod a Workload of its own, admitted one by one, which splits a gang.
func queueName(gw *apiv1.GpuWorkload) string {
	if q := gw.Labels[KueueQueueLabel]; q != "" {
		return q
	}
	return gw.Spec.Template.Labels[KueueQueueLabel]
}

// podGroupName is the Kueue pod group of a workload's pods, which is also the name of Kueue's
// Workload for them: the workload's name and the start of its UID, so that a workload deleted
// and made again under the same name never joins the group, or the Workload, of the old one.
// The name is cut to fit a label value (63 characters).
func podGroupName(gw *apiv1.GpuWorkload) string {
	uid := string(gw.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	name := gw.Name
	if n := validation.LabelValueMaxLength - len(uid) - 1; len(name) > n {
		name = name[:n]
	}
	return name + "-" + uid
}

// newPod builds attempt a of replica i from the workload's template. What the controller owns
// on the pod (scheduler, claim, strategy, priority class, its labels) overrides the template.
func newPod(gw *apiv1.GpuWorkload, schedulerName string, index, attempt int32) *corev1.Pod {
	t := gw.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        podName(gw, index, attempt),
			Namespace:   gw.Namespace,
			Labels:      t.Labels,
			Annotations: t.Annotations,
			// Controller and BlockOwnerDeletion (foreground deletion of the workload waits for
			// its pods); the chart grants update on gpuworkloads/finalizers for the latter.
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(gw, apiv1.SchemeGroupVersion.WithKind("GpuWorkload"))},
		},
		Spec: t.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[apiv1.LabelWorkload] = gw.Name
	pod.Labels[apiv1.LabelReplicaIndex] = strconv.Itoa(int(index))
	pod.Labels[apiv1.LabelAttempt] = strconv.Itoa(int(attempt))
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	// A queued workload's group is the controller's: one per workload, of all its replicas,
	// whatever the template says.
	if q := queueName(gw); q != "" {
		pod.Labels[KueueQueueLabel] = q
		pod.Labels[KueuePodGroupLabel] = podGroupName(gw)
		pod.Annotations[KueuePodGroupTotalCountAnnotation] = strconv.Itoa(int(gw.Spec.WorkloadReplicas()))
	}
	// Only the scheduler writes the allocation; a template that carries one gets none.
	for _, k := range []string{apiv1.AnnotationClaim, apiv1.AnnotationClaimTemplate, apiv1.AnnotationAllocated, apiv1.AnnotationGPUIDs, apiv1.AnnotationNodeStrategy} {
		delete(pod.Annotations, k)
	}
	if gw.Spec.Claim.TemplateName != "" {
		pod.Annotations[apiv1.AnnotationClaimTemplate] = gw.Spec.Claim.TemplateName
	} else {
		pod.Annotations[apiv1.AnnotationClaim] = pod.Name
	}
	if gw.Spec.NodeStrategy != "" {
		pod.Annotations[apiv1.AnnotationNodeStrategy] = string(gw.Spec.NodeStrategy)
	}
	pod.Spec.SchedulerName = schedulerName
	pod.Spec.NodeName = ""
	if gw.Spec.PriorityClassName != "" {
		pod.Spec.PriorityClassName = gw.Spec.PriorityClassName
		pod.Spec.Priority = nil // the Priority admission plugin fills it from the class
	}
	if pod.Spec.RestartPolicy == "" {
		// A pod that always restarts never fails, and a workload retries failed pods.
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	return pod
}

// newClaim builds the GpuClaim of a pod from the workload's inline claim spec. The pod owns it
// (controller, blockOwnerDeletion: a foreground deletion of the pod waits for its claim), so the
// garbage collector deletes it with the pod; the chart grants update on pods/finalizers, which
// the OwnerReferencesPermissionEnforcement admission plugin requires for blockOwnerDeletion.
func newClaim(gw *apiv1.GpuWorkload, pod *corev1.Pod, index, attempt int32) *apiv1.GpuClaim {
	c := &apiv1.GpuClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pod.Annotations[apiv1.AnnotationClaim],
			Namespace: gw.Namespace,
			Labels: map[string]string{
				apiv1.LabelWorkload:     gw.Name,
				apiv1.LabelReplicaIndex: strconv.Itoa(int(index)),
				apiv1.LabelAttempt:      strconv.Itoa(int(attempt)),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pod, corev1.SchemeGroupVersion.WithKind("Pod"))},
		},
		Spec: *gw.Spec.Claim.Spec.DeepCopy(),
	}
	if gw.Spec.Gang {
		c.Spec.GangRef = gangName(gw, attempt)
		c.Spec.GangSize = ptr.To(gw.Spec.WorkloadReplicas())
	}
	return c
}

// podClaimName is the GpuClaim a pod of ours uses: the one it names (an inline claim spec), or
// the one the claim-template controller makes for it (claim.templateName), whose name
// apiv1.ClaimNameForPod fixes.
func podClaimName(pod *corev1.Pod) string {
	name, _ := claims.Name(pod)
	return name
}

// podAllocation reads the node and GPU IDs the scheduler gave a pod.
func podAllocation(pod *corev1.Pod) (string, []int32) {
	a, err := apiv1.ParseAllocation(pod.Annotations[apiv1.AnnotationAllocated])
	if err != nil {
		return pod.Spec.NodeName, nil
	}
	ids := make([]int32, len(a.IDs))
	for i, id := range a.IDs {
		ids[i] = int32(id)
	}
	return a.Node, ids
}

// podReady reports whether a pod runs with its Ready condition true.
func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gangTimedOut reports whether the scheduler gave up waiting for the pod's gang: the
// framework rejects a pod held in Permit past its wait with this message, and the scheduler
// writes it into the pod's PodScheduled condition.
func gangTimedOut(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.Contains(c.Message, "rejected due to timeout after waiting")
		}
	}
	return false
}

// failureOf says why a pod counts as failed, or "" when it does not.
func failureOf(pod *corev1.Pod) (reason, message string) {
	switch {
	case pod.Status.Phase == corev1.PodFailed:
		msg := pod.Status.Message
		if msg == "" {
			msg = pod.Status.Reason
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && msg == "" {
				msg = fmt.Sprintf("container %s exited with code %d (%s)", cs.Name, t.ExitCode, t.Reason)
			}
		}
		if msg == "" {
			msg = "the pod failed"
		}
		return ReasonPodFailed, fmt.Sprintf("pod %s failed: %s", pod.Name, msg)
	case gangTimedOut(pod):
		return ReasonGangTimeout, fmt.Sprintf("pod %s: its gang was not placed in time", pod.Name)
	}
	return "", ""
}
