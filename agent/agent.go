// Package agent is the node agent: it reads a node's GPUs through gpu.Library, keeps their
// health from NVML events and probes, and publishes the node's GpuNodeStatus and GPU labels.
// The same loop runs once per node as a DaemonSet (over the real NVML) and, in the simulator,
// many times in one process (over mock topologies, package sim/fleet). Its liveness signal is a
// small Lease it renews (package liveness); the status is written on change and refreshed
// seldom.
package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/health"
	"github.com/gpu-scheduler/gpu-scheduler/agent/leases"
	"github.com/gpu-scheduler/gpu-scheduler/agent/liveness"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	"github.com/gpu-scheduler/gpu-scheduler/agent/telemetry"
	"github.com/gpu-scheduler/gpu-scheduler/agent/topology"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// DefaultTelemetryWritesPerMinute is Config.TelemetryWritesPerMinute's default: no writes for
// telemetry alone. Every GPU's load moves all the time, so any budget is spent by every node:
// at 2 a minute, 5,000 nodes make ~167 GpuNodeStatus writes a second, enough custom-resource
// writes to triple the apiserver's CPU per bound pod (docs/benchmarks.md). Live load is in the
// agent's DCGM_FI_* series.
const DefaultTelemetryWritesPerMinute = -1

// Config configures an Agent. Zero durations take the defaults.
// DefaultUsageWriteInterval is Config.UsageWriteInterval's default.
const DefaultUsageWriteInterval = 10 * time.Minute

type Config struct {
	// NodeName is the node whose GPUs these are.
	NodeName string
	// GPUs is the GPU library: nvmlgpu over the real NVML, or over a mock topology.
	GPUs       gpu.Library
	GPUClient  versioned.Interface
	KubeClient kubernetes.Interface
	// Nodes finds the Node object, for the owner reference and the labels.
	Nodes corelisters.NodeLister
	// Leases is a lease indexer with the leases.ByNode index (see leases.Informer).
	Leases cache.Indexer
	// LeaseNamespace is the scheduler's GPU lease namespace, where the agent renews its
	// liveness Lease (apiv1.AgentLeaseName). Default gpu-scheduler.
	LeaseNamespace string
	Clock          clock.WithTicker

	// ProbeInterval is how often every GPU is probed (lost? persistent fault? recovered?). Default 30s.
	ProbeInterval time.Duration
	// HeartbeatInterval is the longest time between two renewals of the liveness Lease, the
	// signal the scheduler judges the agent alive by. Default 3m.
	HeartbeatInterval time.Duration
	// StatusRefreshInterval is the longest time between two GpuNodeStatus writes: an
	// unchanged status is rewritten (LastHeartbeatTime refreshed) this often. Default 30m: the
	// liveness Lease says the agent lives, and a status write costs the apiserver several ms
	// of CPU (a DGX's eight devices with telemetry; docs/benchmarks.md), a steady load at
	// thousands of nodes. The refresh only bounds how old the status's telemetry can get.
	StatusRefreshInterval time.Duration
	// MinWriteInterval is the shortest time between two status writes, so that a burst of
	// changes (a pod's leases) becomes one write. Default 1s; negative: none.
	MinWriteInterval time.Duration
	// UsageWriteInterval is the shortest time between two status writes when only inUseBy
	// changed: usage is informational (the scheduler's leases are the lock, and kubectl gpu
	// reads the leases too), so it need not cause writes of its own; it also rides along with
	// health writes and the status refresh. Default DefaultUsageWriteInterval (10 minutes), on
	// its own, not the liveness interval: a node whose last status write is older than this
	// writes at the first change of usage, so the shorter the interval, the more nodes write
	// their status (several ms of apiserver CPU each) inside a burst of pods, when the
	// apiserver is busiest, and the more a busy cluster pays in steady writes (one per node per
	// interval: ~8 a second at 5,000 nodes at 10 minutes). inUseBy and Free are at most this
	// old. Negative: MinWriteInterval (usage written at once). docs/benchmarks.md has the
	// bursts measured at shorter intervals.
	UsageWriteInterval time.Duration
	// RecoveryQuietPeriod is how long an answering GPU must stay free of critical events
	// before an event fault clears. Default 5m.
	RecoveryQuietPeriod time.Duration
	// InitBackoff and MaxInitBackoff bound the wait between NVML initialisation attempts.
	// Defaults 5s and 5m.
	InitBackoff, MaxInitBackoff time.Duration
	// TelemetryInterval is how often every GPU's utilisation, memory, temperature, power and
	// ECC counters are read. Default 10s; negative: never (the status carries no telemetry).
	TelemetryInterval time.Duration
	// TelemetryWritesPerMinute is the budget of status writes per minute that telemetry alone
	// may cause, when it moved significantly (status.TelemetryMoved); health changes go out
	// after MinWriteInterval whatever the budget. Negative: none, and the default
	// (DefaultTelemetryWritesPerMinute): telemetry rides along with the writes health, usage
	// and heartbeats cause, so the status's telemetry is at most a heartbeat old.
	TelemetryWritesPerMinute float64
	// Telemetry, when set, is given every GPU's latest reading for the Prometheus series
	// (package telemetry); nil exports none.
	Telemetry *telemetry.Collector
	// WriteLimiter, when set, caps the status writes of every agent sharing it.
	WriteLimiter flowcontrol.RateLimiter
	// SchedulerName is the scheduler of this agent's release: the GpuNodeStatus is labelled
	// with it (apiv1.LabelSchedulerName) so that only that scheduler places pods on the node.
	// Default apiv1.SchedulerName.
	SchedulerName string
	// TakeoverAfter is how long, beyond StatusRefreshInterval, the GpuNodeStatus of another
	// release's agent must have gone unwritten before this one takes it over
	// (status.Config.TakeoverAfter). Default 10m.
	TakeoverAfter time.Duration
	// OnDevices, when set, is given the node's GPUs and their health on every loop (the
	// kubelet device plugin advertises them); it must not block.
	OnDevices func([]apiv1.Device)
	// OnInventory, when set, is given the node's GPUs as discovered, after every discovery:
	// the facts that stay on the node and are not in the status, such as each GPU's device
	// minor (the device plugin hands /dev/nvidia<minor> over). It must not block.
	OnInventory func([]topology.Device)
}

