package claimtemplate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Options configure the controller.
type Options struct {
	// MaxConcurrentReconciles is how many pods are handled at once; default 4.
	MaxConcurrentReconciles int
	// SchedulerName is this release's scheduler: the controller makes the claims of the pods
	// that ask for it (apiv1.ReleaseFor), and leaves another release's pods to that release.
	// Default gpu-scheduler.
	SchedulerName string
}

// templateIndex indexes pods by the template they name, "namespace/template", so that a
// template that appears finds the pods waiting for it without listing every pod.
const templateIndex = "gpu.scheduling/claim-template"

// SetupWithManager registers the claim-template controller with a manager. It watches pods
// that name a template, the claims they own (a claim deleted by hand is made again, unless the
// scheduler makes it when it binds the pod) and templates (a template that appears or changes
// brings back the pods that wait for it). The manager's scheme must hold api/v1 and core/v1.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, templateIndex, func(obj ctrlclient.Object) []string {
		t, ok := obj.GetAnnotations()[apiv1.AnnotationClaimTemplate]
		if !ok {
			return nil
		}
		return []string{obj.GetNamespace() + "/" + t}
	}); err != nil {
		return fmt.Errorf("indexing pods by claim template: %w", err)
	}
	n := opts.MaxConcurrentReconciles
	if n <= 0 {
		n = 4
	}
	dyn, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("making the client that reads pod groups: %w", err)
	}
	r := newReconciler(mgr.GetClient(), mgr.GetEventRecorder("gpu-claim-template-controller"), dynamicGroups{client: dyn})
	if opts.SchedulerName != "" {
		r.schedulerName = opts.SchedulerName
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("gpuclaimtemplate").
		For(&corev1.Pod{}, builder.WithPredicates(r.podEvents())).
		// Metadata only: owner references and deletions are all the controller reads of
		// claims (claimMetadata).
		Owns(&apiv1.GpuClaim{}, builder.OnlyMetadata, builder.WithPredicates(claimGone)).
		Watches(&apiv1.GpuClaimTemplate{}, handler.EnqueueRequestsFromMapFunc(podsOfTemplate(mgr.GetClient()))).
		WithOptions(controller.Options{MaxConcurrentReconciles: n}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the claim-template controller: %w", err)
	}
	return nil
}

// podEvents lets through the pod events that can change what Reconcile does: a pod of this
// release that names a template appears (or is listed again), or its claim annotations change.
// Every other update of such a pod (its binding, the scheduler's and the kubelet's status
// writes) left the answer as it was, so it is dropped, and so is a pod's deletion (its claim
// goes with it). That spares a reconcile per pod update, and a create that races the
// scheduler's: a pod's binding used to bring it back here before the claim the scheduler had
// just made reached this controller's cache, so a create failed for 6 % of the templated pods
// (workloads with 1,700 pods: 1.06 claim creates per pod). A claim deleted by hand from under a
// bound pod still brings its pod back, through the claim's delete event (Owns).
func (r *Reconciler) podEvents() predicate.Funcs {
	named := func(obj ctrlclient.Object) bool {
		_, ok := obj.GetAnnotations()[apiv1.AnnotationClaimTemplate]
		pod, isPod := obj.(*corev1.Pod)
		return ok && (!isPod || r.ours(pod))
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return named(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return named(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil || !named(e.ObjectNew) {
				return false
			}
			o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
			// A template annotation added to the pod shows here too: its value changed from "".
			return o[apiv1.AnnotationClaimTemplate] != n[apiv1.AnnotationClaimTemplate] ||
				o[apiv1.AnnotationClaim] != n[apiv1.AnnotationClaim]
		},
	}
}

// claimGone lets through only the deletion of a claim (and a relist): a claim's creation and its
// status writes, two per templated pod, cannot change what Reconcile does for the pod that
// owns it, whereas a claim deleted from under its pod is made again, and the delete of an
// earlier pod's claim of the same name lets the new pod's claim be made.
var claimGone = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return true },
}

// podsOfTemplate maps a template to the pods that name it and have no claim of their own.
func podsOfTemplate(c ctrlclient.Reader) handler.MapFunc {
	return func(ctx context.Context, obj ctrlclient.Object) []reconcile.Request {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, ctrlclient.InNamespace(obj.GetNamespace()), ctrlclient.MatchingFields{templateIndex: obj.GetNamespace() + "/" + obj.GetName()}); err != nil {
			klog.FromContext(ctx).Error(err, "Listing the pods of a GpuClaimTemplate", "template", klog.KObj(obj))
			return nil
		}
		var out []reconcile.Request
		for i := range pods.Items {
			if _, ok := wantsClaim(&pods.Items[i]); ok {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pods.Items[i].Namespace, Name: pods.Items[i].Name}})
			}
		}
		return out
	}
}
