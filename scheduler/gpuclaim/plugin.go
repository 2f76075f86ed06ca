// Package gpuclaim is the GpuClaimPlugin: a kube-scheduler plugin that picks the node and the
// exact GPU IDs for pods naming a GpuClaim, and locks each GPU with a coordination Lease
// gpu-{node}-{id} so that no two pods ever share an exclusive GPU, whatever number of
// schedulers race.
//
// One file per extension point: preenqueue.go (with several scheduler processes, each queues
// only its share of the pods; scheduler/peers), prefilter.go, filter.go, score.go, reserve.go, permit.go,
// prebind.go, bind.go, postbind.go, postfilter.go, and events.go for the queueing hints;
// gang.go keeps the claims of a gang all or nothing; leases.go holds the lease operations,
// lifecycle.go releases GPUs when pods go.
//
// What the plugin decides with lives in claims/ledger, free of the framework so that kubectl gpu
// judges nodes with the same code: the in-memory ledger of who holds which GPU, the node
// judgement Filter returns (ledger.Judge), the candidate offer, the gang fit, a pod's
// gpu-scheduling-map entry (ledger.PinOf) and the dry run. This package is the framework glue:
// informers, extension points, leases and status writes.
package gpuclaim

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuinformers "github.com/gpu-scheduler/gpu-scheduler/api/generated/informers/externalversions"
	gpulisters "github.com/gpu-scheduler/gpu-scheduler/api/generated/listers/api/v1"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/peers"
)

var registerScheme sync.Once

// Name is the plugin's name in the scheduler configuration.
const Name = "GpuClaimPlugin"

// stateKey is where PreFilter leaves its findings for the later extension points.
const stateKey fwk.StateKey = Name

var (
	_ fwk.PreFilterPlugin     = &Plugin{}
	_ fwk.PreFilterExtensions = &Plugin{}
	_ fwk.FilterPlugin        = &Plugin{}
	_ fwk.PostFilterPlugin    = &Plugin{}
	_ fwk.ScorePlugin         = &Plugin{}
	_ fwk.PreScorePlugin      = &Plugin{}
	_ fwk.ReservePlugin       = &Plugin{}
	_ fwk.PermitPlugin        = &Plugin{}
	_ fwk.PreBindPlugin       = &Plugin{}
	_ fwk.BindPlugin          = &Plugin{}
	_ fwk.PostBindPlugin      = &Plugin{}
	_ fwk.EnqueueExtensions   = &Plugin{}
)

// Plugin is the GpuClaimPlugin.
type Plugin struct {
	handle fwk.Handle
	// fieldManager names this scheduler in the managedFields of the claim statuses and GPU
	// leases it writes: its profile name, so that with two releases side by side each write
	// says which scheduler made it.
	fieldManager string
	args         *Args
	strategy     allocator.Strategy
	// roundRobin remembers where the last round-robin pod went (score.go).
	roundRobin roundRobinCursor
	// demand is the request shapes of the claims placed lately, for fragmentation (fragmentation.go).
	demand demandHistogram

	freshness time.Duration
	clock     clock.Clock

	client      kubernetes.Interface
	gpuClient   versioned.Interface
	claimLister gpulisters.GpuClaimLister
	// templateLister reads the GpuClaimTemplates the plugin makes its pods' claims from.
	templateLister gpulisters.GpuClaimTemplateLister
	// claimIndexer finds the claims of a gang (gangIndex).
	claimIndexer cache.Indexer
	leaseLister  coordinationlisters.LeaseLister
	// foreignLister sees the leases without the project's labels; foreign holds the GPU leases
	// among them that the scheduler did not make (foreign.go).
	foreignLister coordinationlisters.LeaseLister
	foreign       *foreignLeases
	// leaseIndexer finds a pod's leases by holder UID without scanning every lease.
	leaseIndexer cache.Indexer

	ledger *ledger.Ledger
	// proc is what this plugin shares with the others of its process (process.go).
	proc *Process
	pods *podTracker
	// relaxed remembers pods whose last attempt found no node in the best fit tier, so that
	// the next attempt considers the next tier (see postfilter.go).
	relaxed *relaxations
	status  *statusWriter

	// releaseQueue releases the leases and claims of pods that went away (lifecycle.go).
	// waiting and changed drive activate.go.
	waiting *waitingPods
	changed changedNodes

	// peers are the other gpu-scheduler processes serving this profile (preenqueue.go); nil
	// in tests without a profile. joinPeers makes this process one of them; deferred are the
	// pods it leaves to them.
	peers     *peers.Membership
	joinPeers func()
	deferred  *deferredPods
	// admit binds pods of one GPU count to a node one at a time (admitgate.go), and
	// finishing holds a finished pod's GPUs until its kubelet has let go of them
	// (finishing.go); both nil without the device plugin.
	admit     *admitGate
	finishing *finishing
	// domains groups nodes by topology level; holds are the nodes gangs hold in their domain
	// (domains.go).
	domains *domainIndex
	holds   *domainHolds
	// createSlots bounds the GPU lease creates made in parallel (leases.go).
	createSlots chan struct{}

	releaseQueue workqueue.TypedRateLimitingInterface[types.UID]
	releaseMu    sync.Mutex
	releases     map[types.UID]podRef
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }

