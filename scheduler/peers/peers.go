// Package peers divides the GPU pods of one scheduler profile among the gpu-scheduler
// processes that serve it at the same time.
//
// Leader election lets one process schedule and keeps the others idle. Without it (replicas
// run active-active, or two processes both believe they lead), every process would try every
// pending pod and race the others for the same GPUs: the GPU leases keep that safe, but each
// lost race is API writes and a retry. Here each process announces itself with a peer Lease
// (api/v1 SchedulerPeerLeaseName, label LabelSchedulerPeer = profile) that it renews while it
// schedules, and every process computes the same owner for a pod from the live peers by
// rendezvous hashing: the owner schedules the pod and the others leave it alone. A process
// also prefers the nodes it owns the same way, so that two owners of different pods rarely
// pick the same GPUs. When a peer stops renewing, its pods and nodes pass to the others.
//
// A peer is live while its lease keeps changing: the time of the last change is taken from
// this process's own clock when it sees the change, as client-go's leader election does, so
// clocks that disagree between hosts cannot make a peer look dead or alive.
package peers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// IdentityEnv names a gpu-scheduler process among the processes of its profile (its peer
// lease). Unset, the host name is used: in a pod that is the pod's name, which a container
// restart keeps, so a restarted scheduler takes its own share back at once.
const IdentityEnv = "GPU_SCHEDULER_IDENTITY"

const (
	// DefaultLeaseDuration is how long a peer counts as live after its lease last changed:
	// how long the pods of a peer that crashed wait before the others take them over. A
	// process that stops cleanly deletes its lease, and its pods pass over at once.
	DefaultLeaseDuration = 10 * time.Second
	// DefaultRenewEvery is how often a peer renews its lease: five renewals per duration, so
	// that a slow API server or a lost write does not make a live peer look dead.
	DefaultRenewEvery = 2 * time.Second
)

// Config configures a Membership.
type Config struct {
	Client kubernetes.Interface
	// Namespace holds the peer leases: the GPU lease namespace.
	Namespace string
	// Profile is the scheduler name the peers serve; peers of other profiles are not counted.
	Profile string
	// Identity names this process among its peers; it must differ between processes and
	// should survive a restart of the same process (a pod's name does), so that a restart
	// keeps the process's share instead of leaving it to expire.
	Identity      string
	LeaseDuration time.Duration
	RenewEvery    time.Duration
	Clock         clock.WithTicker
	// OnChange is called, outside any lock, each time the set of live peers changes.
	OnChange func()
}

// Membership tracks the live peers of one profile and keeps this process's own peer lease.
type Membership struct {
	cfg       Config
	leaseName string

	mu sync.Mutex
	// seen holds the peer leases the informer shows, by lease name.
	seen map[string]observation
	// view is the current set of live peers; replaced under mu, never changed in place, and
	// read without the lock: every GPU pod's PreEnqueue, PreFilter and PreBind read it.
	view atomic.Pointer[View]

	join sync.Once
	// mine is this process's lease as it last wrote it; leaving deletes it (once).
	mine      atomic.Pointer[coordinationv1.Lease]
	joined    atomic.Bool
	leaving   atomic.Bool
	leaveOnce sync.Once
}

// observation is what this process knows of one peer's lease.
type observation struct {
	holder string
	// version is the lease's resourceVersion: a renewal changes it.
	version string
	// changed is when this process saw the lease change last, on its own clock.
	changed  time.Time
	duration time.Duration
}

// View is a set of live peers, as one process sees it at one moment. Two processes that see
// the same set compute the same owner for every key.
type View struct {
	self  string
	peers []string // sorted; self included
}

