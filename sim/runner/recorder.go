package runner

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuinformers "github.com/gpu-scheduler/gpu-scheduler/api/generated/informers/externalversions"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/dra"
	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// podRecord is what the recorder saw of one pod; times are offsets from the recorder's start.
type podRecord struct {
	created, bound, ended       time.Duration
	createdOK, boundOK, endedOK bool
	// seen is when the pod was first seen: for a controller's pod, when the controller had
	// made it (its clock, created, starts at the controller's create call).
	seen   time.Duration
	seenOK bool
	node   string
	ids    []int
	// share is the share of each GPU the scheduler gave a Shared pod (its share annotation).
	share         gpuv1.ResolvedShare
	unschedulable string // last Unschedulable message, if any
	// unschedAt is when the pod was first seen with PodScheduled=False (unschedOK: at all).
	unschedAt time.Duration
	unschedOK bool
	// podName is the pod's own name (a controller's pod stands for a plan slot of another).
	podName string
	// draFallback: the DRA claim was allocated by its prioritized list's last subrequest
	// (any GPUs), not the one-island one.
	draFallback bool
	// gpu-scheduler's binding steps, for the waterfall: preBind is when PreBind began making the
	// pod's GPU leases (their spec.acquireTime, the scheduler's clock on this machine), leased
	// when the last of them was seen, claimed when its GpuClaim's status was first seen naming it
	// (Bound or Reserved).
	preBind, leased, claimed       time.Duration
	preBindOK, leasedOK, claimedOK bool
	// scheduled is when the scheduler's Scheduled event says the pod was bound: the event's
	// eventTime, which the scheduler stamps once its Binding returned, on its own clock (this
	// machine's). Unlike bound, no watch and no work of this process stands between the two.
	scheduled   time.Duration
	scheduledOK bool
}

// recorder watches the workload's pods and the GpuNodeStatus objects and timestamps what it
// sees on one clock, so that bindings, releases and health changes keep their causal order.
type recorder struct {
	start time.Time

	mu       sync.Mutex
	pods     map[string]*podRecord
	bound    int
	finished int
	health   []metrics.HealthChange
	lastHlth map[string][]bool // node -> unhealthy per GPU
	nodes    map[string]*gpuv1.GpuNodeStatus
	// statusEvents counts the GpuNodeStatus adds and updates seen: the agents' write rate.
	statusEvents int64
	changed      chan struct{}
	// lastBind is when a pod was last seen bound; firstUnplaced when a pod was first seen
	// unschedulable (firstUnplacedOK: at all). A fill run stops on them.
	lastBind        time.Duration
	firstUnplaced   time.Duration
	firstUnplacedOK bool
	// claimsSeen are the ResourceClaims made for the workload's pods (DRA run), and
	// claimsAfterEnd those first seen when their pod had already ended.
	claimsSeen     sets.Set[types.UID]
	claimsAfterEnd int
	// slots, for a workload of controllers: the plan's pod names not yet taken, by controller;
	// alias maps the name a controller gave a pod to its slot. Nil for bare pods.
	slots map[string][]string
	alias map[string]string
	// extra holds the controller pods seen beyond their controller's slots.
	extra map[string]bool
	// overLeases are the GPU leases ever seen with their holders' shares (the
	// gpu.scheduling/shares annotation) past the GPU's compute or memory.
	overLeases map[string]bool
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, pods: map[string]*podRecord{}, lastHlth: map[string][]bool{},
		nodes: map[string]*gpuv1.GpuNodeStatus{}, changed: make(chan struct{}, 1), claimsSeen: sets.New[types.UID]()}
}

func (r *recorder) now() time.Duration { return time.Since(r.start) }

func (r *recorder) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// created marks the moment just before a pod's create call.
func (r *recorder) created(name string, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pod(name)
	p.created, p.createdOK = at, true
}

func (r *recorder) pod(name string) *podRecord {
	p := r.pods[name]
	if p == nil {
		p = &podRecord{}
		r.pods[name] = p
	}
	return p
}

