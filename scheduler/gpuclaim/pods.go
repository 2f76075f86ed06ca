package gpuclaim

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
)

// podInfo is what the plugin needs to know of a live pod.
type podInfo struct {
	UID       types.UID
	Namespace string
	Name      string
	// Claim is "namespace/name" of the GpuClaim the pod names; empty when it names none.
	Claim string
}

// podTracker knows every live (not finished) pod by UID, from the scheduler's pod informer;
// it tells whether a claim's holder or a lease's holder still exists. It also remembers the
// UIDs of pods it saw go away: a UID never comes back, so a lease naming one is certainly
// stale and may be taken over at once (see acquire), whereas a UID it has never seen may
// belong to a pod another scheduler just bound and this informer has not caught up with.
type podTracker struct {
	mu      sync.RWMutex
	pods    map[types.UID]podInfo
	deleted map[types.UID]time.Time
	// byClaim counts the live pods naming each claim: a gang is complete when each of its
	// claims has one.
	byClaim map[string]int
}

// deletedMemory is how long gone pods are remembered: longer than any lease release takes.
const deletedMemory = 15 * time.Minute

func newPodTracker() *podTracker {
	return &podTracker{pods: map[types.UID]podInfo{}, deleted: map[types.UID]time.Time{}, byClaim: map[string]int{}}
}

// wasDeleted reports whether the pod was seen going away.
func (t *podTracker) wasDeleted(uid types.UID) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.deleted[uid]
	return ok
}

// observe records a live pod and reports whether it is new or now names another claim.
func (t *podTracker) observe(pod *v1.Pod) (changed bool) {
	info := podInfo{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
	if name, ok := claimName(pod); ok && name != "" {
		info.Claim = claims.Key(pod.Namespace, name)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old, seen := t.pods[pod.UID]
	if seen && old == info {
		return false
	}
	t.uncountLocked(old)
	t.pods[pod.UID] = info
	if info.Claim != "" {
		t.byClaim[info.Claim]++
	}
	return true
}

func (t *podTracker) uncountLocked(info podInfo) {
	if info.Claim == "" {
		return
	}
	if t.byClaim[info.Claim]--; t.byClaim[info.Claim] <= 0 {
		delete(t.byClaim, info.Claim)
	}
}

// claimHasPod reports whether a live pod names the claim "namespace/name".
func (t *podTracker) claimHasPod(key string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byClaim[key] > 0
}

func (t *podTracker) gone(uid types.UID) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.pods[uid]; ok {
		t.uncountLocked(old)
	}
	delete(t.pods, uid)
	t.deleted[uid] = now
	if len(t.deleted)%1024 == 0 {
		for u, at := range t.deleted {
			if now.Sub(at) > deletedMemory {
				delete(t.deleted, u)
			}
		}
	}
}

func (t *podTracker) get(uid types.UID) (podInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.pods[uid]
	return p, ok
}

func typesUID(s string) types.UID { return types.UID(s) }

// relaxations remembers, per pod, how PreFilter may widen its offer next time: the lowest fit
// tier it may offer, and whether the cap on the number of offered nodes is lifted.
type relaxations struct {
	mu    sync.Mutex
	tiers map[types.UID]relaxation
}

type relaxation struct {
	tier     ledger.Fit
	uncapped bool
}

func newRelaxations() *relaxations { return &relaxations{tiers: map[types.UID]relaxation{}} }

// tier is the lowest tier PreFilter may offer a pod, and whether it offers every node of its
// tiers instead of the capped best ones.
func (r *relaxations) tier(uid types.UID) (ledger.Fit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.tiers[uid]; ok {
		return t.tier, t.uncapped
	}
	return ledger.FitIslandBandwidth, false
}

// relax widens a pod's next offer after every offered node failed: first every node of the
// same tiers when the offer was capped, then the tier below the one that failed; false when
// nothing is left to widen.
func (r *relaxations) relax(uid types.UID, failed ledger.Fit, capped bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if capped && !r.tiers[uid].uncapped {
		r.tiers[uid] = relaxation{tier: failed, uncapped: true}
		return true
	}
	if failed <= ledger.FitNode {
		return false
	}
	r.tiers[uid] = relaxation{tier: failed - 1, uncapped: r.tiers[uid].uncapped}
	return true
}

func (r *relaxations) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.tiers, uid)
	r.mu.Unlock()
}

// waitingPods are the pods this plugin turned away, by UID, so that the plugin can send them
// back to the active queue when its own informers see a change that may help them (activator).
// The framework's queueing hints fire on the scheduler's informers, which can run ahead of the
// plugin's: a pod requeued by a hint may be judged on the plugin's older view and rejected
// again, with nothing left to requeue it. Activating from the plugin's own handlers closes that
// gap.
type waitingPods struct {
	mu   sync.Mutex
	pods map[types.UID]waitingPod
}

type waitingPod struct {
	pod   *v1.Pod
	claim string // namespace/name
	gang  string // namespace/gangRef of the claim; empty outside a gang
}

func newWaitingPods() *waitingPods { return &waitingPods{pods: map[types.UID]waitingPod{}} }

func (w *waitingPods) add(pod *v1.Pod, claim, gang string) {
	w.mu.Lock()
	w.pods[pod.UID] = waitingPod{pod: pod, claim: claim, gang: gang}
	w.mu.Unlock()
}

// addIfAbsent registers a pod unless it already waits (keeping the gang it waits with).
func (w *waitingPods) addIfAbsent(pod *v1.Pod, claim string) {
	w.mu.Lock()
	if _, ok := w.pods[pod.UID]; !ok {
		w.pods[pod.UID] = waitingPod{pod: pod, claim: claim}
	}
	w.mu.Unlock()
}

func (w *waitingPods) remove(uid types.UID) {
	w.mu.Lock()
	delete(w.pods, uid)
	w.mu.Unlock()
}

// select returns the waiting pods for which keep is true, keyed as the framework's Activate wants.
func (w *waitingPods) selectPods(keep func(waitingPod) bool) map[string]*v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]*v1.Pod{}
	for _, wp := range w.pods {
		if keep(wp) {
			out[wp.pod.Namespace+"/"+wp.pod.Name] = wp.pod
		}
	}
	return out
}

// pendingStats counts the waiting pods and the age of the oldest, for the pending-claims
// gauges; now is the plugin's clock.
func (w *waitingPods) pendingStats(now time.Time) (int, float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	oldest := 0.0
	for _, wp := range w.pods {
		if created := wp.pod.CreationTimestamp.Time; !created.IsZero() {
			oldest = max(oldest, now.Sub(created).Seconds())
		}
	}
	return len(w.pods), oldest
}
