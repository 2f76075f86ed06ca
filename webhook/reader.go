package webhook

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuinformers "github.com/gpu-scheduler/gpu-scheduler/api/generated/informers/externalversions"
	gpulisters "github.com/gpu-scheduler/gpu-scheduler/api/generated/listers/api/v1"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// Client rate limits of the webhook's own API calls. client-go's default (5 per second, bursts
// of 10) is far below what a Job creating a hundred GPU pods at once needs when a cache miss
// falls back to a GET; the apiserver's priority and fairness still bounds the webhook.
const (
	DefaultAPIQPS   = 50
	DefaultAPIBurst = 100
)

// ReaderOptions configure a ClusterReader.
type ReaderOptions struct {
	// QPS and Burst of the reader's clients; DefaultAPIQPS and DefaultAPIBurst when zero.
	QPS   float32
	Burst int
	// Claims: watch GpuClaims and GpuClaimTemplates (the device-plugin mode's GPU counts) and
	// namespaces (the forbid-privileged label).
	Claims bool
	// SiblingSchedulerNames: watch the pods of these schedulers, so that the allocation guard
	// can tell their Bindings from others' (Config.SiblingSchedulerNames).
	SiblingSchedulerNames []string
}

// ClusterReader answers the webhook's reads from shared informers, so that admitting a pod
// costs no API call; a cache miss (an object created an instant before the pod that names it,
// not yet seen by the watch) falls back to one GET.
type ClusterReader struct {
	gpus       versioned.Interface
	kube       kubernetes.Interface
	claims     gpulisters.GpuClaimLister
	templates  gpulisters.GpuClaimTemplateLister
	workloads  gpulisters.GpuWorkloadLister
	namespaces corev1listers.NamespaceLister
	siblings   []corev1listers.PodLister
	start      []func(<-chan struct{})
	synced     []cache.InformerSynced
}

// NewClusterReader builds the clients and informers from base; Start runs them.
func NewClusterReader(base *rest.Config, o ReaderOptions) (*ClusterReader, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	if cfg.QPS == 0 {
		cfg.QPS = DefaultAPIQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultAPIBurst
	}
	gpus, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("GpuClaim client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return newClusterReader(kube, gpus, o), nil
}

func newClusterReader(kube kubernetes.Interface, gpus versioned.Interface, o ReaderOptions) *ClusterReader {
	r := &ClusterReader{gpus: gpus, kube: kube}
	if o.Claims {
		gf := gpuinformers.NewSharedInformerFactory(gpus, 0)
		claims, templates, workloads := gf.Gpu().V1().GpuClaims(), gf.Gpu().V1().GpuClaimTemplates(), gf.Gpu().V1().GpuWorkloads()
		r.claims, r.templates, r.workloads = claims.Lister(), templates.Lister(), workloads.Lister()
		r.synced = append(r.synced, claims.Informer().HasSynced, templates.Informer().HasSynced, workloads.Informer().HasSynced)
		kf := informers.NewSharedInformerFactory(kube, 0)
		ns := kf.Core().V1().Namespaces()
		r.namespaces = ns.Lister()
		r.synced = append(r.synced, ns.Informer().HasSynced)
		r.start = append(r.start, gf.Start, kf.Start)
	}
	for _, name := range o.SiblingSchedulerNames {
		// Only the sibling's pods: a field selector keeps the cache to them.
		selector := fields.OneTermEqualSelector("spec.schedulerName", name).String()
		f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = selector }))
		pods := f.Core().V1().Pods()
		r.siblings = append(r.siblings, pods.Lister())
		r.synced = append(r.synced, pods.Informer().HasSynced)
		r.start = append(r.start, f.Start)
	}
	return r
}

// Start runs the informers until ctx ends and waits (up to timeout) for their first list.
func (r *ClusterReader) Start(ctx context.Context, timeout time.Duration) error {
	for _, s := range r.start {
		s(ctx.Done())
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), r.synced...) {
		return fmt.Errorf("the webhook's caches did not sync within %s", timeout)
	}
	return nil
}

