// Package status writes a node's GpuNodeStatus and GPU labels, and only when something
// changed: at 5,000 nodes every write counts. An unchanged status is still rewritten (its
// LastHeartbeatTime refreshed) once per refresh interval, long by default (30 minutes): the
// agent's liveness signal is its small Lease (package agent/liveness), as a kubelet's is its
// node Lease, because one GpuNodeStatus write of a DGX costs the apiserver ~5.7 ms of CPU.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/spread"
	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Summarize fills Total, Healthy and Free from devices.
func Summarize(devices []apiv1.Device, message string) apiv1.GpuNodeStatusStatus {
	st := apiv1.GpuNodeStatusStatus{Devices: devices, Total: int32(len(devices)), Message: message}
	for _, d := range devices {
		if d.Health == apiv1.Healthy {
			st.Healthy++
			// A GPU in MIG mode is never allocated whole, so it is never a free GPU.
			if len(d.InUseBy) == 0 && (d.MIG == nil || !d.MIG.Enabled) {
				st.Free++
			}
		}
	}
	return st
}

// Same tells whether two statuses say the same, heartbeat and telemetry time aside, with
// telemetry compared at its significance (see TelemetryMoved): a GPU whose utilisation moved
// by a point has nothing new to say. Nil and empty lists are the same. It is written out rather
// than reflected: a fleet of 5,000 agents compares statuses on every loop, and reflection made
// that a third of the simulator's CPU.
func Same(a, b apiv1.GpuNodeStatusStatus) bool {
	return a.Free == b.Free && sameCounts(a, b) && devicesEqual(a.Devices, b.Devices, true) && !TelemetryMoved(a, b)
}

// sameHardware tells whether two statuses differ at most in usage (inUseBy, free), telemetry
// and heartbeat.
func sameHardware(a, b apiv1.GpuNodeStatusStatus) bool {
	return sameCounts(a, b) && devicesEqual(a.Devices, b.Devices, false)
}

func sameCounts(a, b apiv1.GpuNodeStatusStatus) bool {
	return a.Total == b.Total && a.Healthy == b.Healthy && a.Message == b.Message && fabricEqual(a.Fabric, b.Fabric)
}

func devicesEqual(x, y []apiv1.Device, usage bool) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		a, b := &x[i], &y[i]
		if a.ID != b.ID || a.Health != b.Health || a.BandwidthGBps != b.BandwidthGBps || a.Island != b.Island ||
			a.UUID != b.UUID || a.Product != b.Product || a.MemoryMiB != b.MemoryMiB || a.PCIBusID != b.PCIBusID ||
			a.Reason != b.Reason || !a.LastTransitionTime.Equal(b.LastTransitionTime) || a.RecoveryCount != b.RecoveryCount {
			return false
		}
		if !migEqual(a.MIG, b.MIG, usage) {
			return false
		}
		if usage && (!slices.Equal(a.InUseBy, b.InUseBy) || !sharesEqual(a.Shares, b.Shares)) {
			return false
		}
	}
	return true
}

func sharesEqual(a, b *apiv1.DeviceShares) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// migEqual compares two GPUs' MIG state; the devices' holders only when usage is set.
func migEqual(a, b *apiv1.DeviceMIG, usage bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Enabled != b.Enabled || a.Slices != b.Slices || len(a.Devices) != len(b.Devices) {
		return false
	}
	for i := range a.Devices {
		x, y := &a.Devices[i], &b.Devices[i]
		if x.Slot != y.Slot || x.Size != y.Size || x.Profile != y.Profile || x.UUID != y.UUID ||
			x.MemoryMiB != y.MemoryMiB || x.Health != y.Health || x.Reason != y.Reason {
			return false
		}
		if usage && !slices.Equal(x.InUseBy, y.InUseBy) {
			return false
		}
	}
	return true
}

// MIG is the published form of a GPU's MIG state as discovered; nil for a GPU without MIG.
// Health and holders are set by MIGUsage.
func MIG(m *gpu.MIG) *apiv1.DeviceMIG {
	if m == nil {
		return nil
	}
	out := &apiv1.DeviceMIG{Enabled: m.Enabled, Slices: int32(m.Slices)}
	for _, d := range m.Devices {
		out.Devices = append(out.Devices, apiv1.MigDevice{
			Slot: int32(d.Slot), Size: int32(d.Size), Profile: d.Profile, UUID: d.UUID, MemoryMiB: d.MemoryMiB,
		})
	}
	return out
}