func (c *Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("NodeName is empty"))
	}
	if c.GPUs == nil || c.GPUClient == nil || c.KubeClient == nil || c.Nodes == nil || c.Leases == nil {
		errs = append(errs, errors.New("GPUs, GPUClient, KubeClient, Nodes and Leases are all required"))
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ProbeInterval, 30*time.Second)
	def(&c.HeartbeatInterval, 3*time.Minute)
	def(&c.StatusRefreshInterval, 30*time.Minute)
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = "gpu-scheduler"
	}
	if c.MinWriteInterval == 0 {
		c.MinWriteInterval = time.Second
	}
	c.MinWriteInterval = max(c.MinWriteInterval, 0)
	if c.UsageWriteInterval == 0 {
		c.UsageWriteInterval = DefaultUsageWriteInterval
	}
	c.UsageWriteInterval = max(c.UsageWriteInterval, 0)
	if c.TelemetryInterval == 0 {
		c.TelemetryInterval = 10 * time.Second
	}
	if c.TelemetryWritesPerMinute == 0 {
		c.TelemetryWritesPerMinute = DefaultTelemetryWritesPerMinute
	}
	def(&c.RecoveryQuietPeriod, 5*time.Minute)
	def(&c.InitBackoff, 5*time.Second)
	def(&c.MaxInitBackoff, 5*time.Minute)
	if c.MaxInitBackoff < c.InitBackoff {
		errs = append(errs, fmt.Errorf("MaxInitBackoff %s is shorter than InitBackoff %s", c.MaxInitBackoff, c.InitBackoff))
	}
	return errors.Join(errs...)
}

// Agent runs one node's loop.
type Agent struct {
	cfg      Config
	health   *health.Tracker
	writer   *status.Writer
	liveness *liveness.Renewer
	poke     chan struct{}

	// Owned by Run's goroutine.
	session     *session
	inventory   []topology.Device
	fenced      string // why NVML is unavailable; empty when it works
	backoff     time.Duration
	nextInit    time.Time
	nextProbe   time.Time
	rediscover  bool
	lost        map[int]bool // GPUs the last probe found lost
	rewatch     bool         // a lost GPU came back: register its events anew
	writeErrors int
	nextWrite   time.Time // earliest retry after a failed write
	// transitions stamps when each GPU's published health last changed and its recoveries.
	transitions *status.Transitions
	// reported is the health last exported as a metric per GPU.
	reported map[int32]apiv1.Health
	// readings is each answering GPU's latest telemetry, read at readAt; xids the Xid errors
	// seen per GPU.
	readings      map[int]gpu.Telemetry
	readAt        time.Time
	nextTelemetry time.Time
	xids          map[int]xidCount
	// fabric is each answering GPU's multi-node NVLink domain as the last probe read it; it
	// outlives a session, like the inventory, so that a fenced node keeps its domain.
	fabric []status.GPUFabric
	// cliqueNote is the clique label conflict last logged, so that it is logged once.
	cliqueNote string
}