// useSlots makes the recorder map the pods of the plan's controllers to the plan's entries, in
// the order it sees them.
func (r *recorder) useSlots(plan []scenario.PodPlan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots, r.alias, r.extra = map[string][]string{}, map[string]string{}, map[string]bool{}
	for _, p := range plan {
		if p.Controller != "" {
			r.slots[p.Controller] = append(r.slots[p.Controller], p.Name)
		}
	}
}

// slotOf returns the plan entry a pod stands for: its own name, or for a controller's pod the
// slot it was given when first seen. ok is false for a pod beyond its controller's slots (a
// replacement); the recorder ignores it. Called with r.mu held.
func (r *recorder) slotOf(pod *corev1.Pod, deleted bool) (string, bool) {
	ctl := pod.Labels[LabelController]
	if r.slots == nil || ctl == "" {
		return pod.Name, true
	}
	if s, ok := r.alias[pod.Name]; ok {
		return s, true
	}
	free := r.slots[ctl]
	if len(free) == 0 || deleted {
		r.extra[pod.Name] = true
		return "", false
	}
	r.slots[ctl], r.alias[pod.Name] = free[1:], free[0]
	return free[0], true
}

func (r *recorder) observePod(pod *corev1.Pod, deleted bool) {
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	name, ok := r.slotOf(pod, deleted)
	if !ok {
		return
	}
	p := r.pod(name)
	if !p.seenOK {
		p.seen, p.seenOK, p.podName = at, true, pod.Name
	}
	if pod.Spec.NodeName != "" && !p.boundOK {
		p.bound, p.boundOK, p.node = at, true, pod.Spec.NodeName
		r.bound++
		r.lastBind = at
	}
	if p.boundOK && len(p.ids) == 0 {
		if v, ok := pod.Annotations[gpuv1.AnnotationGPUIDs]; ok {
			if ids, err := gpuv1.ParseIDs(v); err == nil {
				p.ids = ids
			}
		}
		if sh, err := gpuv1.ParseShare(pod.Annotations[gpuv1.AnnotationShare]); err == nil {
			p.share = sh
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			p.unschedulable = c.Message
			if !p.unschedOK {
				p.unschedAt, p.unschedOK = at, true
			}
			if !p.boundOK && !r.firstUnplacedOK {
				r.firstUnplaced, r.firstUnplacedOK = at, true
			}
		}
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if (deleted || terminal) && !p.endedOK {
		p.ended, p.endedOK = at, true
		r.finished++
	}
	r.notify()
}

func (r *recorder) observeStatus(s *gpuv1.GpuNodeStatus, deleted bool) {
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	node := s.Spec.NodeName
	if node == "" {
		node = s.Name
	}
	if deleted {
		delete(r.nodes, node)
		return
	}
	r.nodes[node] = s
	r.statusEvents++
	prev := r.lastHlth[node]
	cur := make([]bool, len(s.Status.Devices))
	for _, d := range s.Status.Devices {
		id := int(d.ID)
		if id < 0 || id >= len(cur) {
			continue
		}
		cur[id] = d.Health != gpuv1.Healthy
		was := false
		if id < len(prev) {
			was = prev[id]
		}
		if cur[id] != was || (prev == nil && cur[id]) {
			r.health = append(r.health, metrics.HealthChange{Node: node, GPU: id, At: at, Healthy: !cur[id]})
		}
	}
	r.lastHlth[node] = cur
	r.notify()
}

// counts returns how many pods were seen bound and ended.
func (r *recorder) counts() (bound, finished int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bound, r.finished
}

// full reports whether a fill run is over: a pod was found unschedulable and no pod has been
// bound for quiet since then.
func (r *recorder) full(quiet time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstUnplacedOK && r.now()-max(r.firstUnplaced, r.lastBind) >= quiet
}

// published is how many nodes' GpuNodeStatus carries devices (the agent's first status write
// landed), and events how many GpuNodeStatus adds and updates were seen so far.
func (r *recorder) published() (nodes int, events int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.nodes {
		if len(s.Status.Devices) > 0 {
			nodes++
		}
	}
	return nodes, r.statusEvents
}

func (r *recorder) statusCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.nodes)
}