// MIGUsage sets the health of d's MIG devices from their GPU's (a MIG device of a GPU that is
// not Healthy is not either, for the same reason) and their holders from their leases.
func MIGUsage(d *apiv1.Device, holders map[apiv1.MIGDeviceRef][]string) {
	if d.MIG == nil {
		return
	}
	for i := range d.MIG.Devices {
		m := &d.MIG.Devices[i]
		m.Health, m.Reason = d.Health, d.Reason
		m.InUseBy = holders[apiv1.MIGDeviceRef{GPU: int(d.ID), Slot: int(m.Slot)}]
	}
}

// Significance of a telemetry change: below these a reading is "the same" and is not worth a
// write of its own. Counters (Xid, ECC) are significant at every step.
const (
	utilizationStep = 5  // percentage points, GPU and memory utilisation
	memoryUsedStep  = 5  // percent of the GPU's memory
	temperatureStep = 3  // degrees Celsius
	powerStep       = 25 // watts
)

// TelemetryMoved tells whether the devices' telemetry differs significantly between two
// statuses: a reading appeared or vanished, a gauge moved by its step or more, or a counter
// changed. Devices are compared by position; a different device list is a hardware change.
func TelemetryMoved(a, b apiv1.GpuNodeStatusStatus) bool {
	if len(a.Devices) != len(b.Devices) {
		return true
	}
	for i := range a.Devices {
		x, y := &a.Devices[i], &b.Devices[i]
		memStep := max(int64(1), x.MemoryMiB*memoryUsedStep/100)
		if moved(x.UtilizationPercent, y.UtilizationPercent, utilizationStep) ||
			moved(x.MemoryUtilizationPercent, y.MemoryUtilizationPercent, utilizationStep) ||
			moved(x.MemoryUsedMiB, y.MemoryUsedMiB, memStep) ||
			moved(x.TemperatureCelsius, y.TemperatureCelsius, temperatureStep) ||
			moved(x.PowerWatts, y.PowerWatts, powerStep) ||
			moved(x.ECCCorrectedErrors, y.ECCCorrectedErrors, 1) ||
			moved(x.ECCUncorrectedErrors, y.ECCUncorrectedErrors, 1) ||
			x.XidErrors != y.XidErrors || x.LastXid != y.LastXid {
			return true
		}
	}
	return false
}

// moved tells whether a reading appeared, vanished or changed by step or more.
func moved[T int32 | int64](a, b *T, step T) bool {
	if a == nil || b == nil {
		return (a == nil) != (b == nil)
	}
	d := *a - *b
	return d >= step || -d >= step
}

// Config configures a Writer.
type Config struct {
	Node       string
	GPUClient  versioned.Interface
	KubeClient kubernetes.Interface
	Clock      clock.PassiveClock
	// Heartbeat is the longest time between two writes: an unchanged status is rewritten (its
	// LastHeartbeatTime refreshed) this often. Each node writes a little earlier (up to 20%,
	// fixed per node) so that a fleet started at once does not beat in step (package spread).
	Heartbeat time.Duration
	// SpreadFirstHeartbeat makes the first heartbeat after the writer starts come after a
	// fraction of Heartbeat fixed per node (spread.New).
	SpreadFirstHeartbeat bool
	// MinInterval is the shortest time between two status writes: changes that come in a
	// burst (a pod's leases) are written together.
	MinInterval time.Duration
	// UsageInterval is the shortest time between two writes when only usage (inUseBy, free)
	// changed. The scheduler never reads usage from here (its leases are the lock), so usage
	// can lag; health and hardware changes still go out after MinInterval, carrying usage with
	// them. When a burst of pods lands on a node, this turns one write per pod into one per
	// interval; at Heartbeat or more, usage causes no write of its own and goes out with the
	// next heartbeat. Zero means MinInterval.
	UsageInterval time.Duration
	// TelemetryInterval is the shortest time between two writes when only telemetry moved
	// significantly (TelemetryMoved): 1/budget of a minute for a budget of writes per node per
	// minute. Zero means telemetry never causes a write on its own; it rides along with the
	// writes that health, usage and heartbeats cause.
	TelemetryInterval time.Duration
	// Limiter, when set, is shared by every writer of a process (fleet mode) to cap writes.
	Limiter flowcontrol.RateLimiter
	// SchedulerName is the scheduler whose pool this node is in: the writer labels the
	// GpuNodeStatus with it (apiv1.LabelSchedulerName), and that scheduler alone places pods
	// here. Default apiv1.SchedulerName.
	SchedulerName string
	// TakeoverAfter is how long the heartbeat of a status labelled for another scheduler must
	// be silent, beyond the refresh interval (Heartbeat), before this writer takes the status
	// over. Until then Sync refuses with an *OwnedError: two agents of two releases on one node
	// (overlapping node selectors) would otherwise overwrite each other's status on every loop.
	// The owner's liveness Lease lives in its release's lease namespace, which this agent
	// neither knows nor may read; what it can see is the status, which a live owner rewrites at
	// least once per refresh interval. So the status is taken over only once its heartbeat is
	// older than Heartbeat + TakeoverAfter: never from a live owner that refreshes at most as
	// seldom as this writer (releases of one chart share the default). Default 10m, the
	// scheduler's default statusFreshnessSeconds.
	TakeoverAfter time.Duration
}

