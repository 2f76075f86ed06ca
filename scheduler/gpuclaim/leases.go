package gpuclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// holderIndex indexes GPU leases by the UIDs of the pods they name.
const holderIndex = "gpu.scheduling/holder"

// Annotations on a lease that name its pod even when the name is too long for a label.
const (
	annotationPodNamespace = claims.AnnotationLeasePodNamespace
	annotationPodName      = claims.AnnotationLeasePodName
)

// errLeaseConflict means another pod holds a GPU this attempt wanted: another scheduler won
// the race, or this scheduler's view was stale. The pod is retried.
var errLeaseConflict = errors.New("GPU lease held by another pod")

// leaseRef is what a GPU lease or a MIG device's lease says.
type leaseRef struct {
	node    string
	gpu     int
	holders []types.UID
	shared  bool
	// shares are a Shared lease's holders' shares (claims.GPULease.Shares).
	shares map[types.UID]apiv1.ResolvedShare
	// lease is the whole reading, for the ledger (ledger.AddLeaseHold).
	lease claims.GPULease
}

// parseLease reads a GPU lease or a MIG device's lease (claims.ParseGPULease); ok is false for
// leases that are not ours or are malformed.
func parseLease(l *coordinationv1.Lease) (leaseRef, bool) {
	g, ok := claims.ParseGPULease(l)
	return leaseRef{node: g.Node, gpu: g.GPU, holders: g.Holders, shared: g.Shared, shares: g.Shares, lease: g}, ok
}

func leaseHolders(obj any) ([]string, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, nil
	}
	ref, ok := parseLease(l)
	if !ok {
		return nil, nil
	}
	out := make([]string, len(ref.holders))
	for i, h := range ref.holders {
		out[i] = string(h)
	}
	return out, nil
}

func (p *Plugin) newLease(pod *v1.Pod, node string, id int, shared bool) (*coordinationv1.Lease, error) {
	return claims.NewGPULease(*p.args.LeaseNamespace, pod, node, id, shared, p.clock.Now())
}

// acquire locks the GPUs ids of node for pod, one lease per GPU. It returns the names of the
// leases it created or joined, so that a failure can be rolled back. An Exclusive GPU is a
// plain Create: AlreadyExists means someone else holds it. A Shared GPU is joined by updating
// its lease with optimistic concurrency, and only while the lease is a shared one, so an
// Exclusive and a Shared pod can never both hold it.
//
// The leases are created together, so that an 8-GPU pod waits one round trip before its
// binding instead of eight (one after another, the creates would be most of the time from
// reservation to binding). While other gpu-scheduler processes schedule beside this one
// (peers), the first GPU's lease is taken alone before the others: two schedulers that picked
// the same node for the same claim picked the same first GPU, so a lost race most often costs
// one failed create and nothing to roll back. At most parallelLeaseCreates creates run
// beside others at once, across all pods; beyond that a pod makes its creates one after
// another, as a saturated API server gains nothing from more requests in flight. The last
// create is always made in the calling goroutine, so a 1-GPU pod costs no goroutine.
//
// shares are a Shared pod's share of each GPU (in the order of ids; nil or zero: none stated);
// they are written on the leases and checked against the other holders' when one is joined.
func (p *Plugin) acquire(ctx context.Context, pod *v1.Pod, node string, ids []int, shared bool, shares []allocator.Resolved) ([]string, error) {
	shareOf := func(i int) apiv1.ResolvedShare {
		if i < len(shares) {
			return apiv1.ResolvedShare{MemoryMiB: shares[i].MemoryMiB, ComputePercent: int32(shares[i].ComputePercent)}
		}
		return apiv1.ResolvedShare{}
	}
	if err := p.precheck(ctx, pod, node, ids, shared); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var taken []string
	rest := ids
	if p.peers != nil && p.peers.Current().Size() > 1 {
		// Other processes schedule beside this one: the first lease alone (see above).
		first, err := p.acquireOne(ctx, pod, node, ids[0], shared, shareOf(0))
		if err != nil {
			return nil, err
		}
		taken, rest = []string{first}, ids[1:]
		shares = shares[min(1, len(shares)):]
	}
	names := make([]string, len(rest))
	errs := make([]error, len(rest))
	var wg sync.WaitGroup
	for i, id := range rest {
		if i == len(rest)-1 {
			names[i], errs[i] = p.acquireOne(ctx, pod, node, id, shared, shareOf(i))
			break
		}
		select {
		case p.createSlots <- struct{}{}:
			wg.Add(1)
			go func() {
				defer func() { <-p.createSlots; wg.Done() }()
				names[i], errs[i] = p.acquireOne(ctx, pod, node, id, shared, shareOf(i))
			}()
		default:
			// Every spare slot is taken: a burst keeps many pods in PreBind at once, and more
			// requests in flight would only queue in a saturated API server (with unbounded
			// parallel creates, a large burst's pod creates and watches fall behind). This one
			// is made here, in turn.
			names[i], errs[i] = p.acquireOne(ctx, pod, node, id, shared, shareOf(i))
		}
	}
	wg.Wait()
	var failed error
	for i := range rest {
		if errs[i] == nil {
			taken = append(taken, names[i])
		} else if failed == nil {
			failed = errs[i]
		}
	}
	return taken, failed
}