// newPlugin is Process.New with an injectable GPU clientset and clock for tests.
func newPlugin(ctx context.Context, obj runtime.Object, h fwk.Handle, gpuClient versioned.Interface, clk clock.Clock, proc *Process) (*Plugin, error) {
	logger := klog.FromContext(ctx).WithName(Name)
	// Events about GpuClaims go through the scheduler's recorder, whose scheme must know them.
	registerScheme.Do(func() { utilruntime.Must(apiv1.AddToScheme(clientgoscheme.Scheme)) })
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	strategy, _ := allocator.ParseStrategy(*args.NodeStrategy) // validated
	if gpuClient == nil {
		if h.KubeConfig() == nil {
			return nil, fmt.Errorf("%s: the framework handle has no kubeconfig to build a GpuClaim client from", Name)
		}
		// Custom resources have no protobuf encoding, and the scheduler's own client config
		// defaults to protobuf (clientConnection.contentType): writes would fail to encode.
		cfg := rest.CopyConfig(h.KubeConfig())
		cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
		gpuClient, err = versioned.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: building the gpu.scheduling client: %w", Name, err)
		}
	}
	p := &Plugin{
		handle:       h,
		args:         args,
		strategy:     strategy,
		freshness:    time.Duration(*args.StatusFreshnessSeconds) * time.Second,
		clock:        clk,
		client:       h.ClientSet(),
		gpuClient:    gpuClient,
		ledger:       ledger.New(),
		pods:         newPodTracker(),
		relaxed:      newRelaxations(),
		releaseQueue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]()),
		releases:     map[types.UID]podRef{},
		waiting:      newWaitingPods(),
		deferred:     newDeferredPods(),
		createSlots:  make(chan struct{}, parallelLeaseCreates),
		foreign:      newForeignLeases(),
		admit:        newAdmitGate(ptr.Deref(args.DeviceResourceName, "")),
	}
	p.ledger.SetClock(clk.Now)
	p.domains = newDomainIndex(args.TopologyLevels)
	p.holds = newDomainHolds(clk)
	p.status = newStatusWriter(p)
	p.proc = proc
	p.fieldManager = fieldManagerFor(h)

	// The informers drop managedFields, as kube-scheduler's own pod informer does: nothing here
	// reads them, and at 5,000 nodes the leases' and claims' entries are memory for nothing.
	// Updates made from these copies keep the stored managedFields (the server keeps them when
	// a write omits them).
	gpuFactory := gpuinformers.NewSharedInformerFactoryWithOptions(gpuClient, 0,
		gpuinformers.WithTransform(crcache.TransformStripManagedFields()))
	claims := gpuFactory.Gpu().V1().GpuClaims()
	p.claimLister = claims.Lister()
	if err := claims.Informer().AddIndexers(cache.Indexers{gangIndex: claimGangIndex}); err != nil {
		return nil, fmt.Errorf("%s: indexing GpuClaims by gang: %w", Name, err)
	}
	p.claimIndexer = claims.Informer().GetIndexer()
	// The ledger is filled by these handlers, so New waits for each handler to have seen its
	// informer's initial list, not only for the informers' caches: a cache can be synced while
	// its handler is still behind, and a ledger without the agents' statuses or the existing
	// leases would turn pods away (or try GPUs that are held) right after a start.
	var handlers []cache.ResourceEventHandlerRegistration
	reg, err := claims.Informer().AddEventHandler(p.claimHandler(ctx))
	if err != nil {
		return nil, fmt.Errorf("%s: watching GpuClaims: %w", Name, err)
	}
	handlers = append(handlers, reg)
	templates := gpuFactory.Gpu().V1().GpuClaimTemplates()
	p.templateLister = templates.Lister()
	if _, err := templates.Informer().AddEventHandler(p.templateHandler(ctx)); err != nil {
		return nil, fmt.Errorf("%s: watching GpuClaimTemplates: %w", Name, err)
	}
	nodeStatuses := gpuFactory.Gpu().V1().GpuNodeStatuses()
	if reg, err = nodeStatuses.Informer().AddEventHandler(p.nodeStatusHandler(ctx)); err != nil {
		return nil, fmt.Errorf("%s: watching GpuNodeStatuses: %w", Name, err)
	}
	handlers = append(handlers, reg)

	leaseFactory := kubeinformers.NewSharedInformerFactoryWithOptions(p.client, 0,
		kubeinformers.WithNamespace(*args.LeaseNamespace),
		kubeinformers.WithTransform(crcache.TransformStripManagedFields()),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = apiv1.LabelLeaseNode
		}))
	leases := leaseFactory.Coordination().V1().Leases()
	p.leaseLister = leases.Lister()
	if err := leases.Informer().AddIndexers(cache.Indexers{holderIndex: leaseHolders}); err != nil {
		return nil, fmt.Errorf("%s: indexing leases: %w", Name, err)
	}
	p.leaseIndexer = leases.Informer().GetIndexer()
	if reg, err = leases.Informer().AddEventHandler(p.leaseHandler(ctx)); err != nil {
		return nil, fmt.Errorf("%s: watching leases: %w", Name, err)
	}
	handlers = append(handlers, reg)

	foreignFactory := newForeignInformerFactory(p.client, *args.LeaseNamespace)
	foreignLeases := foreignFactory.Coordination().V1().Leases()
	p.foreignLister = foreignLeases.Lister()
	if reg, err = foreignLeases.Informer().AddEventHandler(p.foreignHandler(ctx)); err != nil {
		return nil, fmt.Errorf("%s: watching the leases without gpu.scheduling labels: %w", Name, err)
	}
	handlers = append(handlers, reg)

	livenessFactory := newLivenessInformerFactory(p.client, *args.LeaseNamespace)
	if reg, err = livenessFactory.Coordination().V1().Leases().Informer().AddEventHandler(p.livenessHandler(ctx)); err != nil {
		return nil, fmt.Errorf("%s: watching the agents' liveness leases: %w", Name, err)
	}
	handlers = append(handlers, reg)

	var finishingFactory kubeinformers.SharedInformerFactory
	if p.admit != nil {
		if p.finishing, finishingFactory, reg, err = newFinishing(ctx, p.client, p.podGone); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		handlers = append(handlers, reg)
	}

	// Nodes come from the scheduler's own informer too. The framework starts that factory
	// after the plugins are made, so the index is not waited for here: until it has the
	// nodes, gangs with gangTopology find no domain and wait, and no pod is kept off a domain.
	if _, err := h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(p.domains.handler()); err != nil {
		return nil, fmt.Errorf("%s: watching nodes: %w", Name, err)
	}

	// Pods come from the scheduler's own informer (it excludes finished pods, so a pod that
	// completes arrives here as a delete).
	if _, err := h.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(p.podHandler(ctx)); err != nil {
		return nil, fmt.Errorf("%s: watching pods: %w", Name, err)
	}

	gpuFactory.Start(ctx.Done())
	leaseFactory.Start(ctx.Done())
	livenessFactory.Start(ctx.Done())
	foreignFactory.Start(ctx.Done())
	if finishingFactory != nil {
		finishingFactory.Start(ctx.Done())
	}
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for typ, ok := range gpuFactory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("%s: %v informer did not sync; are the gpu.scheduling CRDs installed and may the scheduler list them?", Name, typ)
		}
	}
	if finishingFactory != nil {
		for typ, ok := range finishingFactory.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return nil, fmt.Errorf("%s: %v informer of finished pods did not sync; may the scheduler list pods?", Name, typ)
			}
		}
	}
	for _, f := range []kubeinformers.SharedInformerFactory{leaseFactory, livenessFactory, foreignFactory} {
		for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return nil, fmt.Errorf("%s: %v informer did not sync in namespace %q; may the scheduler list leases there?", Name, typ, *args.LeaseNamespace)
			}
		}
	}
	for _, h := range handlers {
		if !cache.WaitForCacheSync(syncCtx.Done(), h.HasSynced) {
			return nil, fmt.Errorf("%s: the GPU ledger was not filled from the informers within 2 minutes", Name)
		}
	}
	logger.Info("GPU ledger rebuilt from leases", "leaseNamespace", *args.LeaseNamespace, "nodeStrategy", strategy)
	if err := p.startPeers(ctx); err != nil {
		return nil, err
	}
	// The fleet gauges read this plugin's state at scrape time from now on.
	proc.adopt(p)

	go p.status.run(ctx)
	go p.runLifecycle(ctx)
	go p.runActivator(ctx)
	if p.finishing != nil {
		go p.runFinishing(ctx)
	}
	return p, nil
}