// New makes a Membership. Nothing runs until Watch and Join are called.
func New(cfg Config) (*Membership, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Profile == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("scheduler peers: client, namespace, profile and identity are required (got namespace %q, profile %q, identity %q)", cfg.Namespace, cfg.Profile, cfg.Identity)
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewEvery <= 0 || cfg.RenewEvery >= cfg.LeaseDuration {
		cfg.RenewEvery = min(DefaultRenewEvery, cfg.LeaseDuration/5)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m := &Membership{
		cfg:       cfg,
		leaseName: apiv1.SchedulerPeerLeaseName(cfg.Identity),
		seen:      map[string]observation{},
	}
	m.view.Store(&View{self: cfg.Identity, peers: []string{cfg.Identity}})
	return m, nil
}

// Identity is this process's name among its peers.
func (m *Membership) Identity() string { return m.cfg.Identity }

// Current returns the live peers as this process sees them now. This process always counts
// itself, even before it joins: a process that schedules owns its share from the start, and
// the others learn of it from its lease a moment later.
func (m *Membership) Current() *View { return m.view.Load() }

// Watch starts an informer on the profile's peer leases and a clock that expires peers that
// stopped renewing. It returns once the informer has listed the leases, so that the first
// view already counts the peers that were running.
func (m *Membership) Watch(ctx context.Context) error {
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0,
		kubeinformers.WithNamespace(m.cfg.Namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = apiv1.LabelSchedulerPeer + "=" + m.cfg.Profile
		}))
	inf := factory.Coordination().V1().Leases().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.observe(obj) },
		UpdateFunc: func(_, obj any) { m.observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				m.mu.Lock()
				delete(m.seen, l.Name)
				m.mu.Unlock()
				m.Refresh()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching the scheduler peer leases in namespace %s: %w", m.cfg.Namespace, err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("the scheduler peer leases in namespace %s were not listed; may the scheduler list leases there?", m.cfg.Namespace)
	}
	m.Refresh()
	go func() {
		t := m.cfg.Clock.NewTicker(m.cfg.RenewEvery / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				m.Refresh()
			}
		}
	}()
	return nil
}

// observe records a peer lease the informer shows.
func (m *Membership) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Labels[apiv1.LabelSchedulerPeer] != m.cfg.Profile {
		// The informer selects on the label; a watch that does not filter (client-go's fake)
		// must not make a GPU lease's holder a peer.
		return
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	duration := m.cfg.LeaseDuration
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		duration = time.Duration(s) * time.Second
	}
	m.mu.Lock()
	prev, had := m.seen[l.Name]
	o := observation{holder: holder, version: l.ResourceVersion, changed: prev.changed, duration: duration}
	if !had || prev.version != l.ResourceVersion || prev.holder != holder {
		o.changed = m.cfg.Clock.Now()
	}
	m.seen[l.Name] = o
	m.mu.Unlock()
	m.Refresh()
}

// Refresh recomputes the live peers, and calls OnChange when they changed.
func (m *Membership) Refresh() {
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	peers := []string{m.cfg.Identity}
	for _, o := range m.seen {
		if o.holder == "" || o.holder == m.cfg.Identity || now.Sub(o.changed) >= o.duration {
			continue
		}
		if !slices.Contains(peers, o.holder) {
			peers = append(peers, o.holder)
		}
	}
	slices.Sort(peers)
	changed := !slices.Equal(peers, m.view.Load().peers)
	if changed {
		m.view.Store(&View{self: m.cfg.Identity, peers: peers})
	}
	m.mu.Unlock()
	if changed {
		klog.Background().WithName("scheduler-peers").Info("Scheduler peers changed", "profile", m.cfg.Profile, "self", m.cfg.Identity, "peers", peers)
		if m.cfg.OnChange != nil {
			m.cfg.OnChange()
		}
	}
}

// Join starts renewing this process's peer lease (once; later calls do nothing) until ctx
// ends, and then deletes it so that the others take over its share at once. A process calls
// it when it starts scheduling: a standby under leader election never joins, so no pod is
// left to a process that does not schedule.
func (m *Membership) Join(ctx context.Context) {
	m.join.Do(func() {
		m.joined.Store(true)
		go m.renew(ctx)
	})
}

// Leave deletes this process's peer lease, once and synchronously, so that its share passes to
// the others at once instead of after the lease duration; renewals stop. The renewal loop
// calls it when its context ends, but a process that exits right after its context ends
// (kube-scheduler returns from Run, and the command exits) must call it itself before it
// exits, or the delete may never be sent. A process that never joined has nothing to delete.
func (m *Membership) Leave() {
	if !m.joined.Load() {
		return
	}
	m.leaving.Store(true)
	m.leaveOnce.Do(func() { m.leave(m.mine.Load()) })
}

func (m *Membership) renew(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("scheduler-peers")
	logger.Info("Joining the schedulers of this profile", "profile", m.cfg.Profile, "identity", m.cfg.Identity, "lease", klog.KRef(m.cfg.Namespace, m.leaseName))
	t := m.cfg.Clock.NewTicker(m.cfg.RenewEvery)
	defer t.Stop()
	for !m.leaving.Load() {
		l, err := m.renewOnce(ctx, m.mine.Load())
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "Renewing the scheduler peer lease", "lease", klog.KRef(m.cfg.Namespace, m.leaseName))
		}
		m.mine.Store(l)
		select {
		case <-ctx.Done():
			m.Leave()
			return
		case <-t.C():
		}
	}
}

