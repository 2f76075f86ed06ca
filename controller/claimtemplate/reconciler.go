// Package claimtemplate looks after the pods that name a GpuClaimTemplate: it reports a template
// that is missing or invalid as a Warning event on the pod, and makes the pod's GpuClaim (named
// by apiv1.ClaimNameForPod, a copy of the template's claim spec, labels and annotations, owned
// by the pod so that the garbage collector deletes it with the pod) where gpu-scheduler does not
// make it itself: for the pods of other schedulers, and for gang templates, whose claims must
// all exist before any member is placed.
//
// gpu-scheduler makes the claims of its own pods when it binds them (PreBind): a claim made
// here first costs the pod a failed scheduling attempt and a wait for this controller. Why the
// claim is made by these two and not at admission is in docs/workloads.md: a pod created with
// generateName has no name yet at mutating admission, a dry-run request must not create
// objects, and a missing template would have to fail the pod's creation (and with it the Job's
// or StatefulSet's controller loop) instead of leaving it Pending with an event.
package claimtemplate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// Event reasons on the pod.
const (
	ReasonTemplateNotFound = "ClaimTemplateNotFound"
	ReasonInvalidTemplate  = "ClaimTemplateInvalid"
	ReasonClaimNameTaken   = "ClaimNameTaken"
	ReasonClaimCreated     = "ClaimCreated"
	// ReasonPodGroup: the pod's pod group is missing, invalid, or conflicts with the template's
	// own gang.
	ReasonPodGroup = "PodGroupGang"
)

// groupRetry is how soon a pod whose pod group does not exist is looked at again: pod groups
// are not watched (the cluster may not serve their API), and JobSet, LeaderWorkerSet and Kueue
// users create the group alongside, so it is usually there at the next look.
const groupRetry = 10 * time.Second

// Reconciler makes the claim of one pod.
type Reconciler struct {
	client   ctrlclient.Client
	recorder events.EventRecorder
	// schedulerName is this release's scheduler; see Options.SchedulerName.
	schedulerName string
	// groups reads the pod groups the pods' gangs come from.
	groups groupReader
}

func newReconciler(c ctrlclient.Client, rec events.EventRecorder, groups groupReader) *Reconciler {
	return &Reconciler{client: c, recorder: rec, schedulerName: apiv1.SchedulerName, groups: groups}
}

// ours reports whether pod asks for this release's scheduler (apiv1.ReleaseFor).
func (r *Reconciler) ours(pod *corev1.Pod) bool {
	return apiv1.ReleaseFor(pod.Spec.SchedulerName) == r.schedulerName
}

// wantsClaim reports whether the controller makes a claim for the pod: it names a template and
// no claim, and is neither finished nor being deleted (a pod on its way out needs no GPUs).
func wantsClaim(pod *corev1.Pod) (string, bool) {
	template, ok := claims.Template(pod)
	if !ok || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return "", false
	}
	return template, true
}