// watch starts the pod and GpuNodeStatus informers, with claims the ResourceClaim informer of
// the DRA run (the GPU IDs are in the claims' allocation results), and with steps the GPU lease
// and GpuClaim informers that time gpu-scheduler's binding steps; they stop with ctx.
func (r *recorder) watch(ctx context.Context, cs kubernetes.Interface, gcs versioned.Interface, namespace string, claims, steps bool) error {
	// The recorder reads phases, times and allocations, never managedFields.
	strip := crcache.TransformStripManagedFields()
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace), informers.WithTransform(strip))
	synced := []cache.InformerSynced{}
	if claims {
		ci := f.Resource().V1().ResourceClaims().Informer()
		if _, err := ci.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.onClaim(o) },
			UpdateFunc: func(_, o any) { r.onClaim(o) },
		}); err != nil {
			return fmt.Errorf("watching ResourceClaims in %s: %w", namespace, err)
		}
		synced = append(synced, ci.HasSynced)
	}
	pi := f.Core().V1().Pods().Informer()
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.onPod(o, false) },
		UpdateFunc: func(_, o any) { r.onPod(o, false) },
		DeleteFunc: func(o any) { r.onPod(o, true) },
	}); err != nil {
		return fmt.Errorf("watching pods in %s: %w", namespace, err)
	}
	gf := gpuinformers.NewSharedInformerFactoryWithOptions(gcs, 0, gpuinformers.WithTransform(strip))
	var lf informers.SharedInformerFactory
	if steps {
		lf = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(LeaseNamespace), informers.WithTransform(strip),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = gpuv1.LabelLeaseNode }))
		li := lf.Coordination().V1().Leases().Informer()
		if _, err := li.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.onLease(o); r.onLeaseShares(o) },
			UpdateFunc: func(_, o any) { r.onLeaseShares(o) },
		}); err != nil {
			return fmt.Errorf("watching GPU leases in %s: %w", LeaseNamespace, err)
		}
		gi := gpuinformers.NewSharedInformerFactoryWithOptions(gcs, 0, gpuinformers.WithNamespace(namespace), gpuinformers.WithTransform(strip)).Gpu().V1().GpuClaims().Informer()
		if _, err := gi.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.onGpuClaim(o) },
			UpdateFunc: func(_, o any) { r.onGpuClaim(o) },
		}); err != nil {
			return fmt.Errorf("watching GpuClaims in %s: %w", namespace, err)
		}
		go gi.Run(ctx.Done())
		synced = append(synced, li.HasSynced, gi.HasSynced)
	}
	si := gf.Gpu().V1().GpuNodeStatuses().Informer()
	if _, err := si.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.onStatus(o, false) },
		UpdateFunc: func(_, o any) { r.onStatus(o, false) },
		DeleteFunc: func(o any) { r.onStatus(o, true) },
	}); err != nil {
		return fmt.Errorf("watching GpuNodeStatus: %w", err)
	}
	f.Start(ctx.Done())
	gf.Start(ctx.Done())
	if lf != nil {
		lf.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), append(synced, pi.HasSynced, si.HasSynced)...) {
		return fmt.Errorf("pod, GpuNodeStatus and ResourceClaim informers did not sync: %w", ctx.Err())
	}
	return nil
}

func (r *recorder) onPod(o any, deleted bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		r.observePod(p, deleted)
	}
}

// onLease times a new GPU lease of gpu-scheduler's: when PreBind began making it, and when it
// was seen. One seen after its pod was bound is not on the binding path. The lease and claim
// watches are separate streams, so a lease may be seen after the claim it preceded: the
// waterfall then counts that step as 0.
func (r *recorder) onLease(o any) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return
	}
	name := l.Labels[gpuv1.LabelPodName]
	if name == "" {
		name = l.Annotations[gpuv1.GroupName+"/pod-name"]
	}
	if name == "" {
		return
	}
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.alias[name]; ok {
		name = a
	}
	p := r.pods[name]
	if p == nil || p.boundOK {
		return
	}
	if l.Spec.AcquireTime != nil {
		began := l.Spec.AcquireTime.Sub(r.start)
		if !p.preBindOK || began < p.preBind {
			p.preBind, p.preBindOK = began, true
		}
	}
	p.leased, p.leasedOK = at, true
}

