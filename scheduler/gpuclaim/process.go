package gpuclaim

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/peers"
)

// Process is what the plugins of one gpu-scheduler process share, one plugin per scheduling
// profile that enables it: whether they join their peers at once, their peer memberships (left
// when the process exits), and the plugin whose state the fleet gauges read. The command makes
// one, registers its New with the framework and hands it to metrics.Register; the package
// keeps no state of its own, so two Processes (two test schedulers in one binary) never share
// anything.
type Process struct {
	mu          sync.Mutex
	joinAtStart bool
	memberships []*peers.Membership
	// latest is the plugin made last: with several profiles it answers the fleet gauges, as
	// they all see the same cluster.
	latest *Plugin
}

var _ metrics.Sources = &Process{}

// NewProcess returns a Process whose plugins join their peers at their first scheduling cycle.
func NewProcess() *Process { return &Process{} }

// New builds a plugin of this process: it decodes and validates its args, starts informers for
// GpuClaims, GpuNodeStatuses and the GPU leases, and rebuilds its ledger from the leases before
// returning, so that a restarted scheduler never hands out a GPU another pod holds. It is the
// framework's PluginFactory.
func (pr *Process) New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return newPlugin(ctx, obj, h, nil, clock.RealClock{}, pr)
}

// JoinPeersAtStart tells the plugins made from now on whether to join their peers as soon as
// they are made (leader election off: the process schedules from its start, and its queue would
// hold a burst its peers do not know to leave it before its first cycle) or at their first
// scheduling cycle (on: a standby never joins, so no pod is left to a process that does not
// schedule).
func (pr *Process) JoinPeersAtStart(on bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.joinAtStart = on
}

func (pr *Process) joinsAtStart() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.joinAtStart
}

// LeavePeers deletes the peer leases of this process's plugins, synchronously: the command
// calls it when the scheduler has stopped and before it exits, so that the peers take over
// this process's pods at once rather than when its leases run out.
func (pr *Process) LeavePeers() {
	pr.mu.Lock()
	all := slices.Clone(pr.memberships)
	pr.mu.Unlock()
	for _, m := range all {
		m.Leave()
	}
}

func (pr *Process) addMembership(m *peers.Membership) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.memberships = append(pr.memberships, m)
}

func (pr *Process) adopt(p *Plugin) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.latest = p
}

func (pr *Process) plugin() *Plugin {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.latest
}

// PartCounts is the latest plugin's Shared GPUs and MIG devices (metrics.Sources).
func (pr *Process) PartCounts() ([]ledger.SharerCount, []ledger.MIGCount) {
	if p := pr.plugin(); p != nil {
		return p.ledger.PartCounts()
	}
	return nil, nil
}

// GPUCounts is the latest plugin's ledger by model and state (metrics.Sources).
func (pr *Process) GPUCounts() []metrics.GPUCount {
	if p := pr.plugin(); p != nil {
		return p.ledger.GPUCounts()
	}
	return nil
}

// Pending is how many GPU pods the latest plugin turned away still wait, and the age of the
// oldest in seconds (metrics.Sources).
func (pr *Process) Pending() (count int, oldestSeconds float64, ok bool) {
	if p := pr.plugin(); p != nil {
		count, oldestSeconds = p.waiting.pendingStats(p.clock.Now())
		return count, oldestSeconds, true
	}
	return 0, 0, false
}

// Peers is how many processes serve the latest plugin's profile and how many pods it leaves to
// them; ok is false when it has no peers to count (metrics.Sources).
func (pr *Process) Peers() (size, leftToPeers int, ok bool) {
	p := pr.plugin()
	if p == nil || p.peers == nil {
		return 0, 0, false
	}
	return p.peers.Current().Size(), p.deferred.leftToPeers(), true
}