// Reconcile makes the claim of the pod req names if it needs one and it does not exist yet.
// Problems a user must fix (no template, an invalid one, a claim of that name owned by someone
// else) are reported as a Warning event on the pod and not retried: the template watch brings
// the pod back when its template appears or changes.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	template, ok := wantsClaim(pod)
	if !ok || !r.ours(pod) {
		return reconcile.Result{}, nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "template", template)
	name, err := apiv1.ClaimNameForPod(pod.Name, template)
	if err != nil {
		r.warn(pod, ReasonInvalidTemplate, "naming the claim for GpuClaimTemplate %q: %v", template, err)
		return reconcile.Result{}, nil
	}

	existing := apiv1.ClaimMetadata() // its owner is all this reads; see setup.go
	err = r.client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, existing)
	switch {
	case err == nil:
		switch claims.JudgeExisting(existing, pod) {
		case claims.ExistingOfEarlierPod:
			// A StatefulSet pod deleted and made again: the garbage collector deletes the
			// earlier pod's claim, and its delete event brings this pod back.
			logger.V(2).Info("Waiting for the claim of the previous pod of this name to go", "claim", klog.KObj(existing))
		case claims.ExistingForeign:
			r.warn(pod, ReasonClaimNameTaken, "GpuClaim %s/%s for GpuClaimTemplate %q exists and is not owned by this pod; it is not taken over: delete or rename it", pod.Namespace, name, template)
		}
		return reconcile.Result{}, nil
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading GpuClaim %s/%s: %w", pod.Namespace, name, err)
	}

	tmpl := &apiv1.GpuClaimTemplate{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: template}, tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			r.warn(pod, ReasonTemplateNotFound, "GpuClaimTemplate %s/%s named in annotation %s does not exist; the pod stays Pending until it does", pod.Namespace, template, apiv1.AnnotationClaimTemplate)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading GpuClaimTemplate %s/%s: %w", pod.Namespace, template, err)
	}

	group, inGroup, err := claims.PodGroupOf(pod)
	if err != nil {
		r.warn(pod, ReasonPodGroup, "%v", err)
		return reconcile.Result{}, nil
	}
	if inGroup && tmpl.Spec.Spec.GangRef != "" {
		r.warn(pod, ReasonPodGroup, "pod is in %s (%s) and its GpuClaimTemplate %q sets spec.gangRef %q: a pod belongs to one gang; remove gangRef from the template (the group makes the gang) or take the pod out of the group",
			group, group.Field(), template, tmpl.Spec.Spec.GangRef)
		return reconcile.Result{}, nil
	}
	if !inGroup && r.schedulerMakesClaim(pod, tmpl) {
		// gpu-scheduler makes it when it binds the pod; a create here would only race it.
		logger.V(5).Info("The scheduler makes the claim when it binds the pod", "claim", klog.KRef(pod.Namespace, name))
		return reconcile.Result{}, nil
	}
	claim, err := apiv1.ClaimFromTemplate(pod, tmpl)
	if err != nil {
		r.warn(pod, ReasonInvalidTemplate, "naming the claim for GpuClaimTemplate %q: %v", template, err)
		return reconcile.Result{}, nil
	}
	if inGroup {
		gang, err := r.groups.gangOf(ctx, pod.Namespace, group)
		switch {
		case errors.Is(err, errGroupMissing), errors.Is(err, errGroupInvalid):
			// Pod groups are not watched: look again in a while, for a group made or fixed.
			r.warn(pod, ReasonPodGroup, "pod is in %s (%s), which its claim takes the gang from: %v; the pod stays Pending until the group is there and valid", group, group.Field(), err)
			return reconcile.Result{RequeueAfter: groupRetry}, nil
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if gang.gang {
			ref, err := claims.GangRefForGroup(group)
			if err != nil {
				r.warn(pod, ReasonPodGroup, "%v", err)
				return reconcile.Result{}, nil
			}
			claim.Spec.GangRef, claim.Spec.GangSize = ref, ptr.To(gang.size)
		}
	}
	if err := r.client.Create(ctx, claim); err != nil {
		switch {
		case apierrors.IsAlreadyExists(err):
			// Made by an earlier reconcile the cache has not seen yet, or by someone else:
			// look again once the cache has it, after the queue's rate-limited backoff (which
			// RequeueAfter, the replacement staticcheck names, would turn into one fixed delay).
			return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: see above
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			r.warn(pod, ReasonInvalidTemplate, "GpuClaim %s/%s made from GpuClaimTemplate %q was rejected: %v", pod.Namespace, name, template, err)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("creating GpuClaim %s/%s for pod %s from GpuClaimTemplate %q: %w", pod.Namespace, name, pod.Name, template, err)
	}
	logger.V(2).Info("Made the pod's GpuClaim from its template", "claim", klog.KObj(claim))
	return reconcile.Result{}, nil
}

// schedulerMakesClaim reports whether gpu-scheduler makes the pod's claim itself: the pod asks
// for this release's scheduler by name, is not bound yet, and the template forms no gang (a
// gang's members are held back until all their claims exist, so those are made here, before
// scheduling). A bound pod whose claim was deleted by hand gets it made again here.
func (r *Reconciler) schedulerMakesClaim(pod *corev1.Pod, tmpl *apiv1.GpuClaimTemplate) bool {
	return claims.ScheduledBy(pod.Spec.SchedulerName, r.schedulerName) && pod.Spec.NodeName == "" && tmpl.Spec.Spec.GangRef == ""
}

func (r *Reconciler) warn(pod *corev1.Pod, reason, format string, args ...any) {
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, "MakeClaim", format, args...)
}