type xidCount struct{ count, last int64 }

type session struct {
	devices []gpu.Device
	events  chan gpu.Event
	done    chan error
	cancel  context.CancelFunc
}

// New makes an agent.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent for node %q: %w", cfg.NodeName, err)
	}
	renewer, err := liveness.New(liveness.Config{
		Node: cfg.NodeName, Namespace: cfg.LeaseNamespace, SchedulerName: cfg.SchedulerName,
		Client: cfg.KubeClient, Clock: cfg.Clock, Interval: cfg.HeartbeatInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("agent for node %q: %w", cfg.NodeName, err)
	}
	return &Agent{
		cfg:      cfg,
		health:   health.NewTracker(cfg.Clock, cfg.RecoveryQuietPeriod),
		liveness: renewer,
		writer: status.NewWriter(status.Config{
			Node: cfg.NodeName, GPUClient: cfg.GPUClient, KubeClient: cfg.KubeClient, Clock: cfg.Clock,
			Heartbeat: cfg.StatusRefreshInterval, SpreadFirstHeartbeat: true, MinInterval: cfg.MinWriteInterval,
			UsageInterval: cfg.UsageWriteInterval, TelemetryInterval: telemetryWriteInterval(cfg.TelemetryWritesPerMinute),
			Limiter:       cfg.WriteLimiter,
			SchedulerName: cfg.SchedulerName, TakeoverAfter: cfg.TakeoverAfter,
		}),
		poke:        make(chan struct{}, 1),
		transitions: status.NewTransitions(),
		lost:        map[int]bool{},
		reported:    map[int32]apiv1.Health{},
		readings:    map[int]gpu.Telemetry{},
		xids:        map[int]xidCount{},
		backoff:     cfg.InitBackoff,
	}, nil
}

// telemetryWriteInterval turns a budget of writes per minute into the shortest time between two
// telemetry-only writes; no budget: never.
func telemetryWriteInterval(perMinute float64) time.Duration {
	if perMinute <= 0 {
		return 0
	}
	return time.Duration(float64(time.Minute) / perMinute)
}

// Poke tells the agent that something outside it changed (a lease, the node, an injected
// fault): it re-reads leases, probes the GPUs and writes the status if it changed. It never blocks.
func (a *Agent) Poke() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// Run runs the loop until ctx is done. NVML failures never end it: the GPUs are reported
// Unknown and NVML is retried with backoff.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	if err := a.writer.Load(ctx); err != nil {
		logger.Error(err, "Reading the existing GpuNodeStatus failed; will create or overwrite it")
	}
	timer := a.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	if a.cfg.Telemetry != nil {
		defer a.cfg.Telemetry.Forget(a.cfg.NodeName) // after endSession, which exports once more
	}
	defer a.endSession(ctx)

	for {
		now := a.cfg.Clock.Now()
		if a.session == nil && !now.Before(a.nextInit) {
			a.startSession(ctx)
		}
		if a.session != nil && (a.rediscover || !now.Before(a.nextProbe)) {
			a.probeAll(ctx)
		}
		if a.session != nil && a.cfg.TelemetryInterval > 0 && !now.Before(a.nextTelemetry) {
			a.readTelemetry(ctx)
		}
		if a.session != nil && a.rewatch {
			a.restartWatcher(ctx)
		}
		a.renew(ctx)
		a.sync(ctx)

		// Every deadline due now was handled above, so the wait is positive; the floor only
		// guards against a spinning loop should that ever not hold.
		if !timer.Stop() {
			// Fired while the loop was busy: drop the stale tick (a fake clock would block
			// on a full channel the next time the timer fires).
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(max(a.nextWake().Sub(a.cfg.Clock.Now()), 10*time.Millisecond))
		var events <-chan gpu.Event
		var done <-chan error
		if a.session != nil {
			events, done = a.session.events, a.session.done
		}
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			a.handleEvent(ctx, ev)
		case err := <-done:
			a.session.done = nil // drained: the watcher has ended
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("the event watcher stopped")
			}
			a.fail(ctx, fmt.Errorf("watching NVML events: %w", err))
		case <-a.poke:
			if a.session != nil {
				a.nextProbe = a.cfg.Clock.Now()
			}
		case <-timer.C():
		}
	}
}