// onLeaseShares checks a Shared GPU's lease at every change: its holders' shares (the
// gpu.scheduling/shares annotation) must fit the GPU, compute within 100 % and memory within
// the GPU's as its node's agent reported it. A lease seen over-committed is remembered.
func (r *recorder) onLeaseShares(o any) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	v, ok := l.Annotations[gpuv1.AnnotationLeaseShares]
	if !ok {
		return
	}
	shares, _ := gpuv1.ParseLeaseShares(v) // an unreadable entry reserves nothing here
	r.mu.Lock()
	defer r.mu.Unlock()
	if leaseOvercommitted(shares, r.gpuMemoryMiB(l.Labels[gpuv1.LabelLeaseNode], l.Labels[gpuv1.LabelLeaseGPU])) {
		if r.overLeases == nil {
			r.overLeases = map[string]bool{}
		}
		r.overLeases[l.Name] = true
	}
}

// leaseOvercommitted says whether shares sum past 100 % of compute or past memMiB of memory
// (when it is known, > 0).
func leaseOvercommitted(shares map[string]gpuv1.ResolvedShare, memMiB int64) bool {
	var compute, mem int64
	for _, s := range shares {
		compute += int64(s.ComputePercent)
		mem += s.MemoryMiB
	}
	return compute > 100 || (memMiB > 0 && mem > memMiB)
}

// gpuMemoryMiB is the memory of GPU gpu (its ID as text) of node, as its agent reported it;
// 0 when unknown. The caller holds r.mu.
func (r *recorder) gpuMemoryMiB(node, gpu string) int64 {
	st := r.nodes[node]
	id, err := strconv.Atoi(gpu)
	if st == nil || err != nil {
		return 0
	}
	for _, d := range st.Status.Devices {
		if int(d.ID) == id {
			return d.MemoryMiB
		}
	}
	return 0
}

// overcommittedLeases is how many GPU leases were seen over-committed.
func (r *recorder) overcommittedLeases() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.overLeases)
}

// onGpuClaim times the first status that names a pod as the claim's holder.
func (r *recorder) onGpuClaim(o any) {
	c, ok := o.(*gpuv1.GpuClaim)
	if !ok || c.Status.PodName == "" || (c.Status.Phase != gpuv1.ClaimBound && c.Status.Phase != gpuv1.ClaimReserved) {
		return
	}
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	name := c.Status.PodName
	if a, ok := r.alias[name]; ok {
		name = a
	}
	if p := r.pods[name]; p != nil && !p.claimedOK {
		p.claimed, p.claimedOK = at, true
	}
}

func (r *recorder) onStatus(o any, deleted bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if s, ok := o.(*gpuv1.GpuNodeStatus); ok {
		r.observeStatus(s, deleted)
	}
}

