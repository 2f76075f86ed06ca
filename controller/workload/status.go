package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// writeStatus derives the workload's status from its replicas, records every phase change as
// an event, and writes the status when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, gw *apiv1.GpuWorkload, old *apiv1.GpuWorkloadStatus, reps []replica) error {
	st := &gw.Status
	now := r.clock.Now()
	prev := map[int32]apiv1.ReplicaStatus{}
	for _, rs := range old.Replicas {
		prev[rs.Index] = rs
	}
	st.Replicas = st.Replicas[:0:0]
	nodes := map[string]bool{}
	var bound, running, ready, succeeded, gpus int32
	for _, rep := range reps {
		rs := apiv1.ReplicaStatus{Index: rep.index, Attempt: rep.attempt}
		switch {
		case rep.pod != nil:
			p := rep.pod
			rs.Pod = p.Name
			rs.Claim = podClaimName(p)
			rs.Phase = p.Status.Phase
			if rs.Phase == "" {
				rs.Phase = corev1.PodPending
			}
			if p.Spec.NodeName != "" {
				rs.Node, rs.GpuIDs = podAllocation(p)
				if rs.Node == "" {
					rs.Node = p.Spec.NodeName
				}
			}
		case rep.done:
			rs = prev[rep.index] // succeeded; its pod may be gone
		}
		if rs.Node != "" && rs.Phase != corev1.PodFailed {
			bound++
			if rs.Phase != corev1.PodSucceeded && rs.Phase != corev1.PodFailed {
				nodes[rs.Node] = true
				gpus += int32(len(rs.GpuIDs))
			}
		}
		switch {
		case rs.Phase == corev1.PodSucceeded:
			succeeded++
		case rep.pod != nil && rs.Phase == corev1.PodRunning:
			running++
			if podReady(rep.pod) {
				ready++
			}
		}
		st.Replicas = append(st.Replicas, rs)
	}
	n := gw.Spec.WorkloadReplicas()
	st.ObservedGeneration = gw.Generation
	st.ReadyReplicas = ready
	st.Ready = fmt.Sprintf("%d/%d", ready, n)
	st.GPUs = gpus
	st.Nodes = st.Nodes[:0:0]
	for node := range nodes {
		st.Nodes = append(st.Nodes, node)
	}
	slices.Sort(st.Nodes)

	if st.Phase != apiv1.WorkloadFailed {
		switch {
		case n > 0 && succeeded == n:
			st.Phase = apiv1.WorkloadSucceeded
		case n > 0 && running+succeeded == n:
			st.Phase = apiv1.WorkloadRunning
		case n > 0 && bound == n:
			st.Phase = apiv1.WorkloadScheduled
		default:
			st.Phase = apiv1.WorkloadPending
		}
		if st.NextRetryTime == nil {
			st.Message = phaseMessage(st, n, bound)
		}
	}
	cond := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		setCondition(gw, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gw.Generation}, now)
	}
	allBound := n > 0 && bound == n
	cond(apiv1.WorkloadConditionScheduled, allBound, map[bool]string{true: "AllBound", false: "Waiting"}[allBound],
		fmt.Sprintf("%d of %d replicas have a node", bound, n))
	allReady := n > 0 && ready == n
	cond(apiv1.WorkloadConditionReady, allReady, map[bool]string{true: "AllReady", false: "NotReady"}[allReady],
		fmt.Sprintf("%d of %d replicas are ready", ready, n))

	if equality.Semantic.DeepEqual(old, st) {
		return nil
	}
	if err := r.client.Status().Update(ctx, gw); err != nil {
		return fmt.Errorf("writing status of GpuWorkload %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	if st.Phase != old.Phase {
		klog.FromContext(ctx).V(2).Info("GpuWorkload phase changed", "from", old.Phase, "to", st.Phase, "message", st.Message)
		kind := corev1.EventTypeNormal
		if st.Phase == apiv1.WorkloadFailed {
			kind = corev1.EventTypeWarning
		}
		r.recorder.Eventf(gw, nil, kind, string(st.Phase), "Phase", "%s → %s: %s", phaseName(old.Phase), st.Phase, st.Message)
	}
	if allBound && !meta.IsStatusConditionTrue(old.Conditions, apiv1.WorkloadConditionScheduled) {
		strategy := string(gw.Spec.NodeStrategy)
		if strategy == "" {
			strategy = "default"
		}
		scheduledTotal.WithLabelValues(strategy).Inc()
	}
	return nil
}

func phaseName(p apiv1.WorkloadPhase) string {
	if p == "" {
		return "(new)"
	}
	return string(p)
}

// phaseMessage says in words where the workload is.
func phaseMessage(st *apiv1.GpuWorkloadStatus, n, bound int32) string {
	msg := phaseWords(st, n, bound)
	if st.Retries > 0 {
		msg += fmt.Sprintf(" (%d retries so far)", st.Retries)
	}
	return msg
}

func phaseWords(st *apiv1.GpuWorkloadStatus, n, bound int32) string {
	switch st.Phase {
	case apiv1.WorkloadSucceeded:
		return fmt.Sprintf("all %d replicas succeeded", n)
	case apiv1.WorkloadRunning:
		return fmt.Sprintf("all %d replicas run on %s", n, strings.Join(st.Nodes, ", "))
	case apiv1.WorkloadScheduled:
		return fmt.Sprintf("all %d replicas bound; waiting for them to run", n)
	}
	if n == 0 {
		return "no replicas asked for"
	}
	return fmt.Sprintf("%d of %d replicas have GPUs", bound, n)
}

// setCondition sets a condition, keeping its transition time when the status did not change.
func setCondition(gw *apiv1.GpuWorkload, c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&gw.Status.Conditions, c)
}