// nextWake is the earliest deadline the loop has.
func (a *Agent) nextWake() time.Time {
	next := a.writer.Due(a.desired())
	if next.Before(a.nextWrite) {
		next = a.nextWrite
	}
	if due := a.liveness.Due(); due.Before(next) {
		next = due
	}
	if a.session != nil && a.nextProbe.Before(next) {
		next = a.nextProbe
	}
	if a.session != nil && a.cfg.TelemetryInterval > 0 && a.nextTelemetry.Before(next) {
		next = a.nextTelemetry
	}
	if a.session == nil && a.nextInit.Before(next) {
		next = a.nextInit
	}
	return next
}

func (a *Agent) startSession(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if err := a.cfg.GPUs.Init(); err != nil {
		metrics.NVMLInitFailures.Inc()
		a.fence(ctx, fmt.Errorf("NVML initialisation failed: %w", err))
		return
	}
	devs, err := a.cfg.GPUs.Devices()
	if err == nil {
		err = a.discover(devs)
	}
	if err != nil {
		if serr := a.cfg.GPUs.Shutdown(); serr != nil {
			logger.V(2).Info("NVML shutdown failed", "err", serr)
		}
		a.fence(ctx, err)
		return
	}
	a.session, a.fenced, a.backoff = &session{devices: devs}, "", a.cfg.InitBackoff
	a.startWatcher(ctx)
	a.nextProbe = a.cfg.Clock.Now()
	logger.Info("NVML session started", "gpus", len(devs))
}

func (a *Agent) discover(devs []gpu.Device) error {
	inv, err := topology.Discover(devs)
	if err != nil {
		return err
	}
	a.inventory, a.rediscover = inv, false
	if a.cfg.OnInventory != nil {
		a.cfg.OnInventory(inv)
	}
	for _, d := range inv {
		if d.Lost != nil {
			a.health.Probe(d.Index, d.Lost)
		}
	}
	return nil
}

// startWatcher watches the session's GPUs for events in a goroutine that ends with ctx or the session.
func (a *Agent) startWatcher(ctx context.Context) {
	s := a.session
	sctx, cancel := context.WithCancel(ctx)
	s.events, s.done, s.cancel = make(chan gpu.Event, 64), make(chan error, 1), cancel
	events, done := s.events, s.done
	go func() { done <- a.cfg.GPUs.WatchEvents(sctx, s.devices, events) }()
}

// stopWatcher stops the watcher and waits for it: NVML's event set must not be freed while
// a wait on it is in progress.
func (a *Agent) stopWatcher() {
	s := a.session
	s.cancel()
	if s.done != nil {
		<-s.done //nolint:errcheck // the watch was cancelled here: how it ended says nothing
	}
}

// restartWatcher registers every GPU's events anew, for a GPU that was lost and came back.
func (a *Agent) restartWatcher(ctx context.Context) {
	a.rewatch = false
	a.stopWatcher()
	a.startWatcher(ctx)
}

// endSession stops the event watcher and shuts NVML down.
func (a *Agent) endSession(ctx context.Context) {
	s := a.session
	if s == nil {
		return
	}
	a.stopWatcher()
	a.session = nil
	clear(a.readings) // what NVML said last session says nothing now
	a.exportTelemetry()
	if err := a.cfg.GPUs.Shutdown(); err != nil {
		klog.FromContext(ctx).V(2).Info("NVML shutdown failed", "err", err)
	}
}

// fail ends a broken session and fences the node.
func (a *Agent) fail(ctx context.Context, err error) {
	a.endSession(ctx)
	a.fence(ctx, err)
}

