package gpuclaim

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// finishing holds the GPUs of finished pods until their node's kubelet has let go of them, in
// device-plugin mode.
//
// Why: the kubelet's device manager counts a pod's devices as in use until it has finished
// terminating the pod (stopped its containers and sandbox), which comes after it posts the
// pod's Succeeded or Failed phase. A pod placed on those GPUs in between is refused by the
// kubelet (UnexpectedAdmissionError: the GPUs the scheduler chose are not available, and the
// device plugin hands out no others), for good. The kubelet's status after termination
// carries the PodReadyToStartContainers condition False (the sandbox is gone): until a finished
// pod's status says so, its GPUs stay held in the ledger and its leases stay. A pod the kubelet
// never started (refused at admission) and a kubelet that does not report the condition free
// the GPUs at once, as without the device plugin; finishingMax bounds the hold.
//
// The scheduler's own pod informer drops finished pods, so finished pods are watched here,
// through an informer of their own (field selector on status.phase).
type finishing struct {
	lister corelisters.PodLister

	mu      sync.Mutex
	pending map[types.UID]finishingPod
}

type finishingPod struct {
	pod   *v1.Pod
	since time.Time
}

// finishingMax is the longest a finished pod's GPUs are held for the kubelet: a kubelet that
// has not terminated a pod in that time is down, and its pods' GPUs are freed as before.
const finishingMax = 2 * time.Minute

// finishedPhases selects finished pods on the server.
const finishedPhases = "status.phase!=" + string(v1.PodPending) + ",status.phase!=" + string(v1.PodRunning) + ",status.phase!=" + string(v1.PodUnknown)

// kubeletDone tells whether the kubelet has let go of a finished pod's devices, as far as its
// status shows: the PodReadyToStartContainers condition is False (terminated), or absent (never
// started, or a kubelet that does not report it).
func kubeletDone(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReadyToStartContainers {
			return c.Status != v1.ConditionTrue
		}
	}
	return true
}

// holdsAfterFinish tells whether pod, finished, keeps its GPUs until the kubelet reports it
// terminated: in device-plugin mode, for a pod asking for the device plugin's resource.
func (p *Plugin) holdsAfterFinish(pod *v1.Pod) bool {
	return p.finishing != nil && p.admit != nil && claims.PodFinished(pod) && pod.Spec.NodeName != "" &&
		len(p.admit.sizes(pod)) > 0 && !kubeletDone(pod)
}

// newFinishing watches finished pods with a client of its own; nil when the device plugin is
// not in use.
func newFinishing(ctx context.Context, client kubernetes.Interface, onDone func(*v1.Pod)) (*finishing, kubeinformers.SharedInformerFactory, cache.ResourceEventHandlerRegistration, error) {
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTransform(crcache.TransformStripManagedFields()),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = finishedPhases }))
	pods := factory.Core().V1().Pods()
	f := &finishing{lister: pods.Lister(), pending: map[types.UID]finishingPod{}}
	release := func(obj any, gone bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		pod, ok := obj.(*v1.Pod)
		if !ok || (!gone && !kubeletDone(pod)) {
			return
		}
		if f.take(pod.UID) {
			klog.FromContext(ctx).V(4).Info("The kubelet let go of a finished pod's GPUs", "pod", klog.KObj(pod), "deleted", gone)
			onDone(pod)
		}
	}
	reg, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { release(obj, false) },
		UpdateFunc: func(_, obj any) { release(obj, false) },
		DeleteFunc: func(obj any) { release(obj, true) },
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("watching finished pods: %w", err)
	}
	return f, factory, reg, nil
}

// hold keeps pod's GPUs until the kubelet has terminated it. It returns false when the
// finished-pod informer already shows that (its handler ran before this call): then the caller
// frees them itself.
func (f *finishing) hold(pod *v1.Pod, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if latest, err := f.lister.Pods(pod.Namespace).Get(pod.Name); err == nil && latest.UID == pod.UID && kubeletDone(latest) {
		return false
	}
	if _, ok := f.pending[pod.UID]; !ok {
		f.pending[pod.UID] = finishingPod{pod: pod, since: now}
	}
	return true
}

// take removes uid, telling whether it was held.
func (f *finishing) take(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.pending[uid]
	delete(f.pending, uid)
	return ok
}

// held tells whether uid's GPUs are held for the kubelet.
func (f *finishing) held(uid types.UID) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.pending[uid]
	return ok
}

// expired takes the pods held longer than finishingMax.
func (f *finishing) expired(now time.Time) []*v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*v1.Pod
	for uid, e := range f.pending {
		if now.Sub(e.since) >= finishingMax {
			out = append(out, e.pod)
			delete(f.pending, uid)
		}
	}
	return out
}

// runFinishing frees the GPUs of pods whose kubelet has not reported them terminated within
// finishingMax.
func (p *Plugin) runFinishing(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for _, pod := range p.finishing.expired(p.clock.Now()) {
			klog.FromContext(ctx).Info("Freeing a finished pod's GPUs: its kubelet has not reported it terminated", "pod", klog.KObj(pod), "node", pod.Spec.NodeName, "after", finishingMax)
			p.podGone(pod)
		}
	}, 5*time.Second)
}

// finished handles a pod that finished (or left the scheduler's informer): its GPUs are freed
// now, or once its kubelet has let go of them (holdsAfterFinish).
func (p *Plugin) finished(pod *v1.Pod) {
	if p.holdsAfterFinish(pod) && p.finishing.hold(pod, p.clock.Now()) {
		p.admit.forget(pod.UID)
		return
	}
	p.podGone(pod)
}