// Count is a GPUCounter: the pod's GPU count from its GpuClaim, or from the GpuClaimTemplate
// its claim will be made from (the claim may not exist yet when the pod is created). Shared and
// MIG claims are refused: their pods ask for other resources, which a counter of whole GPUs
// cannot say; the pod and Job webhooks read Request, which does.
func (r *ClusterReader) Count(ctx context.Context, pod *corev1.Pod) (int32, bool, error) {
	spec, what, ok, err := r.claimSpec(ctx, pod)
	if err != nil || !ok {
		return 0, ok, err
	}
	if e := spec.Devices.Exclusivity; e != "" && e != gpuv1.Exclusive {
		return 0, false, fmt.Errorf("%s.exclusivity %s is not supported here with the device plugin (--resource-name); use Exclusive", what, e)
	}
	return spec.Devices.Count, true, nil
}

// Request is a GPURequester: the device-plugin resource and count the pod's claim asks for
// (read as Count reads it): whole GPUs of the webhook's resource for an Exclusive claim, one
// gpu.scheduling/gpu-shared per GPU for a Shared claim, and count MIG devices of the claim's
// profile (gpu.scheduling/mig-<profile>) for a MIG claim.
func (r *ClusterReader) Request(ctx context.Context, pod *corev1.Pod) (GPURequest, bool, error) {
	spec, what, ok, err := r.claimSpec(ctx, pod)
	if err != nil || !ok {
		return GPURequest{}, ok, err
	}
	d := spec.Devices
	switch d.Exclusivity {
	case "", gpuv1.Exclusive:
		return GPURequest{Count: d.Count}, true, nil
	case gpuv1.Shared:
		return GPURequest{Resource: gpuv1.SharedResourceName, Count: d.Count}, true, nil
	case gpuv1.MIG:
		if d.MigProfile == "" {
			return GPURequest{}, false, fmt.Errorf("%s.migProfile is empty: a MIG claim names its profile, such as 1g.10gb", what)
		}
		return GPURequest{Resource: corev1.ResourceName(gpuv1.MIGResourceName(d.MigProfile)), Count: d.Count}, true, nil
	default:
		return GPURequest{}, false, fmt.Errorf("%s.exclusivity %q is not one of Exclusive, Shared, MIG", what, d.Exclusivity)
	}
}

// claimSpec reads the claim spec of pod: its GpuClaim's, the GpuWorkload's it will be made
// from, or its GpuClaimTemplate's; what names the devices field for messages. ok is false when
// the pod names no claim.
func (r *ClusterReader) claimSpec(ctx context.Context, pod *corev1.Pod) (gpuv1.GpuClaimSpec, string, bool, error) {
	var (
		spec gpuv1.GpuClaimSpec
		what string
	)
	if claim, ok := pod.Annotations[gpuv1.AnnotationClaim]; ok {
		c, err := cachedOrGet(ctx, func() (*gpuv1.GpuClaim, error) { return r.claims.GpuClaims(pod.Namespace).Get(claim) },
			func(ctx context.Context) (*gpuv1.GpuClaim, error) {
				return r.gpus.GpuV1().GpuClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
			})
		switch {
		case err == nil:
			spec, what = c.Spec, fmt.Sprintf("GpuClaim %s/%s: spec.devices", pod.Namespace, claim)
		case apierrors.IsNotFound(err):
			// A GpuWorkload creates each replica's pod first and its claim (named after the pod,
			// owned by it) right after, so the claim cannot exist yet: count from the workload's
			// inline claim spec, the one the claim will be made from.
			gw, werr := r.workloadClaimOf(ctx, pod, claim)
			if werr != nil {
				return gpuv1.GpuClaimSpec{}, "", false, fmt.Errorf("metadata.annotations[%s]: GpuClaim %s/%s: %w", gpuv1.AnnotationClaim, pod.Namespace, claim, werr)
			}
			spec, what = *gw.Spec.Claim.Spec, fmt.Sprintf("GpuWorkload %s/%s: spec.claim.spec.devices", pod.Namespace, gw.Name)
		default:
			return gpuv1.GpuClaimSpec{}, "", false, fmt.Errorf("metadata.annotations[%s]: GpuClaim %s/%s: %w", gpuv1.AnnotationClaim, pod.Namespace, claim, err)
		}
	} else if tmpl, ok := claims.Template(pod); ok {
		t, err := cachedOrGet(ctx, func() (*gpuv1.GpuClaimTemplate, error) { return r.templates.GpuClaimTemplates(pod.Namespace).Get(tmpl) },
			func(ctx context.Context) (*gpuv1.GpuClaimTemplate, error) {
				return r.gpus.GpuV1().GpuClaimTemplates(pod.Namespace).Get(ctx, tmpl, metav1.GetOptions{})
			})
		if err != nil {
			return gpuv1.GpuClaimSpec{}, "", false, fmt.Errorf("metadata.annotations[%s]: GpuClaimTemplate %s/%s: %w", gpuv1.AnnotationClaimTemplate, pod.Namespace, tmpl, err)
		}
		spec, what = t.Spec.Spec, fmt.Sprintf("GpuClaimTemplate %s/%s: spec.spec.devices", pod.Namespace, tmpl)
	} else {
		return gpuv1.GpuClaimSpec{}, "", false, nil
	}
	return spec, what, true, nil
}