// nodeStatusHandler keeps the ledger's nodes: the GpuNodeStatuses of this scheduler's pool.
// A status labelled for another scheduler (that release's agent runs on the node) is left
// out, as if the node had none: its GPUs are locked in the other release's lease namespace,
// which this scheduler does not see. A status that is not named after the node it describes
// (ledger.StatusNode) is left out too, and said so in the log.
func (p *Plugin) nodeStatusHandler(ctx context.Context) cache.ResourceEventHandler {
	logger := klog.FromContext(ctx)
	valid := func(gns *apiv1.GpuNodeStatus, report bool) bool {
		_, err := ledger.StatusNode(gns)
		if err != nil && report {
			logger.Error(err, "Ignoring a GpuNodeStatus", "gpuNodeStatus", gns.Name, "nodeName", gns.Spec.NodeName)
		}
		return err == nil
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if gns, ok := obj.(*apiv1.GpuNodeStatus); ok && p.inPool(gns) && valid(gns, true) {
				p.ledger.SetStatus(gns)
				p.gpusChanged(gns.Name)
			}
		},
		UpdateFunc: func(old, obj any) {
			gns, ok := obj.(*apiv1.GpuNodeStatus)
			if !ok {
				return
			}
			prev, _ := old.(*apiv1.GpuNodeStatus)
			if !p.inPool(gns) || !valid(gns, prev == nil || prev.Spec.NodeName != gns.Spec.NodeName) {
				p.ledger.DeleteStatus(gns.Name)
				return
			}
			before, after := p.ledger.SetStatus(gns)
			if prev != nil && (!p.inPool(prev) || !valid(prev, false) || p.mayHelp(prev, gns) || p.becameFresh(before, after)) {
				p.gpusChanged(gns.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if gns, ok := obj.(*apiv1.GpuNodeStatus); ok {
				p.ledger.DeleteStatus(gns.Name)
			}
		},
	}
}

// claimHandler sends the pods waiting for a claim back to the queue when the claim appears or
// changes (its spec, or its holder).
func (p *Plugin) claimHandler(ctx context.Context) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := obj.(*apiv1.GpuClaim); ok {
				p.activateClaim(ctx, claims.Key(c.Namespace, c.Name))
				if g := ledger.GangKey(c); g != "" {
					p.activateGang(ctx, g) // one more member may complete the gang
				}
			}
		},
		UpdateFunc: func(old, obj any) {
			c, ok := obj.(*apiv1.GpuClaim)
			prev, ok2 := old.(*apiv1.GpuClaim)
			if ok && ok2 && (c.Generation != prev.Generation || c.Status.PodUID != prev.Status.PodUID) {
				p.activateClaim(ctx, claims.Key(c.Namespace, c.Name))
			}
			if ok && ok2 && c.Generation != prev.Generation {
				p.holds.release(ledger.GangKey(prev)) // its gang's topology or members may have changed
			}
		},
		// A pod made again under the name of one that went (a StatefulSet's) waits for the
		// earlier pod's claim to be collected; then the plugin makes its own.
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*apiv1.GpuClaim); ok {
				p.activateClaim(ctx, claims.Key(c.Namespace, c.Name))
				// A gang without one of its members holds no nodes: the next attempt of a
				// complete gang chooses again.
				p.holds.release(ledger.GangKey(c))
			}
		},
	}
}