// OwnedError is Sync's refusal to write a node's GpuNodeStatus that another release's agent
// publishes and still heartbeats.
type OwnedError struct {
	Node, Owner, Self string
	// Heartbeat is the owner's last heartbeat; TakeoverAt is when this writer may take over.
	Heartbeat, TakeoverAt time.Time
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("GpuNodeStatus %s is published for scheduler %q (last heartbeat %s), not %q: "+
		"two releases' agents run on node %s; give the releases disjoint agent node selectors "+
		"(this agent takes the status over at %s if the other one stops)",
		e.Node, e.Owner, e.Heartbeat.UTC().Format(time.RFC3339), e.Self, e.Node, e.TakeoverAt.UTC().Format(time.RFC3339))
}

// Writer writes one node's GpuNodeStatus.
type Writer struct {
	cfg       Config
	beat      *spread.Beat
	last      *apiv1.GpuNodeStatus // as last read or written; nil until loaded
	lastWrite time.Time
	// labelsFrom is the node resourceVersion the last label patch was computed from: while the
	// cache still shows it, the patch is in flight and is not sent again.
	labelsFrom string
	// telemetryHeld is when a telemetry-only write found the shared limiter empty: telemetry
	// yields to the fleet's health writes and tries again a TelemetryInterval later.
	telemetryHeld time.Time
}

// NewWriter makes a writer.
func NewWriter(cfg Config) *Writer {
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = apiv1.SchedulerName
	}
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = 10 * time.Minute
	}
	return &Writer{cfg: cfg, beat: spread.New(cfg.Node, cfg.Heartbeat, cfg.SpreadFirstHeartbeat)}
}

// HeartbeatInterval is this node's heartbeat interval, after its fixed jitter.
func (w *Writer) HeartbeatInterval() time.Duration { return w.beat.Every() }

// takeoverAt is when a status whose owner last wrote it at heartbeat may be taken over: see
// Config.TakeoverAfter.
func (w *Writer) takeoverAt(heartbeat time.Time) time.Time {
	return heartbeat.Add(w.cfg.Heartbeat + w.cfg.TakeoverAfter)
}

// Last is the status as last read or written, nil when none is known yet.
func (w *Writer) Last() *apiv1.GpuNodeStatus { return w.last }

// Load reads the existing object, if any, so that a restarted agent neither rewrites an
// unchanged status nor forgets the GPUs it knew when NVML now fails.
func (w *Writer) Load(ctx context.Context) error {
	obj, err := w.cfg.GPUClient.GpuV1().GpuNodeStatuses().Get(ctx, w.cfg.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get GpuNodeStatus %s: %w", w.cfg.Node, err)
	}
	w.last = obj
	return nil
}