// fence marks every GPU Unknown until NVML works again, and schedules the next attempt.
func (a *Agent) fence(ctx context.Context, err error) {
	a.fenced = err.Error()
	a.nextInit = a.cfg.Clock.Now().Add(a.backoff)
	klog.FromContext(ctx).Error(err, "GPUs are Unknown until NVML works again", "retryIn", a.backoff)
	a.backoff = min(2*a.backoff, a.cfg.MaxInitBackoff)
}

func (a *Agent) handleEvent(ctx context.Context, ev gpu.Event) {
	logger := klog.FromContext(ctx)
	kind := ev.Kind.String()
	if ev.Kind == gpu.EventXid {
		kind = "xid-ignored"
		if health.Critical(ev.Xid) {
			kind = "xid-critical"
		}
	}
	metrics.Events.WithLabelValues(kind).Inc()
	if ev.Kind == gpu.EventXid && ev.Device >= 0 {
		x := a.xids[ev.Device]
		x.count++
		x.last = int64(min(ev.Xid, 1<<62))
		a.xids[ev.Device] = x
		a.exportTelemetry()
	}
	switch ev.Kind {
	case gpu.EventXid:
		metrics.XidErrors.WithLabelValues(a.cfg.NodeName, metrics.GPULabel(ev.Device), strconv.FormatUint(ev.Xid, 10)).Inc()
	case gpu.EventDoubleBitECC:
		metrics.ECCErrors.WithLabelValues(a.cfg.NodeName, metrics.GPULabel(ev.Device), "double_bit").Inc()
	}
	all := make([]int, len(a.inventory))
	for i, d := range a.inventory {
		all[i] = d.Index
	}
	critical := a.health.Event(ev, all)
	if critical {
		logger.Info("GPU critical error", "gpu", ev.Device, "kind", ev.Kind.String(), "xid", ev.Xid)
	}
	if critical || ev.Kind == gpu.EventLost {
		// Learn at once whether the GPU is lost: a lost GPU that answers again has been reset.
		a.probeAll(ctx)
	}
}

func (a *Agent) probeAll(ctx context.Context) {
	if a.rediscover {
		if err := a.discover(a.session.devices); err != nil {
			a.fail(ctx, fmt.Errorf("rediscovering GPUs: %w", err))
			return
		}
	}
	a.fabric = a.fabric[:0]
	for i, d := range a.session.devices {
		err := d.Probe()
		a.health.Probe(d.Index(), err)
		isLost := errors.Is(err, gpu.ErrLost)
		if a.lost[d.Index()] && !isLost {
			a.rewatch = true
		}
		a.lost[d.Index()] = isLost
		if err == nil && i < len(a.inventory) && a.inventory[i].Lost != nil {
			a.rediscover = true // it answers again: read its facts and links
		}
		if err == nil {
			// Every probe, not once at discovery: the fabric manager registers the GPUs
			// after boot (NotStarted, InProgress, Completed), and a rack can be re-partitioned.
			f, ferr := d.Fabric()
			if ferr != nil {
				klog.FromContext(ctx).V(2).Info("Reading the GPU's NVLink fabric failed", "gpu", d.Index(), "err", ferr)
				continue
			}
			a.fabric = append(a.fabric, status.GPUFabric{Index: d.Index(), Fabric: f})
		}
	}
	a.nextProbe = a.cfg.Clock.Now().Add(a.cfg.ProbeInterval)
}

