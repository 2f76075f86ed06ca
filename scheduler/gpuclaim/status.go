package gpuclaim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// writeClaimStatus applies mutate to a claim's status and writes it through the status
// subresource, only when it changes anything. It starts from the informer's copy (no read)
// and re-reads from the API server only on a conflict.
func (p *Plugin) writeClaimStatus(ctx context.Context, claim *apiv1.GpuClaim, mutate func(*apiv1.GpuClaimStatus)) error {
	_, err := p.updateClaimStatus(ctx, claim, mutate)
	return err
}

// updateClaimStatus is writeClaimStatus, and also reports whether it wrote.
func (p *Plugin) updateClaimStatus(ctx context.Context, claim *apiv1.GpuClaim, mutate func(*apiv1.GpuClaimStatus)) (bool, error) {
	return p.updateClaimStatusIf(ctx, claim, func(st *apiv1.GpuClaimStatus) error {
		mutate(st)
		return nil
	}, claimWrite{})
}

// claimWrite says how updateClaimStatusIf writes. mustExist makes a claim that is gone an
// error rather than nothing to record. fresh judges the first write on the API server's copy
// rather than the informer's: a write that may change nothing on a stale copy (one undoing a
// write just made) would otherwise be skipped.
type claimWrite struct {
	mustExist, fresh bool
}

// updateClaimStatusIf is updateClaimStatus with a mutate that may refuse: its error ends the
// attempt and is returned as is. Every write carries the resourceVersion of the copy mutate
// judged, so a status changed since is read again and judged anew, never overwritten blindly.
func (p *Plugin) updateClaimStatusIf(ctx context.Context, claim *apiv1.GpuClaim, mutate func(*apiv1.GpuClaimStatus) error, how claimWrite) (bool, error) {
	wrote := false
	claims := p.gpuClient.GpuV1().GpuClaims(claim.Namespace)
	cur := claim
	if c, err := p.claimLister.GpuClaims(claim.Namespace).Get(claim.Name); err == nil {
		cur = c
	}
	first := !how.fresh
	var refused error
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			c, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = c
		}
		first = false
		next := cur.DeepCopy()
		if refused = mutate(&next.Status); refused != nil {
			return refused
		}
		next.Status.ObservedGeneration = next.Generation
		if apiequality.Semantic.DeepEqual(cur.Status, next.Status) {
			return nil
		}
		_, err := claims.UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: p.fieldManager})
		wrote = err == nil
		return err
	})
	switch {
	case refused != nil && errors.Is(err, refused):
		return false, refused
	case apierrors.IsNotFound(err) && !how.mustExist:
		return false, nil // the claim is gone; nothing to record
	case err != nil:
		return false, fmt.Errorf("updating status of GpuClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return wrote, nil
}

// statusWriter writes the claim statuses that the scheduling cycle decides (Pending with a
// reason, Failed) from a queue, so the cycle itself never waits on the API server. Only the
// latest wish per claim is kept, and a wish that changes nothing writes nothing.
type statusWriter struct {
	p     *Plugin
	queue workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	wish  map[string]statusWish
	// repairDelay is how long a repair waits before it is written; see bound.
	repairDelay time.Duration
	// pendingGrace is how long a pod waits before its claim's status says why; see pending.
	pendingGrace time.Duration
	// releaseSpread bounds the random wait before a Released status is written; see released.
	releaseSpread time.Duration
	// randWait picks that wait in [0, n); tests fix it.
	randWait func(n time.Duration) time.Duration
	// boundHere holds the pods this scheduler bound and has not released yet; see released.
	boundHere map[types.UID]bool
}

// repairDelay gives the binding cycle's own Bound write (PostBind) time to land and reach the
// claim informer before a repair is judged. The pod's update (its binding) and the claim's
// status update arrive on different informers in no set order: repairing at once would send a
// second status write, or a conflicting one, for most pods.
const repairDelay = 5 * time.Second

// pendingGrace keeps short waits out of the claim's status. Most pods that are turned away
// get GPUs within a second or two, as soon as a running pod ends; writing and then
// overwriting the claim's status for them would cost a large share of a write per pod. The pod's PodScheduled condition and FailedScheduling event say why at once; the
// claim says it once the wait lasts.
const pendingGrace = 5 * time.Second

// releaseSpread spreads the Released writes of schedulers that all saw the same pod go. Every
// scheduler running without leader election releases every pod that ends; writing at once, all
// but the first would send a status update that fails on a conflict. The scheduler that bound
// the pod writes at once; any other waits a random time up to releaseSpread and judges the
// write on its claim informer's copy then, so that a claim the binder has reset costs it
// nothing. A lone scheduler bound its pods itself
// (or, just restarted, its previous run did: those claims show Pending up to a second later).
const releaseSpread = time.Second

type statusWish struct {
	claim  *apiv1.GpuClaim
	pod    *v1.Pod
	phase  apiv1.ClaimPhase
	reason string
	msg    string
	alloc  *apiv1.Allocation
}

func newStatusWriter(p *Plugin) *statusWriter {
	return &statusWriter{
		p:             p,
		queue:         workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		wish:          map[string]statusWish{},
		repairDelay:   repairDelay,
		pendingGrace:  pendingGrace,
		releaseSpread: releaseSpread,
		randWait:      rand.N[time.Duration],
		boundHere:     map[types.UID]bool{},
	}
}

// pending records why a claim's pod is waiting, once it has waited pendingGrace; a pod
// placed or gone by then costs no write. A claim that holds GPUs keeps them: its status is
// not touched.
func (w *statusWriter) pending(claim *apiv1.GpuClaim, pod *v1.Pod, msg string) {
	if claim.Status.Phase == apiv1.ClaimBound || claim.Status.Phase == apiv1.ClaimReserved {
		return
	}
	if claim.Status.Phase == apiv1.ClaimPending && claim.Status.Message == msg {
		return
	}
	w.putAfter(statusWish{claim: claim, pod: pod, phase: apiv1.ClaimPending, reason: "Unschedulable", msg: msg}, w.pendingGrace)
}

// failed records that a claim can never be satisfied as written.
func (w *statusWriter) failed(claim *apiv1.GpuClaim, pod *v1.Pod, msg string) {
	if claim.Status.Phase == apiv1.ClaimFailed && claim.Status.Message == msg {
		return
	}
	w.put(statusWish{claim: claim, pod: pod, phase: apiv1.ClaimFailed, reason: "InvalidClaim", msg: msg})
}

// boundByMe records that this scheduler bound pod uid, so that it writes the pod's release at
// once (see releaseSpread).
func (w *statusWriter) boundByMe(uid types.UID) {
	w.mu.Lock()
	w.boundHere[uid] = true
	w.mu.Unlock()
}

// takeBound reports whether this scheduler bound pod uid, and forgets it: the pod is gone.
func (w *statusWriter) takeBound(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	mine := w.boundHere[uid]
	delete(w.boundHere, uid)
	return mine
}

// released returns a claim to Pending after its pod went away: at once when this scheduler
// bound the pod (mine), otherwise after a random wait of up to releaseSpread (see there).
func (w *statusWriter) released(claim *apiv1.GpuClaim, uid types.UID, msg string, mine bool) {
	var wait time.Duration
	if !mine && w.releaseSpread > 0 {
		wait = w.randWait(w.releaseSpread)
	}
	w.putAfter(statusWish{claim: claim, phase: apiv1.ClaimPending, reason: "Released", msg: msg, pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}}}, wait)
}

