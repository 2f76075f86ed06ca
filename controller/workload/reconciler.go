// Package workload is the GpuWorkload controller: it runs a workload's replicas as pods of the
// gpu-scheduler, each with a GpuClaim of its own (made here from an inline spec, or by the
// claim-template controller from a GpuClaimTemplate), recreates failed pods after an
// exponential backoff, gives up after retryPolicy.maxRetries, and reports per-replica nodes
// and GPUs in the workload's status.
package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// Reasons of failures, events and the failed-workloads metric.
const (
	ReasonPodFailed   = "PodFailed"
	ReasonGangTimeout = "GangTimeout"
	ReasonInvalidPod  = "InvalidPod"
)

// Reconciler reconciles GpuWorkloads.
type Reconciler struct {
	client crclient.Client
	// reader reads the workload itself from the API server, not the cache: retries are
	// decided from its status, and a stale status could retry a replica twice.
	reader        crclient.Reader
	recorder      events.EventRecorder
	clock         clock.Clock
	jitter        func() float64
	schedulerName string
}

var _ reconcile.Reconciler = &Reconciler{}

// Reconcile brings one workload's pods and claims in line with its spec and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	start := r.clock.Now()
	defer func() {
		result := "success"
		switch {
		case err != nil:
			result = "error"
		case res.RequeueAfter > 0:
			result = "requeue"
		}
		reconcileDuration.WithLabelValues(result).Observe(r.clock.Since(start).Seconds())
	}()
	gw := &apiv1.GpuWorkload{}
	if err := r.reader.Get(ctx, req.NamespacedName, gw); err != nil {
		return reconcile.Result{}, crclient.IgnoreNotFound(err)
	}
	logger := klog.FromContext(ctx).WithValues("gpuWorkload", klog.KObj(gw))
	ctx = klog.NewContext(ctx, logger)
	if !r.owns(gw) {
		logger.V(4).Info("Left to another release's gpu-controller", "schedulerName", gw.Spec.Template.Spec.SchedulerName)
		return reconcile.Result{}, nil
	}

	pods, err := r.ownedPods(ctx, gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	if gw.DeletionTimestamp != nil {
		return r.finalize(ctx, gw, pods)
	}
	if !controllerutil.ContainsFinalizer(gw, apiv1.FinalizerWorkload) {
		controllerutil.AddFinalizer(gw, apiv1.FinalizerWorkload)
		if err := r.client.Update(ctx, gw); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer to GpuWorkload %s/%s: %w", gw.Namespace, gw.Name, err)
		}
	}
	return r.sync(ctx, gw, pods)
}

// owns reports whether this controller's release runs gw: the one its template's
// schedulerName names (the default release when it names none). Another release's controller
// would otherwise create, retry and finalize the same replicas.
func (r *Reconciler) owns(gw *apiv1.GpuWorkload) bool {
	return apiv1.ReleaseFor(gw.Spec.Template.Spec.SchedulerName) == r.schedulerName
}

// ownedPods lists the pods this workload controls.
func (r *Reconciler) ownedPods(ctx context.Context, gw *apiv1.GpuWorkload) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.client.List(ctx, &list, crclient.InNamespace(gw.Namespace), crclient.MatchingLabels{apiv1.LabelWorkload: gw.Name}); err != nil {
		return nil, fmt.Errorf("listing the pods of GpuWorkload %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], gw) {
			pods = append(pods, &list.Items[i])
		}
	}
	return pods, nil
}