// onClaim records the GPU IDs of an allocated ResourceClaim as its pod's (the pod that owns the
// claim kube-controller-manager made from its template). The allocation is written before the
// pod is bound, and the claim is deleted only after the pod ended.
func (r *recorder) onClaim(o any) {
	c, ok := o.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	pod := ""
	for _, ref := range c.OwnerReferences {
		if ref.Kind == "Pod" && ref.Controller != nil && *ref.Controller {
			pod = ref.Name
		}
	}
	if pod == "" {
		return
	}
	r.mu.Lock()
	if !r.claimsSeen.Has(c.UID) {
		r.claimsSeen.Insert(c.UID)
		if p := r.pods[pod]; p != nil && p.endedOK {
			r.claimsAfterEnd++
		}
	}
	r.mu.Unlock()
	if c.Status.Allocation == nil {
		return
	}
	var ids []int
	fallback := false
	for _, res := range c.Status.Allocation.Devices.Results {
		if res.Driver != dra.DriverName {
			continue
		}
		fallback = fallback || strings.HasSuffix(res.Request, "/"+draFallback)
		if id, err := dra.DeviceIndex(res.Device); err == nil {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pod(pod); !p.endedOK {
		p.ids, p.draFallback = ids, fallback
	}
}

// stamping returns, over the controllers' pods seen, the p50 and p99 of the time from the
// controller's create call to the pod seen, and how many pods came beyond the slots.
func (r *recorder) stamping() (p50, p99 time.Duration, extra int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, slot := range r.alias {
		if p := r.pods[slot]; p != nil && p.createdOK && p.seenOK {
			d = append(d, max(p.seen-p.created, 0))
		}
	}
	if len(d) == 0 {
		return 0, 0, len(r.extra)
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.5), at(0.99), len(r.extra)
}

// ReasonScheduled is the reason of the event a scheduler (the stock one and gpu-scheduler,
// through the scheduling framework) records for a pod once its Binding returned.
const ReasonScheduled = "Scheduled"

// observeScheduled takes each pod's binding moment from its scheduler's Scheduled event
// (eventTime: microseconds, the scheduler's clock) and returns how many pods got one. Events
// stamped before this recorder started are an earlier run's, in a namespace of the same name.
func (r *recorder) observeScheduled(events []eventsv1.Event) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for i := range events {
		e := &events[i]
		if e.Reason != ReasonScheduled || e.Regarding.Kind != "Pod" || e.EventTime.Time.Before(r.start) {
			continue
		}
		name := e.Regarding.Name
		if slot, ok := r.alias[name]; ok {
			name = slot // a controller's pod stands for its plan slot
		}
		p := r.pods[name]
		if p == nil || p.scheduledOK {
			continue
		}
		p.scheduled, p.scheduledOK = e.EventTime.Sub(r.start), true
		n++
	}
	return n
}

// listScheduledEvents lists the Scheduled events about pods in namespace, page by page. The
// API server filters them (field selectors on reason and regarding.kind), so the other events
// of the run (one per placement attempt that failed, the controllers') are not sent.
func listScheduledEvents(ctx context.Context, cs kubernetes.Interface, namespace string) ([]eventsv1.Event, error) {
	var out []eventsv1.Event
	opts := metav1.ListOptions{Limit: 1000, FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("reason", ReasonScheduled),
		fields.OneTermEqualSelector("regarding.kind", "Pod")).String()}
	for {
		l, err := cs.EventsV1().Events(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the Scheduled events in %s: %w", namespace, err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// steps returns the plan's pods' timelines for the waterfall, as offsets from t0. With planned
// (the simulator created the plan's pods itself, at plan times on this clock) each pod's
// planned arrival is a step too; pods that controllers made have none.
func (r *recorder) steps(plan []scenario.PodPlan, t0 time.Duration, planned bool) []metrics.Steps {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]metrics.Steps, 0, len(plan))
	for _, pp := range plan {
		p := r.pods[pp.Name]
		if p == nil {
			continue
		}
		out = append(out, metrics.Steps{
			Planned: pp.At - t0, PlannedOK: planned && p.createdOK,
			Created: p.created - t0, CreatedOK: p.createdOK,
			Seen: p.seen - t0, SeenOK: p.seenOK,
			PreBind: p.preBind - t0, PreBindOK: p.preBindOK,
			Leased: p.leased - t0, LeasedOK: p.leasedOK,
			Claimed: p.claimed - t0, ClaimedOK: p.claimedOK,
			Bound: p.bound - t0, BoundOK: p.boundOK,
			Scheduled: p.scheduled - t0, ScheduledOK: p.scheduledOK,
		})
	}
	return out
}

// firstSeen is when the first pod of the workload was seen.
func (r *recorder) firstSeen() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Duration
	ok := false
	for _, p := range r.pods {
		if p.seenOK && (!ok || p.seen < first) {
			first, ok = p.seen, true
		}
	}
	return first, ok
}
