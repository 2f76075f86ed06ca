package gpuclaim

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// bindSlots bounds how many pods are between the start of their API writes in PreBind (the
// GPU leases and the claim's status, after any wait for the kubelet's admission) and the end
// of their Binding. When all slots are taken, the scheduling cycle of the next claim pod waits
// in PreFilter for one to free, before it picks a node.
//
// Why: the scheduling cycle places a pod in a few milliseconds, far faster than a saturated
// API server completes a pod's two round trips. Unbounded, a burst piles thousands of pods
// into the binding goroutines, each holding a reservation made on an ever older picture of
// the cluster, and their requests share the API server's time, so that every one of them
// waits as long as the whole pile takes, and the users' own requests (pod creates, watches)
// wait behind them. Bounded, a pod waits in the scheduling queue instead, holding nothing; it
// is placed on the cluster as it is when a slot frees, and the pods ahead of it finish in the
// order they were placed, each in a round trip's time.
//
// Slots are counted from PreBind's API writes, not from Reserve: a gang member waiting in
// Permit for its mates, or a pod waiting for its node's kubelet (admitgate.go), writes
// nothing, and counting it could leave every slot to waiters while the pods they wait for
// stand in PreFilter. Every counted pod is making API requests, so a slot always frees.
type bindSlots struct {
	limit int
	mu    sync.Mutex
	in    map[types.UID]struct{}
	// freed is closed and replaced whenever a pod leaves: the waiters' wake-up.
	freed chan struct{}
}

// newBindSlots returns slots for limit pods; limit 0 bounds nothing.
func newBindSlots(limit int) *bindSlots {
	return &bindSlots{limit: limit, in: map[types.UID]struct{}{}, freed: make(chan struct{})}
}

// wait returns once fewer than limit pods are writing, or with the context's error.
func (b *bindSlots) wait(ctx context.Context) error {
	if b == nil || b.limit <= 0 {
		return nil
	}
	for {
		b.mu.Lock()
		if len(b.in) < b.limit {
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for one of the %d pods being bound to finish: %w", b.limit, context.Cause(ctx))
		case <-freed:
		}
	}
}

// enter counts pod as writing. A pod is counted once however often it enters.
func (b *bindSlots) enter(pod types.UID) {
	if b == nil || b.limit <= 0 {
		return
	}
	b.mu.Lock()
	b.in[pod] = struct{}{}
	b.mu.Unlock()
}

// leave frees pod's slot, if it holds one (PostBind after a Binding, Unreserve after a
// failure at any point, so that it may be called for a pod that never entered).
func (b *bindSlots) leave(pod types.UID) {
	if b == nil || b.limit <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.in[pod]; !ok {
		return
	}
	delete(b.in, pod)
	close(b.freed)
	b.freed = make(chan struct{})
}

// writing is how many pods hold a slot.
func (b *bindSlots) writing() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.in)
}