// renewOnce writes the peer lease's renewTime, creating the lease when it is missing; last is
// the lease as this process last wrote it (nil at first).
func (m *Membership) renewOnce(ctx context.Context, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	now := metav1.NewMicroTime(m.cfg.Clock.Now())
	if last == nil {
		got, err := leases.Get(ctx, m.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, m.lease(now), metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("creating scheduler peer lease %s/%s: %w", m.cfg.Namespace, m.leaseName, err)
			}
			return created, nil
		case err != nil:
			return nil, fmt.Errorf("reading scheduler peer lease %s/%s: %w", m.cfg.Namespace, m.leaseName, err)
		}
		last = got
	}
	l := last.DeepCopy()
	want := m.lease(now)
	l.Labels, l.Spec = want.Labels, want.Spec
	if last.Spec.AcquireTime != nil && ptr.Deref(last.Spec.HolderIdentity, "") == m.cfg.Identity {
		l.Spec.AcquireTime = last.Spec.AcquireTime
	}
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		// Read it afresh next time (a conflict, or the lease was deleted).
		return nil, fmt.Errorf("renewing scheduler peer lease %s/%s: %w", m.cfg.Namespace, m.leaseName, err)
	}
	return updated, nil
}

// lease is this process's peer lease as renewed at now.
func (m *Membership) lease(now metav1.MicroTime) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.leaseName,
			Namespace: m.cfg.Namespace,
			Labels:    map[string]string{apiv1.LabelSchedulerPeer: m.cfg.Profile},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(m.cfg.Identity),
			LeaseDurationSeconds: ptr.To(int32(max(1, m.cfg.LeaseDuration/time.Second))),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
}

// leave deletes this process's lease, if it still holds it, so that its share passes to the
// others at once instead of after the lease duration.
func (m *Membership) leave(mine *coordinationv1.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	opts := metav1.DeleteOptions{}
	if mine != nil {
		opts.Preconditions = &metav1.Preconditions{UID: &mine.UID}
	}
	err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, m.leaseName, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		klog.Background().WithName("scheduler-peers").Error(err, "Deleting the scheduler peer lease; the others take over this process's share when it expires", "lease", klog.KRef(m.cfg.Namespace, m.leaseName))
	}
}

// NewView is the view of process self among peers (self is added when missing): what a
// Membership computes, for callers that test what they do with one.
func NewView(self string, peers ...string) *View {
	all := slices.Clone(peers)
	if !slices.Contains(all, self) {
		all = append(all, self)
	}
	slices.Sort(all)
	return &View{self: self, peers: all}
}

// Size is the number of live peers, this process included.
func (v *View) Size() int { return len(v.peers) }

// Peers lists the live peers, sorted.
func (v *View) Peers() []string { return slices.Clone(v.peers) }

// Owner is the peer that owns key, by rendezvous hashing: the peer with the highest hash of
// (peer, key). When a peer goes, only its keys move; when one comes, it takes about 1/n of
// every other peer's keys and nothing moves between the others.
func (v *View) Owner(key string) string {
	if len(v.peers) == 1 {
		return v.peers[0]
	}
	best, bestScore := "", uint64(0)
	for _, p := range v.peers {
		if s := score(p, key); best == "" || s > bestScore {
			best, bestScore = p, s
		}
	}
	return best
}

// Mine tells whether this process owns key.
func (v *View) Mine(key string) bool { return len(v.peers) == 1 || v.Owner(key) == v.self }

func score(peer, key string) uint64 {
	// FNV-1a of peer, a zero byte and key, written out rather than through hash/fnv: PreFilter
	// asks this for every candidate node while peers share the work, and converting the strings
	// to byte slices for a hash.Hash allocated twice per call.
	const offset64, prime64 = 14695981039346656037, 1099511628211
	x := uint64(offset64)
	for i := 0; i < len(peer); i++ {
		x = (x ^ uint64(peer[i])) * prime64
	}
	x *= prime64 // the zero byte between them
	for i := 0; i < len(key); i++ {
		x = (x ^ uint64(key[i])) * prime64
	}
	// fnv's last bytes barely reach the high bits; mix them (splitmix64's finaliser) so that
	// keys that differ only at the end spread evenly across peers.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