// finalize deletes the workload's pods and claims (the scheduler then releases their GPU
// leases) and lets the workload go once its pods are gone.
func (r *Reconciler) finalize(ctx context.Context, gw *apiv1.GpuWorkload, pods []*corev1.Pod) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(gw, apiv1.FinalizerWorkload) {
		return reconcile.Result{}, nil
	}
	for _, p := range pods {
		if err := r.endKueueGroup(ctx, gw, p); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.deletePod(ctx, gw, p, "the workload is being deleted"); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.client.DeleteAllOf(ctx, &apiv1.GpuClaim{}, crclient.InNamespace(gw.Namespace), crclient.MatchingLabels{apiv1.LabelWorkload: gw.Name}); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("deleting the GpuClaims of GpuWorkload %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	if len(pods) > 0 {
		// Each pod's deletion wakes the workload up again; this is only a backstop.
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	controllerutil.RemoveFinalizer(gw, apiv1.FinalizerWorkload)
	if err := r.client.Update(ctx, gw); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing finalizer of GpuWorkload %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("GpuWorkload cleaned up")
	return reconcile.Result{}, nil
}

// endKueueGroup tells Kueue that the pod's group will not be retried
// (KueueRetriableInGroupAnnotation), before the workload's last pods are deleted: Kueue would
// otherwise hold them, terminated, with its finalizer, and keep the group's quota. A pod of no
// group, or already marked, is left as it is.
func (r *Reconciler) endKueueGroup(ctx context.Context, gw *apiv1.GpuWorkload, pod *corev1.Pod) error {
	if !inKueueGroup(pod) || pod.Annotations[KueueRetriableInGroupAnnotation] == "false" {
		return nil
	}
	patch := crclient.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[KueueRetriableInGroupAnnotation] = "false"
	if err := r.client.Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking pod %s/%s of GpuWorkload %s not retriable in its Kueue group: %w", pod.Namespace, pod.Name, gw.Name, err)
	}
	return nil
}

// deletePod deletes a pod unless it is already going; its claim goes with it.
func (r *Reconciler) deletePod(ctx context.Context, gw *apiv1.GpuWorkload, pod *corev1.Pod, why string) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	err := r.client.Delete(ctx, pod, crclient.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s of GpuWorkload %s: %w", pod.Namespace, pod.Name, gw.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted pod", "pod", klog.KObj(pod), "why", why)
	return nil
}

// replica is what the controller knows about one replica index.
type replica struct {
	index   int32
	attempt int32
	// pod is the live pod of the current attempt, nil when there is none.
	pod *corev1.Pod
	// done is true when the replica has succeeded (its pod may be gone since).
	done bool
}