// parallelLeaseCreates bounds the lease creates made alongside others, across all pods.
const parallelLeaseCreates = 16

// acquireOne locks GPU id of node for pod and returns its lease's name (see acquire).
func (p *Plugin) acquireOne(ctx context.Context, pod *v1.Pod, node string, id int, shared bool, share apiv1.ResolvedShare) (string, error) {
	leases := p.client.CoordinationV1().Leases(*p.args.LeaseNamespace)
	l, err := p.newLease(pod, node, id, shared)
	if err != nil {
		return "", err
	}
	if shared {
		claims.SetLeaseShares(l, []types.UID{pod.UID}, map[types.UID]apiv1.ResolvedShare{pod.UID: share})
	}
	_, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: p.fieldManager})
	var cur *coordinationv1.Lease
	if apierrors.IsAlreadyExists(err) {
		var gone bool
		if gone, cur = p.takeOverStale(ctx, l.Name, pod.UID); gone {
			_, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: p.fieldManager})
		}
	}
	switch {
	case err == nil:
		return l.Name, nil
	case !apierrors.IsAlreadyExists(err):
		return "", fmt.Errorf("creating lease %s/%s: %w", l.Namespace, l.Name, err)
	case !shared && cur != nil && holds(cur, pod.UID):
		return "", fmt.Errorf("GPU %d on node %s (lease %s, taken by another attempt at this pod): %w", id, node, l.Name, errLeaseConflict)
	case !shared:
		return "", fmt.Errorf("GPU %d on node %s (lease %s): %w", id, node, l.Name, errLeaseConflict)
	}
	if err := p.joinShared(ctx, l.Name, node, id, pod.UID, share); err != nil {
		return "", err
	}
	return l.Name, nil
}

