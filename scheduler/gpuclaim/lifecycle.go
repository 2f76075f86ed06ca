package gpuclaim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// podRef names a pod whose GPUs are to be released.
type podRef struct {
	UID       types.UID
	Namespace string
	Name      string
	Claim     string
}

// orphanScanInterval is how often leases whose pods vanished are looked for. Leases of pods
// deleted while this scheduler watched are released at once; the scan catches the rest (pods
// deleted while no scheduler ran, leases written by a scheduler that died mid-attempt).
const orphanScanInterval = 30 * time.Second

// releaseWorkers release pods' GPUs in parallel. When a large job ends, thousands of pods go
// at once; one worker deleting their leases one API call at a time left the freed GPUs
// unusable for minutes (26,000 leases on the 5,000-node simulation). The queue never hands
// one pod to two workers at a time.
const releaseWorkers = 16

func (p *Plugin) enqueueRelease(ref podRef) {
	p.releaseMu.Lock()
	p.releases[ref.UID] = ref
	p.releaseMu.Unlock()
	p.releaseQueue.Add(ref.UID)
}

func (p *Plugin) runLifecycle(ctx context.Context) {
	go func() {
		<-ctx.Done()
		p.releaseQueue.ShutDown()
	}()
	go wait.UntilWithContext(ctx, p.collectOrphans, orphanScanInterval)
	var wg sync.WaitGroup
	for range releaseWorkers {
		wg.Go(func() {
			for p.releaseNext(ctx) {
			}
		})
	}
	wg.Wait()
}

func (p *Plugin) releaseNext(ctx context.Context) bool {
	uid, quit := p.releaseQueue.Get()
	if quit {
		return false
	}
	defer p.releaseQueue.Done(uid)
	p.releaseMu.Lock()
	ref, ok := p.releases[uid]
	p.releaseMu.Unlock()
	if !ok {
		ref = podRef{UID: uid}
	}
	if err := p.release(ctx, ref); err != nil {
		klog.FromContext(ctx).Error(err, "Releasing GPUs of a pod; will retry", "podUID", uid, "pod", klog.KRef(ref.Namespace, ref.Name))
		p.releaseQueue.AddRateLimited(uid)
		return true
	}
	p.releaseMu.Lock()
	delete(p.releases, uid)
	p.releaseMu.Unlock()
	p.releaseQueue.Forget(uid)
	return true
}

// release frees a pod's leases and returns its claim to Pending.
func (p *Plugin) release(ctx context.Context, ref podRef) error {
	leases, err := p.leasesOf(ref.UID)
	if err != nil {
		return err
	}
	for _, l := range leases {
		if err := p.releaseLease(ctx, l.Name, ref.UID); err != nil {
			return fmt.Errorf("releasing lease %s of pod %s/%s: %w", l.Name, ref.Namespace, ref.Name, err)
		}
		metrics.LeasesReleased.Inc()
	}
	mine := p.status.takeBound(ref.UID)
	if ref.Claim != "" {
		if claim, err := p.claimLister.GpuClaims(ref.Namespace).Get(ref.Claim); err == nil && claim.Status.PodUID == string(ref.UID) {
			p.status.released(claim, ref.UID, fmt.Sprintf("pod %s went away; the claim is free for another pod", ref.Name), mine)
		}
	}
	return nil
}

// collectOrphans releases leases whose holders this scheduler cannot see, once they are older
// than the grace period: long enough for a lease another scheduler just created to be
// followed by its pod in this scheduler's informer.
func (p *Plugin) collectOrphans(ctx context.Context) {
	all, err := p.leaseLister.Leases(*p.args.LeaseNamespace).List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing GPU leases for orphans")
		return
	}
	grace := time.Duration(*p.args.OrphanLeaseGraceSeconds) * time.Second
	now := p.clock.Now()
	stale := 0
	defer func() { metrics.StaleLeases.Set(float64(stale)) }()
	// Expired leases of GPU lease names that the scheduler did not make (foreign.go): the
	// unlabelled ones, and the half-labelled ones among the GPU leases.
	unlabelled, err := p.foreignLister.Leases(*p.args.LeaseNamespace).List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing leases without gpu.scheduling labels")
	}
	stale += p.collectForeign(ctx, append(unlabelled, all...))
	for _, l := range all {
		ref, ok := parseLease(l)
		if !ok {
			continue
		}
		born := l.CreationTimestamp.Time
		if l.Spec.AcquireTime != nil && l.Spec.AcquireTime.After(born) {
			born = l.Spec.AcquireTime.Time
		}
		if now.Sub(born) < grace {
			continue
		}
		for _, uid := range ref.holders {
			if _, live := p.pods.get(uid); live {
				continue
			}
			stale++
			klog.FromContext(ctx).V(2).Info("Releasing orphaned GPU lease", "lease", klog.KObj(l), "podUID", uid)
			p.ledger.Forget(uid)
			p.enqueueRelease(podRef{UID: uid, Namespace: l.Annotations[annotationPodNamespace], Name: l.Annotations[annotationPodName]})
		}
	}
}