func (r *Reconciler) sync(ctx context.Context, gw *apiv1.GpuWorkload, pods []*corev1.Pod) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	old := gw.Status.DeepCopy()
	st := &gw.Status
	n := gw.Spec.WorkloadReplicas()
	maxRetries, backoffSeconds := gw.Spec.Retries()
	reps := make([]replica, n)
	for i := range reps {
		reps[i].index = int32(i)
	}
	for _, rs := range st.Replicas {
		if rs.Index >= 0 && rs.Index < n {
			reps[rs.Index].attempt = rs.Attempt
			reps[rs.Index].done = rs.Phase == corev1.PodSucceeded
		}
	}
	// Pods of other indices (scaled down) or of earlier attempts go; the current ones are kept.
	for _, p := range pods {
		i, a, ok := replicaOf(p)
		switch {
		case !ok || i >= n:
			if err := r.deletePod(ctx, gw, p, "its replica is no longer wanted"); err != nil {
				return reconcile.Result{}, err
			}
		case a < reps[i].attempt:
			if err := r.deletePod(ctx, gw, p, "a later attempt replaced it"); err != nil {
				return reconcile.Result{}, err
			}
		case a > reps[i].attempt:
			// Our own later attempt whose status write we do not see yet cannot happen (the
			// status is written before a retry's pods); a hand-made pod with our labels can.
			logger.Info("Pod has a later attempt than the workload's status; ignoring it", "pod", klog.KObj(p))
		case p.DeletionTimestamp == nil:
			reps[i].pod = p
		}
	}

	if st.Phase == apiv1.WorkloadFailed {
		// Final: nothing is recreated, and nothing keeps GPUs.
		for _, rep := range reps {
			if rep.pod != nil && rep.pod.Status.Phase != corev1.PodSucceeded && rep.pod.Status.Phase != corev1.PodFailed {
				if err := r.deletePod(ctx, gw, rep.pod, "the workload failed"); err != nil {
					return reconcile.Result{}, err
				}
			}
		}
		return reconcile.Result{}, r.writeStatus(ctx, gw, old, reps)
	}

	// Failures: retry after backoff, or give up.
	var failed []int32
	var reason, message string
	for _, rep := range reps {
		if rep.pod == nil {
			continue
		}
		if rsn, msg := failureOf(rep.pod); rsn != "" {
			failed = append(failed, rep.index)
			if reason == "" {
				reason, message = rsn, msg
			}
		}
	}
	now := r.clock.Now()
	if len(failed) > 0 {
		cost := int32(len(failed))
		if gw.Spec.Gang {
			cost = 1
		}
		if st.NextRetryTime == nil {
			if st.Retries+cost > maxRetries {
				return reconcile.Result{}, r.fail(ctx, gw, old, reps, reason,
					fmt.Sprintf("%s; no retries left (%d of %d used)", message, st.Retries, maxRetries))
			}
			wait := Backoff(time.Duration(backoffSeconds)*time.Second, st.Retries, r.jitter())
			st.NextRetryTime = &metav1.MicroTime{Time: now.Add(wait)}
			st.Message = fmt.Sprintf("%s; retry %d of %d in %s", message, st.Retries+1, maxRetries, wait.Round(time.Millisecond))
			r.recorder.Eventf(gw, nil, corev1.EventTypeWarning, reason, "Retry", "%s", st.Message)
			if err := r.writeStatus(ctx, gw, old, reps); err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		if due, left := RetryDue(now, st.NextRetryTime.Time); !due {
			return reconcile.Result{RequeueAfter: left}, r.writeStatus(ctx, gw, old, reps)
		}
		// Due: move the failed replicas (a gang: all of them) to their next attempt, record
		// that first, then replace their pods.
		retry := failed
		if gw.Spec.Gang {
			retry = retry[:0:0]
			for _, rep := range reps {
				retry = append(retry, rep.index)
			}
		}
		for _, i := range retry {
			reps[i].attempt++
		}
		st.Retries += cost
		st.NextRetryTime = nil
		note := fmt.Sprintf("retry %d of %d: recreating %d pods after: %s", st.Retries, maxRetries, len(retry), message)
		st.Message = note
		if err := r.writeStatus(ctx, gw, old, reps); err != nil {
			return reconcile.Result{}, err
		}
		retriesTotal.Add(float64(cost))
		r.recorder.Eventf(gw, nil, corev1.EventTypeNormal, "Retrying", "Retry", "%s", note)
		for _, i := range retry {
			if reps[i].pod != nil {
				if err := r.deletePod(ctx, gw, reps[i].pod, "retried"); err != nil {
					return reconcile.Result{}, err
				}
				reps[i].pod = nil
			}
		}
		old = gw.Status.DeepCopy()
	} else if st.NextRetryTime != nil {
		// Whatever failed is gone (deleted by hand, say): nothing to retry.
		st.NextRetryTime = nil
	}

	for i := range reps {
		rep := &reps[i]
		if rep.pod != nil || rep.done {
			continue
		}
		p, err := r.createReplica(ctx, gw, rep.index, rep.attempt)
		if apierrors.IsInvalid(err) {
			// The template itself is wrong (the API server names the field): retrying cannot help.
			return reconcile.Result{}, r.fail(ctx, gw, old, reps, ReasonInvalidPod, fmt.Sprintf("pod %s cannot be created: %v", podName(gw, rep.index, rep.attempt), err))
		}
		if err != nil {
			// A quota, an admission webhook, the API server busy: said once per attempt in an
			// event, and retried with the controller's rate limit.
			r.recorder.Eventf(gw, nil, corev1.EventTypeWarning, "FailedCreate", "Create", "%v", err)
			return reconcile.Result{}, err
		}
		rep.pod = p
	}
	if err := r.ensureClaims(ctx, gw, reps); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.writeStatus(ctx, gw, old, reps)
}