func (p *Plugin) leaseHandler(ctx context.Context) cache.ResourceEventHandler {
	logger := klog.FromContext(ctx)
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observeLease(logger, nil, obj) },
		UpdateFunc: func(old, obj any) { p.observeLease(logger, old, obj) },
		DeleteFunc: func(obj any) {
			if p.forgetForeign(obj) {
				return // a half-labelled lease the scheduler did not make (foreign.go)
			}
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				if ref, ok := parseLease(l); ok {
					for _, uid := range ref.holders {
						p.ledger.RemoveLeaseHold(uid, ref.lease)
					}
					p.gpusChanged(ref.node)
				}
			}
		},
	}
}

// observeLease records the holders a lease names, and drops those an update removed. A holder
// the pod tracker saw go away holds nothing: its UID never comes back, and the lease is stale
// (PreBind deletes it before creating its own). Its lease can reach this informer after the
// pod's delete, when the pod went while its leases were being created or the lease watch lags
// the pod watch; recording it then would hold the GPUs of a pod already freed by its delete
// (freeInLedger) until the release queue deletes the lease, and turn away the pods the delete
// just requeued for them.
func (p *Plugin) observeLease(logger klog.Logger, old, obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if p.observeForeign(logger, obj) {
		return // a half-labelled lease the scheduler did not make (foreign.go)
	}
	if ol, ok := old.(*coordinationv1.Lease); ok {
		if _, _, wasForeign := ledger.ForeignRef(ol); wasForeign {
			p.forgetForeign(ol)
		}
	}
	ref, ok := parseLease(l)
	if !ok {
		return
	}
	now := map[types.UID]bool{}
	for _, uid := range ref.holders {
		now[uid] = true
		if p.pods.wasDeleted(uid) {
			continue
		}
		p.ledger.AddLeaseHold(uid, ref.lease)
	}
	if ol, ok := old.(*coordinationv1.Lease); ok {
		if oref, ok := parseLease(ol); ok {
			for _, uid := range oref.holders {
				if !now[uid] {
					p.ledger.RemoveLeaseHold(uid, oref.lease)
				}
			}
		}
	}
}