// Due is when Sync next has something to do for want: MinInterval after the last write when
// health or hardware differ from what was written, UsageInterval after it when usage does,
// TelemetryInterval after it when only telemetry moved significantly, else the next heartbeat.
func (w *Writer) Due(want apiv1.GpuNodeStatusStatus) time.Time {
	if w.last == nil || !sameHardware(w.last.Status, want) {
		return w.lastWrite.Add(w.cfg.MinInterval)
	}
	last := &w.last.Status
	heartbeat := w.nextHeartbeat(last.LastHeartbeatTime.Time)
	if last.Free != want.Free || !devicesEqual(last.Devices, want.Devices, true) {
		// Never later than the heartbeat: with UsageInterval at the heartbeat interval, usage
		// rides along with the heartbeat (and with any health write before it).
		usage := w.lastWrite.Add(max(w.cfg.UsageInterval, w.cfg.MinInterval))
		if heartbeat.Before(usage) {
			return heartbeat
		}
		return usage
	}
	if w.cfg.TelemetryInterval > 0 && TelemetryMoved(*last, want) {
		t := w.lastWrite.Add(max(w.cfg.TelemetryInterval, w.cfg.MinInterval))
		if held := w.telemetryHeld.Add(w.cfg.TelemetryInterval); held.After(t) {
			t = held
		}
		if t.Before(heartbeat) {
			return t
		}
	}
	return heartbeat
}

// nextHeartbeat is when the heartbeat after one at last is due (spread.Beat.Next).
func (w *Writer) nextHeartbeat(last time.Time) time.Time { return w.beat.Next(last) }

// telemetryOnly tells whether want differs from what was written only in telemetry, with no
// heartbeat due: a write the shared limiter may refuse.
func (w *Writer) telemetryOnly(want apiv1.GpuNodeStatusStatus, now time.Time) bool {
	if w.last == nil || !sameHardware(w.last.Status, want) {
		return false
	}
	last := &w.last.Status
	return last.Free == want.Free && devicesEqual(last.Devices, want.Devices, true) &&
		now.Before(w.nextHeartbeat(last.LastHeartbeatTime.Time))
}

// Sync writes want when it changed or a heartbeat is due and MinInterval has passed. node
// is the Node (for the owner reference); it reports whether it wrote.
func (w *Writer) Sync(ctx context.Context, node *corev1.Node, want apiv1.GpuNodeStatusStatus) (bool, error) {
	now := w.cfg.Clock.Now()
	if now.Before(w.Due(want)) {
		return false, nil
	}
	if w.cfg.Limiter != nil && w.telemetryOnly(want, now) {
		if !w.cfg.Limiter.TryAccept() {
			w.telemetryHeld = now
			return false, nil
		}
	} else if w.cfg.Limiter != nil {
		if err := w.cfg.Limiter.Wait(ctx); err != nil {
			return false, fmt.Errorf("write GpuNodeStatus %s: %w", w.cfg.Node, err)
		}
	}
	client := w.cfg.GPUClient.GpuV1().GpuNodeStatuses()
	if w.last == nil {
		if node == nil {
			return false, fmt.Errorf("create GpuNodeStatus %s: node %s is not known yet", w.cfg.Node, w.cfg.Node)
		}
		obj := &apiv1.GpuNodeStatus{
			ObjectMeta: metav1.ObjectMeta{
				Name:   w.cfg.Node,
				Labels: map[string]string{apiv1.LabelSchedulerName: w.cfg.SchedulerName},
				// Owned by the Node: the garbage collector deletes it with the node.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: apiv1.GpuNodeStatusSpec{NodeName: w.cfg.Node},
		}
		created, err := client.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = client.Get(ctx, w.cfg.Node, metav1.GetOptions{})
		}
		if err != nil {
			metrics.StatusWrites.WithLabelValues("error").Inc()
			return false, fmt.Errorf("create GpuNodeStatus %s: %w", w.cfg.Node, err)
		}
		metrics.StatusWrites.WithLabelValues("created").Inc()
		w.last = created
	}
	if err := w.own(ctx, now); err != nil {
		return false, err
	}
	obj := w.last.DeepCopy()
	obj.Status = want
	obj.Status.LastHeartbeatTime = metav1.NewTime(now)
	updated, err := client.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		result := "error"
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Someone else changed or deleted it: read it again on the next Sync.
			result = "conflict"
			w.last = nil
			if lerr := w.Load(ctx); lerr != nil {
				klog.FromContext(ctx).V(2).Info("Reloading GpuNodeStatus failed", "node", w.cfg.Node, "err", lerr)
			}
		}
		metrics.StatusWrites.WithLabelValues(result).Inc()
		return false, fmt.Errorf("update status of GpuNodeStatus %s: %w", w.cfg.Node, err)
	}
	metrics.StatusWrites.WithLabelValues("updated").Inc()
	w.last, w.lastWrite = updated, now
	w.beat.Wrote(now)
	return true, nil
}