// desired is the status the node should have now.
func (a *Agent) desired() apiv1.GpuNodeStatusStatus {
	var devices []apiv1.Device
	usage := leases.Read(a.cfg.Leases, a.cfg.NodeName)
	if a.inventory != nil {
		for _, d := range a.inventory {
			dev := apiv1.Device{
				ID: int32(d.Index), UUID: d.UUID, Product: d.Product, MemoryMiB: d.MemoryMiB,
				PCIBusID: d.PCIBusID, Island: d.Island, BandwidthGBps: d.BandwidthGBps,
				MIG: status.MIG(d.MIG),
			}
			st := a.health.State(d.Index)
			dev.Health, dev.Reason = st.Health, st.Reason
			a.addTelemetry(&dev)
			devices = append(devices, dev)
		}
	} else if last := a.writer.Last(); last != nil {
		// NVML never worked in this process: keep the GPUs the last status knew, but not
		// their readings, which nobody can vouch for now.
		for _, d := range last.Status.Devices {
			devices = append(devices, apiv1.Device{
				ID: d.ID, UUID: d.UUID, Product: d.Product, MemoryMiB: d.MemoryMiB,
				PCIBusID: d.PCIBusID, Island: d.Island, BandwidthGBps: d.BandwidthGBps,
				Health: d.Health, Reason: d.Reason, MIG: d.MIG.DeepCopy(),
			})
		}
	}
	message := ""
	for i := range devices {
		d := &devices[i]
		if a.fenced != "" {
			d.Health, d.Reason = apiv1.Unknown, "NVML unavailable"
			message = a.fenced + "; retrying"
		}
		if d.Health != apiv1.Healthy {
			d.BandwidthGBps = 0 // as the API contract shows: a broken GPU carries nothing
		}
		d.InUseBy = usage.GPUs[int(d.ID)]
		if sh, ok := usage.Shares[int(d.ID)]; ok {
			d.Shares = &sh
		}
		status.MIGUsage(d, usage.MIG)
	}
	// After fencing: the published health is what transitions are about. A transition comes
	// with a health change, which is written anyway, so this costs no writes.
	a.transitions.Stamp(devices, a.writer.Last(), a.cfg.Clock.Now())
	if len(devices) == 0 && a.fenced != "" {
		message = a.fenced + "; retrying"
	}
	var fabric *apiv1.Fabric
	if a.inventory != nil {
		var why string
		fabric, why = status.NodeFabric(a.fabric)
		if message == "" {
			message = why
		}
	} else if last := a.writer.Last(); last != nil {
		fabric = last.Status.Fabric // as the GPUs above: what the last status knew
	}
	st := status.Summarize(devices, message)
	st.Fabric = fabric
	if len(a.readings) > 0 && a.inventory != nil {
		st.TelemetryTime = &metav1.Time{Time: a.readAt}
	}
	return st
}

// renew renews the liveness Lease when it is due. It runs whether or not NVML works: the
// lease says the agent lives, and a fenced node's status (GPUs Unknown) must stay trusted.
func (a *Agent) renew(ctx context.Context) {
	if a.cfg.Clock.Now().Before(a.liveness.Due()) {
		return
	}
	node, err := a.cfg.Nodes.Get(a.cfg.NodeName)
	if err != nil {
		node = nil // needed only to create the lease; Renew says so if it must
	}
	if _, err := a.liveness.Renew(ctx, node); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Renewing the liveness lease failed", "retryAt", a.liveness.Due())
	}
}

// sync writes the status and labels when they changed.
func (a *Agent) sync(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if a.cfg.Clock.Now().Before(a.nextWrite) {
		return
	}
	node, err := a.cfg.Nodes.Get(a.cfg.NodeName)
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Reading node from cache failed")
	}
	if err != nil {
		node = nil
	}
	want := a.desired()
	if a.cfg.OnDevices != nil {
		a.cfg.OnDevices(want.Devices)
	}
	for _, d := range want.Devices {
		// Only on change: a label lookup per GPU per loop added up across a 5,000-node fleet.
		if a.reported[d.ID] != d.Health {
			metrics.SetHealth(a.cfg.NodeName, d.ID, d.Health)
			a.reported[d.ID] = d.Health
		}
	}
	_, err = a.writer.Sync(ctx, node, want)
	if err == nil && a.inventory != nil && a.fenced == "" {
		clique := ""
		if want.Fabric != nil {
			clique = want.Fabric.Clique
		}
		var conflict string
		_, conflict, err = a.writer.SyncLabels(ctx, node, status.Labels(want.Devices, hasNVLink(a.inventory)), clique)
		if conflict != a.cliqueNote {
			if conflict != "" {
				logger.Info("Leaving the node's clique label alone", "reason", conflict)
			}
			a.cliqueNote = conflict
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		a.writeErrors++
		delay := min(time.Duration(1<<min(a.writeErrors, 6))*time.Second, time.Minute)
		a.nextWrite = a.cfg.Clock.Now().Add(delay)
		logger.Error(err, "Writing GPU status failed", "retryIn", delay)
		return
	}
	a.writeErrors, a.nextWrite = 0, time.Time{}
}

func hasNVLink(inv []topology.Device) bool {
	for _, d := range inv {
		if d.NVLink {
			return true
		}
	}
	return false
}

// NodeName is the node this agent reports on.
func (a *Agent) NodeName() string { return a.cfg.NodeName }