// precheck looks up every GPU's lease in the informer before any is created, so that an
// attempt the informer already shows lost costs no write at all: neither the create that
// would fail nor the creates (and deletes) of the GPUs before it in ids. Schedulers running
// side by side without leader election lose such races often; without this check each lost
// race costs failed and rolled-back lease creates.
//
// A lease whose holders are all gone (or this pod's own, from an attempt long past) is deleted
// here, sparing a create that would fail: a GPU freed by a pod that went away is often still
// locked by its lease, since the ledger frees it at once and the release queue deletes the
// lease a little later. The deletes are made together, and only once every GPU is known free
// or stale, so that an attempt lost on one GPU deletes nothing. Made one after another they
// would cost most the pod that waited for a whole box: such a pod often finds most of its
// leases still there, and each delete would hold back its creates by a round trip.
func (p *Plugin) precheck(ctx context.Context, pod *v1.Pod, node string, ids []int, shared bool) error {
	var stale []*coordinationv1.Lease
	for _, id := range ids {
		name, err := apiv1.LeaseName(node, id)
		if err != nil {
			return err
		}
		cached, err := p.leaseLister.Leases(*p.args.LeaseNamespace).Get(name)
		switch {
		case err != nil:
			continue // not seen: the create decides
		case p.stale(cached, pod.UID):
			stale = append(stale, cached)
		case shared:
			// joinShared decides on the API server's copy whether a shared lease can be joined.
		case holds(cached, pod.UID):
			// A recent attempt at this very pod holds it: a racing scheduler binding the pod
			// right now, or this scheduler before a restart (taken over once stale). The create
			// would fail.
			return fmt.Errorf("GPU %d on node %s (lease %s, seen in the informer, taken by another attempt at this pod): %w", id, node, name, errLeaseConflict)
		default:
			// Another pod holds it, as far as the informer knows: a scheduler racing this one
			// took it since Filter.
			return fmt.Errorf("GPU %d on node %s (lease %s, seen in the informer): %w", id, node, name, errLeaseConflict)
		}
	}
	var wg sync.WaitGroup
	for i, l := range stale {
		if i == len(stale)-1 {
			p.deleteStale(ctx, l)
			break
		}
		wg.Go(func() { p.deleteStale(ctx, l) })
	}
	wg.Wait()
	return nil
}

// holds reports whether lease l names pod uid among its holders.
func holds(l *coordinationv1.Lease, uid types.UID) bool {
	ref, ok := parseLease(l)
	if !ok {
		return false
	}
	return slices.Contains(ref.holders, uid)
}

// ownLeaseStaleAfter is how old a lease naming the very pod being scheduled must be before it
// counts as left over from a crashed attempt: an attempt in flight (this or another scheduler
// binding the same pod) holds its leases for a second or two, not this long.
const ownLeaseStaleAfter = 30 * time.Second

// takeOverStale deletes a lease whose every holder is a pod this scheduler saw go away, or is
// the requesting pod itself from an attempt older than ownLeaseStaleAfter, so that such a GPU
// can be locked again at once instead of after the release queue gets to it. The delete is
// conditional on the lease not having changed since it was read. It reports whether the lease
// is gone, and returns the lease it read (nil when none could be read).
func (p *Plugin) takeOverStale(ctx context.Context, name string, requester types.UID) (bool, *coordinationv1.Lease) {
	leases := p.client.CoordinationV1().Leases(*p.args.LeaseNamespace)
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, nil
	}
	if !p.stale(cur, requester) {
		return false, cur
	}
	return p.deleteStale(ctx, cur), cur
}

// stale reports whether every holder of lease l is a pod this scheduler saw go away, or is
// requester itself from an attempt older than ownLeaseStaleAfter.
func (p *Plugin) stale(l *coordinationv1.Lease, requester types.UID) bool {
	ref, ok := parseLease(l)
	if !ok {
		// A lease of a GPU lease's name that the scheduler did not make is stale once it has
		// expired (foreign.go).
		_, _, foreign := ledger.ForeignRef(l)
		return foreign && p.foreignExpired(l)
	}
	if len(ref.holders) == 0 {
		return false
	}
	born := l.CreationTimestamp.Time
	if l.Spec.AcquireTime != nil && l.Spec.AcquireTime.After(born) {
		born = l.Spec.AcquireTime.Time
	}
	for _, h := range ref.holders {
		ownLeftover := h == requester && !ref.shared && p.clock.Since(born) > ownLeaseStaleAfter
		if !p.pods.wasDeleted(h) && !ownLeftover {
			return false
		}
	}
	return true
}