// owner is the scheduler a status is published for; "" for a status without the label
// (written by an agent older than it), which any agent may claim.
func owner(gns *apiv1.GpuNodeStatus) string { return gns.Labels[apiv1.LabelSchedulerName] }

// own makes w.last carry this writer's scheduler label and this node as spec.nodeName, taking the status over from another
// scheduler's agent only once that agent's heartbeat has been silent for the refresh interval
// and TakeoverAfter (Config.TakeoverAfter). The
// label is metadata, which the status subresource ignores: it costs one more write, once.
func (w *Writer) own(ctx context.Context, now time.Time) error {
	if owner(w.last) == w.cfg.SchedulerName && w.last.Spec.NodeName == w.cfg.Node {
		return nil
	}
	client := w.cfg.GPUClient.GpuV1().GpuNodeStatuses()
	if o := owner(w.last); o != "" && o != w.cfg.SchedulerName {
		// Our copy may be old: decide on the owner's latest heartbeat.
		fresh, err := client.Get(ctx, w.cfg.Node, metav1.GetOptions{})
		if err != nil {
			w.last = nil
			return fmt.Errorf("get GpuNodeStatus %s: %w", w.cfg.Node, err)
		}
		w.last = fresh
		if o := owner(fresh); o != w.cfg.SchedulerName && o != "" {
			hb := fresh.Status.LastHeartbeatTime.Time
			if at := w.takeoverAt(hb); now.Before(at) {
				metrics.StatusWrites.WithLabelValues("refused").Inc()
				return &OwnedError{Node: w.cfg.Node, Owner: o, Self: w.cfg.SchedulerName, Heartbeat: hb, TakeoverAt: at}
			}
			klog.FromContext(ctx).Info("Taking over a GpuNodeStatus whose agent stopped heartbeating",
				"gpuNodeStatus", klog.KObj(fresh), "from", o, "lastHeartbeat", hb)
		}
		if owner(fresh) == w.cfg.SchedulerName && fresh.Spec.NodeName == w.cfg.Node {
			return nil
		}
	}
	obj := w.last.DeepCopy()
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels[apiv1.LabelSchedulerName] = w.cfg.SchedulerName
	// The scheduler keys the inventory by spec.nodeName, and the chart's agent policy lets an
	// agent write only a status whose spec.nodeName is its node: a status another source wrote
	// (the simulator, an older agent, a hand-made one) with another or no spec.nodeName is put
	// right here, else its every status write would be refused.
	obj.Spec.NodeName = w.cfg.Node
	// The update carries the resourceVersion just read: of two agents claiming one status at
	// once, one gets a conflict, reads the other's label and refuses.
	updated, err := client.Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			w.last = nil
			if lerr := w.Load(ctx); lerr != nil {
				klog.FromContext(ctx).V(2).Info("Reloading GpuNodeStatus failed", "node", w.cfg.Node, "err", lerr)
			}
		}
		metrics.StatusWrites.WithLabelValues("error").Inc()
		return fmt.Errorf("label GpuNodeStatus %s for scheduler %q: %w", w.cfg.Node, w.cfg.SchedulerName, err)
	}
	w.last = updated
	return nil
}

// Labels are the node labels users select on.
func Labels(devices []apiv1.Device, nvlink bool) map[string]string {
	l := map[string]string{
		apiv1.LabelGPUCount: strconv.Itoa(len(devices)),
		apiv1.LabelNVLink:   strconv.FormatBool(nvlink),
	}
	if len(devices) > 0 {
		if p := LabelValue(devices[0].Product); p != "" {
			l[apiv1.LabelGPUProduct] = p
		}
	}
	return l
}

// LabelValue makes a product name a valid label value: "NVIDIA H100 80GB HBM3" becomes
// "NVIDIA-H100-80GB-HBM3".
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.Trim(string(b), "-_.")
}