// podHandler keeps the pod tracker and the ledger in step with pods, and releases the GPUs of
// pods that are deleted (also force-deleted) or finish.
func (p *Plugin) podHandler(ctx context.Context) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observePod(ctx, obj) },
		UpdateFunc: func(_, obj any) { p.observePod(ctx, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				p.finished(pod) // deleted, or finished (the informer drops finished pods)
			}
		},
	}
}

func (p *Plugin) observePod(ctx context.Context, obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	if claims.PodFinished(pod) {
		p.finished(pod)
		return
	}
	p.admit.observe(pod)
	if pod.Spec.NodeName != "" {
		p.deferred.remove(pod.UID)
	}
	if p.pods.observe(pod) && pod.Spec.NodeName == "" {
		if g := p.gangOfPod(pod); g != "" {
			p.activateGang(ctx, g) // a member's pod arrived: the gang may be complete
		}
	}
	// A bound pod carrying an allocation holds those GPUs even if its leases were lost.
	if alloc, ok := ledger.BoundAllocation(pod); ok {
		shared := false
		if name, ok := claimName(pod); ok {
			if c, err := p.claimLister.GpuClaims(pod.Namespace).Get(name); err == nil {
				shared = c.Spec.Devices.Exclusivity == apiv1.Shared
				// Repair only our own claims: another release's scheduler keeps its own.
				if p.ours(pod) {
					p.status.bound(c, pod, alloc)
				}
			}
		}
		p.ledger.AddPodHold(pod, alloc, shared)
	}
}