// deleteStale deletes lease l on the condition that it is still the object read (UID and
// resourceVersion), and reports whether it is gone.
func (p *Plugin) deleteStale(ctx context.Context, l *coordinationv1.Lease) bool {
	err := p.client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	if err == nil {
		metrics.LeasesReleased.Inc()
	}
	return err == nil || apierrors.IsNotFound(err)
}

// joinShared adds a pod to an existing shared lease, with its share. It refuses (a lost race:
// the pod is retried) when the holders' shares with this one would over-commit the GPU's
// memory or compute, or its sharers would pass maxSharersPerGPU. The sum is taken from the
// lease the API server holds, re-read on every conflict: two schedulers that each judged the
// GPU from their own ledger cannot both join past a cap, as the second's update either fails
// on the first's resourceVersion or reads the first's share.
func (p *Plugin) joinShared(ctx context.Context, name, node string, id int, uid types.UID, share apiv1.ResolvedShare) error {
	leases := p.client.CoordinationV1().Leases(*p.args.LeaseNamespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// Released between our Create and Get: the GPU is free again, but rather than loop
			// here, let the scheduler retry the pod.
			return fmt.Errorf("GPU %d on node %s (lease %s) changed hands: %w", id, node, name, errLeaseConflict)
		}
		if err != nil {
			return fmt.Errorf("reading lease %s: %w", name, err)
		}
		ref, ok := parseLease(cur)
		if !ok || !ref.shared {
			return fmt.Errorf("GPU %d on node %s (lease %s) is held exclusively: %w", id, node, name, errLeaseConflict)
		}
		for _, h := range ref.holders {
			if h == uid {
				return nil
			}
		}
		if why := p.overCommit(node, id, ref, share); why != "" {
			return fmt.Errorf("GPU %d on node %s (lease %s): %s: %w", id, node, name, why, errLeaseConflict)
		}
		holders := *cur.Spec.HolderIdentity + "," + string(uid)
		cur = cur.DeepCopy()
		cur.Spec.HolderIdentity = &holders
		shares := map[types.UID]apiv1.ResolvedShare{uid: share}
		for h, s := range ref.shares {
			shares[h] = s
		}
		claims.SetLeaseShares(cur, append(slices.Clone(ref.holders), uid), shares)
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{FieldManager: p.fieldManager})
		return err
	})
}

// releaseLease frees a pod's hold on one lease: an exclusive lease is deleted (only if it
// still names the pod), a shared one loses the pod and is deleted when nobody is left.
// Releasing what is already gone succeeds, so release is idempotent.
func (p *Plugin) releaseLease(ctx context.Context, name string, uid types.UID) error {
	// The first attempt works from the informer's copy: the delete's preconditions (UID and
	// resourceVersion) make a stale copy fail with a conflict, and only then is the lease
	// read from the apiserver. That halves the requests of a mass release (tens of thousands
	// of leases when 10,000 pods go at once).
	cached, _ := p.leaseLister.Leases(*p.args.LeaseNamespace).Get(name)
	return p.releaseLeaseFrom(ctx, cached, name, uid)
}

// releaseLeaseFrom is releaseLease starting from cached, the informer's copy (nil for none).
func (p *Plugin) releaseLeaseFrom(ctx context.Context, cached *coordinationv1.Lease, name string, uid types.UID) error {
	leases := p.client.CoordinationV1().Leases(*p.args.LeaseNamespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, fromCache := cached, cached != nil
		cached = nil
		if cur == nil {
			var err error
			cur, err = leases.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading lease %s: %w", name, err)
			}
		}
		ref, ok := parseLease(cur)
		if !ok {
			return nil
		}
		var rest []string
		found := false
		for _, h := range ref.holders {
			if h == uid {
				found = true
			} else {
				rest = append(rest, string(h))
			}
		}
		if !found {
			if fromCache {
				return errStaleCache // the cache may lag behind our own join: ask the apiserver
			}
			return nil
		}
		if len(rest) == 0 {
			// The precondition makes sure we delete the lease we read, not one a new holder
			// created since.
			err := leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
				UID: &cur.UID, ResourceVersion: &cur.ResourceVersion,
			}})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		holders := strings.Join(rest, ",")
		cur = cur.DeepCopy()
		cur.Spec.HolderIdentity = &holders
		if ref.shared {
			left := make([]types.UID, len(rest))
			for i, h := range rest {
				left[i] = types.UID(h)
			}
			claims.SetLeaseShares(cur, left, ref.shares)
		}
		_, err := leases.Update(ctx, cur, metav1.UpdateOptions{FieldManager: p.fieldManager})
		return err
	})
}