// SyncLabels patches node's GPU labels when they differ from want, and its clique label
// (apiv1.LabelGPUClique) as CliqueChange says for clique ("" when the node is in no
// registered NVLink domain); it reports whether it patched and, when the clique label is
// someone else's and says otherwise, why it was left alone.
func (w *Writer) SyncLabels(ctx context.Context, node *corev1.Node, want map[string]string, clique string) (bool, string, error) {
	if node == nil {
		return false, "", nil
	}
	labels := map[string]any{}
	for k, v := range want {
		if node.Labels[k] != v {
			labels[k] = v
		}
	}
	change := CliqueChange(node, clique)
	maps.Copy(labels, change.Labels)
	if len(labels) == 0 && len(change.Annotations) == 0 || node.ResourceVersion == w.labelsFrom && w.labelsFrom != "" {
		return false, change.Conflict, nil
	}
	meta := map[string]any{"labels": labels}
	if len(change.Labels) > 0 || len(change.Annotations) > 0 {
		meta["annotations"] = change.Annotations
		// The clique label is set only where nobody else has set one: the resourceVersion
		// the decision was made on makes the patch fail, rather than overwrite, when the
		// node changed since (NVIDIA's labeller set the label in between); the next loop
		// decides again on the node as it is then.
		meta["resourceVersion"] = node.ResourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return false, change.Conflict, fmt.Errorf("label node %s: %w", node.Name, err)
	}
	if _, err := w.cfg.KubeClient.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, change.Conflict, fmt.Errorf("label node %s: %w", node.Name, err)
	}
	metrics.LabelPatches.Inc()
	w.labelsFrom = node.ResourceVersion
	return true, change.Conflict, nil
}

// AnnotationClique records on the node the value of the clique label (apiv1.LabelGPUClique)
// the agent set, so that the agent changes or removes only a value it set itself.
//
// NVIDIA's GPU Feature Discovery sets the same label, through node-feature-discovery, with
// the same value. An annotation rather than server-side apply's field ownership: the agents'
// node caches drop managedFields (their memory, at thousands of nodes), so only the apiserver
// could tell who owns the label, and a refused apply would be retried on every loop; the
// annotation is in the cache, survives the agent's restarts, and tells a reader of the node
// who set the label.
const AnnotationClique = apiv1.LabelPrefix + "agent-clique"

// CliqueLabelChange is what the node's clique label and its AnnotationClique should become:
// a value to set, or nil to remove the key. Conflict, when set, says why a label someone else
// set was left alone although it disagrees with NVML.
type CliqueLabelChange struct {
	Labels, Annotations map[string]any
	Conflict            string
}

// CliqueChange decides the change of node's clique label towards clique ("": none):
//   - label absent: set it to clique (and record it in AnnotationClique);
//   - label set by the agent (equal to the annotation): follow clique, removing it when clique
//     is "";
//   - label set by anyone else: leave it, whatever it says; a stale annotation (someone
//     replaced the agent's value) is dropped, so that the label is never taken back.
func CliqueChange(node *corev1.Node, clique string) CliqueLabelChange {
	var c CliqueLabelChange
	cur, has := node.Labels[apiv1.LabelGPUClique]
	mine, recorded := node.Annotations[AnnotationClique]
	switch {
	case !has && clique != "":
		c.Labels = map[string]any{apiv1.LabelGPUClique: clique}
		c.Annotations = map[string]any{AnnotationClique: clique}
	case !has && recorded:
		c.Annotations = map[string]any{AnnotationClique: nil}
	case has && recorded && cur == mine:
		switch {
		case clique == "":
			c.Labels = map[string]any{apiv1.LabelGPUClique: nil}
			c.Annotations = map[string]any{AnnotationClique: nil}
		case clique != cur:
			c.Labels = map[string]any{apiv1.LabelGPUClique: clique}
			c.Annotations = map[string]any{AnnotationClique: clique}
		}
	case has:
		if recorded {
			c.Annotations = map[string]any{AnnotationClique: nil}
		}
		if cur != clique {
			nvml := fmt.Sprintf("NVML reports clique %q", clique)
			if clique == "" {
				nvml = "NVML reports no registered NVLink domain"
			}
			c.Conflict = fmt.Sprintf("node label %s=%q was set by someone else (NVIDIA's GPU Feature Discovery sets it too) and %s; the agent leaves the label alone",
				apiv1.LabelGPUClique, cur, nvml)
		}
	}
	return c
}