// bound repairs the status of a claim whose pod is bound with an allocation the status does
// not show: a scheduler that crashed between binding and writing the status leaves it so. The
// repair waits repairDelay and is then judged on the claim informer's copy, so that a claim
// PostBind has written meanwhile costs no write.
func (w *statusWriter) bound(claim *apiv1.GpuClaim, pod *v1.Pod, a apiv1.Allocation) {
	if claim.Status.Phase == apiv1.ClaimBound && claim.Status.PodUID == string(pod.UID) && claim.Status.Allocated == a.String() {
		return
	}
	w.putAfter(statusWish{claim: claim, pod: pod, phase: apiv1.ClaimBound, reason: "Repaired", alloc: &a,
		msg: fmt.Sprintf("GPUs %s on node %s allocated to pod %s", apiv1.FormatIDs(a.IDs), a.Node, pod.Name)}, w.repairDelay)
}

func (w *statusWriter) put(s statusWish) { w.putAfter(s, 0) }

// putAfter records s as the claim's latest wish and queues it to be written after delay. No
// other wish replaces a release still waiting to be written: a repair is for the pod that went
// away after it was bound, and a reason for the claim's next pod, made while the release waits,
// would otherwise be judged on a status that still names the pod gone (and be dropped with the
// release); that pod's next attempt makes its reason again.
func (w *statusWriter) putAfter(s statusWish, delay time.Duration) {
	key := claims.Key(s.claim.Namespace, s.claim.Name)
	w.mu.Lock()
	if old, ok := w.wish[key]; ok && old.reason == "Released" && s.reason != "Released" {
		w.mu.Unlock()
		return
	}
	w.wish[key] = s
	w.mu.Unlock()
	if delay > 0 {
		w.queue.AddAfter(key, delay)
		return
	}
	w.queue.Add(key)
}

func (w *statusWriter) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for w.next(ctx) {
	}
}

func (w *statusWriter) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	s, ok := w.wish[key]
	delete(w.wish, key)
	w.mu.Unlock()
	if !ok {
		w.queue.Forget(key)
		return true
	}
	if s.alloc != nil {
		if _, live := w.p.pods.get(s.pod.UID); !live {
			w.queue.Forget(key)
			return true // the pod went away meanwhile; its release resets the claim
		}
	}
	if s.reason == "Unschedulable" && w.p.pods.wasDeleted(s.pod.UID) {
		w.queue.Forget(key)
		return true // the pod went away during its grace: there is nothing to explain
	}
	wrote, err := w.p.updateClaimStatus(ctx, s.claim, func(st *apiv1.GpuClaimStatus) {
		switch {
		case s.alloc != nil:
			setAllocation(st, apiv1.ClaimBound, s.pod, *s.alloc, podMIG(s.pod), s.msg)
			return
		case s.reason == "Released":
			// Only the pod that held the claim may release it.
			if st.PodUID != string(s.pod.UID) {
				return
			}
			*st = apiv1.GpuClaimStatus{}
		case st.Phase == apiv1.ClaimBound || st.Phase == apiv1.ClaimReserved:
			return // the claim got GPUs since this wish was made
		}
		st.Phase = s.phase
		st.Message = s.msg
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Writing GpuClaim status", "claim", key)
		w.mu.Lock()
		if _, newer := w.wish[key]; !newer {
			w.wish[key] = s
		}
		w.mu.Unlock()
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	// The event goes with the write: a reason the claim no longer needs (its pod was placed
	// during the grace) is not reported either.
	if rec := w.p.handle.EventRecorder(); wrote && rec != nil && s.reason != "Released" && s.alloc == nil && s.pod != nil && s.pod.Name != "" {
		rec.Eventf(s.claim, s.pod, v1.EventTypeWarning, s.reason, "Scheduling", s.msg)
	}
	return true
}