// podGone releases everything a pod held: the ledger at once, the leases and the claim status
// through the lifecycle queue.
func (p *Plugin) podGone(pod *v1.Pod) {
	p.pods.gone(pod.UID)
	p.admit.forget(pod.UID)
	p.relaxed.forget(pod.UID)
	p.waiting.remove(pod.UID)
	p.deferred.remove(pod.UID)
	if node, _ := p.ledger.HoldsOf(pod.UID); node != "" {
		p.gpusChanged(node)
	}
	p.ledger.Forget(pod.UID)
	// Only our own pod's claim goes back to Pending here: another release's claim is its
	// scheduler's to release (and that pod's leases are in the other release's namespace).
	ref := podRef{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
	if p.ours(pod) {
		ref.Claim = claimNameOrEmpty(pod)
	}
	p.enqueueRelease(ref)
}

// fieldManagerFor is the field manager of a plugin under handle h: the profile's scheduler
// name, or gpu-scheduler where that is no valid manager name (longer than 128 characters).
func fieldManagerFor(h fwk.Handle) string {
	if h == nil || h.ProfileName() == "" || len(h.ProfileName()) > 128 {
		return apiv1.SchedulerName
	}
	return h.ProfileName()
}

// inPool reports whether a node's status is published for this profile's scheduler (the
// agent's --scheduler-name, label gpu.scheduling/scheduler-name). A status without the label
// comes from an agent older than it and counts as ours.
func (p *Plugin) inPool(gns *apiv1.GpuNodeStatus) bool {
	owner := gns.Labels[apiv1.LabelSchedulerName]
	return owner == "" || p.handle == nil || owner == p.handle.ProfileName()
}

// ours reports whether pod is scheduled by this profile (the release's --scheduler-name,
// claims.ScheduledBy). The scheduler's pod informer sees every pod; two releases side by side
// must not write each other's claims. A pod without a scheduler name never reaches a real
// scheduler (the apiserver stores it with default-scheduler, which claims.ScheduledBy counts as
// no release's); the plugin's tests make such pods and mean this profile.
func (p *Plugin) ours(pod *v1.Pod) bool {
	return pod.Spec.SchedulerName == "" || p.handle == nil || claims.ScheduledBy(pod.Spec.SchedulerName, p.handle.ProfileName())
}

// leasesOf lists the GPU leases naming a pod, from the informer cache.
func (p *Plugin) leasesOf(uid types.UID) ([]*coordinationv1.Lease, error) {
	objs, err := p.leaseIndexer.ByIndex(holderIndex, string(uid))
	if err != nil {
		return nil, fmt.Errorf("listing leases of pod UID %s: %w", uid, err)
	}
	out := make([]*coordinationv1.Lease, 0, len(objs))
	for _, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok {
			out = append(out, l)
		}
	}
	return out, nil
}