// overCommit says how joining the holders of a Shared GPU's lease ref with share would pass a
// cap of the GPU (its memory as the node's GpuNodeStatus reports it, 100 % compute,
// maxSharersPerGPU), or "" when it would not.
func (p *Plugin) overCommit(node string, id int, ref leaseRef, share apiv1.ResolvedShare) string {
	if n := len(ref.holders) + 1; n > int(*p.args.MaxSharersPerGPU) {
		return fmt.Sprintf("it would have %d sharers, more than maxSharersPerGPU %d", n, *p.args.MaxSharersPerGPU)
	}
	var mem int64
	var compute int32
	for _, h := range ref.holders {
		mem += ref.shares[h].MemoryMiB
		compute += ref.shares[h].ComputePercent
	}
	if compute+share.ComputePercent > 100 {
		return fmt.Sprintf("its holders reserve %d %% compute, the share needs %d %%", compute, share.ComputePercent)
	}
	if share.MemoryMiB > 0 {
		var capacity int64
		if n, _ := p.ledger.NodeView(node); n != nil {
			if g, ok := n.GPU(id); ok {
				capacity = g.MemoryMiB
			}
		}
		if mem+share.MemoryMiB > capacity {
			return fmt.Sprintf("its holders reserve %d of %d MiB, the share needs %d", mem, capacity, share.MemoryMiB)
		}
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }

// errStaleCache makes RetryOnConflict read the lease again: it reads as a conflict.
var errStaleCache = apierrors.NewConflict(coordinationv1.Resource("leases"), "", errors.New("informer copy does not name the pod"))

// acquireMIG locks the MIG devices devs of node for pod, one lease per device
// (apiv1.MIGLeaseName), and returns the names of those it created, so that a failure can be
// rolled back. A MIG device is held by one pod: as for an Exclusive GPU, a lease already there
// (AlreadyExists, or another pod's seen in the informer) means someone else holds it, and the
// attempt is lost (errLeaseConflict) unless every holder of that lease is gone, when it is
// taken over. The devices of one claim are few: they are locked one after another.
func (p *Plugin) acquireMIG(ctx context.Context, pod *v1.Pod, node string, devs []allocator.MIGSlot) ([]string, error) {
	leases := p.client.CoordinationV1().Leases(*p.args.LeaseNamespace)
	var taken []string
	for _, d := range devs {
		l, err := claims.NewMIGLease(*p.args.LeaseNamespace, pod, node, d.GPU, d.Slot, p.clock.Now())
		if err != nil {
			return taken, err
		}
		what := fmt.Sprintf("MIG device %d:%d on node %s (lease %s", d.GPU, d.Slot, node, l.Name)
		if cached, err := p.leaseLister.Leases(l.Namespace).Get(l.Name); err == nil && !p.stale(cached, pod.UID) {
			return taken, fmt.Errorf("%s, seen in the informer): %w", what, errLeaseConflict)
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: p.fieldManager})
		if apierrors.IsAlreadyExists(err) {
			if gone, _ := p.takeOverStale(ctx, l.Name, pod.UID); gone {
				_, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: p.fieldManager})
			}
		}
		switch {
		case apierrors.IsAlreadyExists(err):
			return taken, fmt.Errorf("%s): %w", what, errLeaseConflict)
		case err != nil:
			return taken, fmt.Errorf("creating lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		taken = append(taken, l.Name)
	}
	return taken, nil
}