// workloadClaimOf returns the GpuWorkload that controls pod when the pod's missing claim is the
// one that workload makes for it (its inline claim spec, named after the pod); otherwise the
// claim's NotFound, so that a pod naming a claim that does not exist is still refused.
func (r *ClusterReader) workloadClaimOf(ctx context.Context, pod *corev1.Pod, claim string) (*gpuv1.GpuWorkload, error) {
	notFound := apierrors.NewNotFound(gpuv1.Resource("gpuclaims"), claim)
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "GpuWorkload" || ref.APIVersion != gpuv1.SchemeGroupVersion.String() || claim != pod.Name {
		return nil, notFound
	}
	gw, err := cachedOrGet(ctx, func() (*gpuv1.GpuWorkload, error) { return r.workloads.GpuWorkloads(pod.Namespace).Get(ref.Name) },
		func(ctx context.Context) (*gpuv1.GpuWorkload, error) {
			return r.gpus.GpuV1().GpuWorkloads(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		})
	if err != nil {
		return nil, fmt.Errorf("%w (and its controller GpuWorkload %s: %w)", notFound, ref.Name, err)
	}
	if gw.UID != ref.UID || gw.Spec.Claim.Spec == nil {
		return nil, notFound
	}
	return gw, nil
}

// ForbidsPrivileged reads the namespace's LabelForbidPrivileged.
func (r *ClusterReader) ForbidsPrivileged(ctx context.Context, namespace string) (bool, error) {
	ns, err := cachedOrGet(ctx, func() (*corev1.Namespace, error) { return r.namespaces.Get(namespace) },
		func(ctx context.Context) (*corev1.Namespace, error) {
			return r.kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		})
	if err != nil {
		return false, err
	}
	return ns.Labels[LabelForbidPrivileged] == "true", nil
}

// SiblingPod reports whether the pod namespace/name belongs to one of the sibling schedulers
// (ReaderOptions.SiblingSchedulerNames), and its schedulerName. A pod not in their caches is read
// once, so that a pod the watch has not delivered yet is not taken for a stranger's.
func (r *ClusterReader) SiblingPod(ctx context.Context, namespace, name string) (string, error) {
	for _, l := range r.siblings {
		if p, err := l.Pods(namespace).Get(name); err == nil {
			return p.Spec.SchedulerName, nil
		}
	}
	p, err := r.kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return p.Spec.SchedulerName, nil
}

// cachedOrGet reads from the cache and, on a miss, from the apiserver.
func cachedOrGet[T any](ctx context.Context, cached func() (T, error), get func(context.Context) (T, error)) (T, error) {
	v, err := cached()
	if err == nil {
		return v, nil
	}
	if !apierrors.IsNotFound(err) {
		return v, err
	}
	v, err = get(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}