// createReplica creates the pod of one attempt of a replica, and its claim when the workload
// has an inline claim spec. An existing pod of that name (a cache that lags) is returned as is.
func (r *Reconciler) createReplica(ctx context.Context, gw *apiv1.GpuWorkload, index, attempt int32) (*corev1.Pod, error) {
	pod := newPod(gw, r.schedulerName, index, attempt)
	err := r.client.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		if err := r.client.Get(ctx, crclient.ObjectKeyFromObject(pod), pod); err != nil {
			return nil, fmt.Errorf("reading pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if !metav1.IsControlledBy(pod, gw) {
			return nil, fmt.Errorf("pod %s/%s exists and does not belong to GpuWorkload %s", pod.Namespace, pod.Name, gw.Name)
		}
		return pod, nil
	}
	if err != nil {
		return nil, fmt.Errorf("creating pod %s/%s for GpuWorkload %s: %w", pod.Namespace, pod.Name, gw.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Created pod", "pod", klog.KObj(pod), "replica", index, "attempt", attempt)
	r.recorder.Eventf(gw, pod, corev1.EventTypeNormal, "CreatedPod", "Create", "created pod %s for replica %d (attempt %d)", pod.Name, index, attempt)
	return pod, nil
}

// ensureClaims makes the GpuClaim of every live pod that names one of ours and lacks it. The
// pod is created first so that the claim can be owned by it; the scheduler holds the pod back
// until its claim exists.
func (r *Reconciler) ensureClaims(ctx context.Context, gw *apiv1.GpuWorkload, reps []replica) error {
	if gw.Spec.Claim.Spec == nil {
		return nil // the claim-template controller makes them
	}
	for _, rep := range reps {
		p := rep.pod
		if p == nil || p.Spec.NodeName != "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		name := p.Annotations[apiv1.AnnotationClaim]
		if name == "" {
			continue
		}
		// Metadata only, from the same metadata-only cache as the claim-template controller's
		// (claimtemplate.SetupWithManager): who owns the claim is all this needs.
		cur := apiv1.ClaimMetadata()
		err := r.client.Get(ctx, crclient.ObjectKey{Namespace: p.Namespace, Name: name}, cur)
		if err == nil {
			switch claims.JudgeExisting(cur, p) {
			case claims.ExistingOwn:
				continue
			case claims.ExistingOfEarlierPod:
				// The garbage collector deletes it with that pod (claims.Existing).
				return fmt.Errorf("GpuClaim %s/%s belongs to an earlier pod of the same name; waiting for the garbage collector to delete it", cur.Namespace, cur.Name)
			default:
				return fmt.Errorf("GpuClaim %s/%s exists and is not owned by pod %s; it is not taken over: delete or rename it", cur.Namespace, cur.Name, p.Name)
			}
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading GpuClaim %s/%s: %w", p.Namespace, name, err)
		}
		c := newClaim(gw, p, rep.index, rep.attempt)
		if err := r.client.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating GpuClaim %s/%s for pod %s: %w", c.Namespace, c.Name, p.Name, err)
		}
	}
	return nil
}

// fail marks the workload Failed for good and deletes its pods that still hold GPUs.
func (r *Reconciler) fail(ctx context.Context, gw *apiv1.GpuWorkload, old *apiv1.GpuWorkloadStatus, reps []replica, reason, message string) error {
	gw.Status.Phase = apiv1.WorkloadFailed
	gw.Status.NextRetryTime = nil
	gw.Status.Message = message
	meta := metav1.Condition{Type: apiv1.WorkloadConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: message, ObservedGeneration: gw.Generation}
	setCondition(gw, meta, r.clock.Now())
	if err := r.writeStatus(ctx, gw, old, reps); err != nil {
		return err
	}
	failedTotal.WithLabelValues(reason).Inc()
	for _, rep := range reps {
		if rep.pod == nil {
			continue
		}
		// Nothing is retried any more: Kueue may finish the group and free its quota.
		if err := r.endKueueGroup(ctx, gw, rep.pod); err != nil {
			return err
		}
		if rep.pod.Status.Phase != corev1.PodSucceeded && rep.pod.Status.Phase != corev1.PodFailed {
			if err := r.deletePod(ctx, gw, rep.pod, "the workload failed"); err != nil {
				return err
			}
		}
	}
	return nil
}

// defaultJitter draws the jitter of a backoff.
func defaultJitter() float64 { return rand.Float64() }
