// Package liveness renews a node agent's liveness Lease: the small object the scheduler reads
// to tell a live agent from a dead one, as it reads a kubelet's node Lease.
//
// Without it, the agent would rewrite its node's GpuNodeStatus every few minutes only to say
// "still here". One such custom-resource write of a DGX status (eight devices with telemetry)
// costs the apiserver several ms of CPU and reaches every GpuNodeStatus watcher: at 5,000 nodes
// every 3 minutes, ~28 writes a second, a steady load whatever the scheduler does
// (docs/benchmarks.md). A Lease renewal is a small protobuf write watched by the scheduler
// alone, so the status is written on change and refreshed only every 30 minutes.
package liveness

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/agent/spread"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// DefaultLeaseDuration is the leaseDurationSeconds the agent writes: the scheduler's default
// statusFreshnessSeconds, which is what actually judges a renewal (the scheduler reads only
// renewTime). It tells a reader (kubectl) how long a renewal vouches for the node.
const DefaultLeaseDuration = 10 * time.Minute

// Config configures a Renewer.
type Config struct {
	// Node is the node whose agent this is: the lease's holderIdentity.
	Node string
	// Namespace is the scheduler's GPU lease namespace, where the scheduler watches liveness
	// leases (apiv1.LabelAgentLiveness).
	Namespace string
	// SchedulerName is the agent's release; the lease's apiv1.LabelAgentLiveness value.
	SchedulerName string
	Client        kubernetes.Interface
	Clock         clock.PassiveClock
	// Interval is the longest time between two renewals, spread per node as the status
	// writes are (package spread): a fleet started at once does not renew in step.
	Interval time.Duration
	// LeaseDuration is written as leaseDurationSeconds. Default DefaultLeaseDuration.
	LeaseDuration time.Duration
}

// Renewer renews one node's liveness Lease. It is not safe for concurrent use: the agent's
// loop owns it, so a renewal comes from the same goroutine (and clock) as the status writes.
type Renewer struct {
	cfg  Config
	name string
	beat *spread.Beat
	// latest is the lease as last written; nil until the first renewal, or after a conflict.
	latest *coordinationv1.Lease
	// renewed is when the lease was last renewed; zero before the first renewal.
	renewed time.Time
	// retryAt is when a failed renewal is tried again; zero when the last one worked.
	retryAt  time.Time
	failures int
}

// New makes a renewer; it fails when the node's lease name is not a valid object name.
func New(cfg Config) (*Renewer, error) {
	if cfg.Client == nil || cfg.Namespace == "" {
		return nil, errors.New("liveness lease: Client and Namespace are required")
	}
	name, err := apiv1.AgentLeaseName(cfg.Node)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = apiv1.SchedulerName
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("liveness lease %s/%s: renewal interval %s is not positive", cfg.Namespace, name, cfg.Interval)
	}
	return &Renewer{cfg: cfg, name: name, beat: spread.New(cfg.Node, cfg.Interval, true)}, nil
}

// Name is the lease's name.
func (r *Renewer) Name() string { return r.name }

// Interval is this node's renewal interval, after its fixed jitter.
func (r *Renewer) Interval() time.Duration { return r.beat.Every() }

// Renewed is when the lease was last renewed; zero before the first renewal.
func (r *Renewer) Renewed() time.Time { return r.renewed }

// Due is when Renew next has something to do: at once before the first renewal (a restarted
// agent makes its node fresh without waiting), then the spread interval after the last one,
// or the retry time after a failure.
func (r *Renewer) Due() time.Time {
	if !r.retryAt.IsZero() {
		return r.retryAt
	}
	if r.renewed.IsZero() {
		return time.Time{}
	}
	return r.beat.Next(r.renewed)
}

// maxRetry bounds the wait after failed renewals (1 s, 2 s, 4 s, ...).
const maxRetry = time.Minute

// Renew renews the lease when it is due, creating it if it does not exist; node (for the owner
// reference: the garbage collector deletes the lease with its Node) is needed only then. It
// reports whether it renewed. After an error it waits (doubling, up to a minute) before the
// next try.
func (r *Renewer) Renew(ctx context.Context, node *corev1.Node) (bool, error) {
	now := r.cfg.Clock.Now()
	if now.Before(r.Due()) {
		return false, nil
	}
	if err := r.renew(ctx, node, now); err != nil {
		r.failures++
		r.retryAt = now.Add(min(time.Duration(1<<min(r.failures-1, 6))*time.Second, maxRetry))
		return false, err
	}
	r.failures, r.retryAt = 0, time.Time{}
	r.renewed = now
	r.beat.Wrote(now)
	return true, nil
}

func (r *Renewer) renew(ctx context.Context, node *corev1.Node, now time.Time) error {
	client := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	if r.latest != nil {
		// As the kubelet's node lease controller does: the agent alone writes its lease, so
		// the copy it wrote last is current and the renewal needs no read first.
		err := r.update(ctx, r.latest, now)
		if err == nil || !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Liveness lease changed or went away; reading it again", "lease", klog.KRef(r.cfg.Namespace, r.name), "err", err)
		r.latest = nil
	}
	cur, err := client.Get(ctx, r.name, metav1.GetOptions{})
	if err == nil {
		return r.update(ctx, cur, now)
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get liveness lease %s/%s: %w", r.cfg.Namespace, r.name, err)
	}
	if node == nil {
		return fmt.Errorf("create liveness lease %s/%s: node %s is not known yet", r.cfg.Namespace, r.name, r.cfg.Node)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.name, Namespace: r.cfg.Namespace,
			Labels: map[string]string{apiv1.LabelAgentLiveness: r.cfg.SchedulerName},
			// A namespaced object may be owned by a cluster-scoped one: deleted with its Node.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
		},
		Spec: coordinationv1.LeaseSpec{AcquireTime: &metav1.MicroTime{Time: now}},
	}
	r.fill(lease, now)
	writes.creates.Add(1)
	created, err := client.Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		metrics.LivenessWrites.WithLabelValues(result(err)).Inc()
		return fmt.Errorf("create liveness lease %s/%s: %w", r.cfg.Namespace, r.name, err)
	}
	metrics.LivenessWrites.WithLabelValues("created").Inc()
	r.latest = created
	return nil
}

// update writes base renewed at now.
func (r *Renewer) update(ctx context.Context, base *coordinationv1.Lease, now time.Time) error {
	lease := base.DeepCopy()
	r.fill(lease, now)
	writes.renewals.Add(1)
	updated, err := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		metrics.LivenessWrites.WithLabelValues(result(err)).Inc()
		return fmt.Errorf("renew liveness lease %s/%s: %w", r.cfg.Namespace, r.name, err)
	}
	metrics.LivenessWrites.WithLabelValues("renewed").Inc()
	r.latest = updated
	return nil
}

// fill asserts what the lease says: who holds it, for how long, renewed when, and the label
// the scheduler selects on (put back should someone have removed it).
func (r *Renewer) fill(l *coordinationv1.Lease, now time.Time) {
	// A liveness lease another source wrote may say otherwise: never the GPU leases' label
	// (the chart's agent policy refuses a liveness lease carrying it), and held by this node
	// (the scheduler counts the lease for the node its holderIdentity names, and the policy
	// refuses any other).
	claims.RenewLiveness(l, r.cfg.Node, r.cfg.SchedulerName, now)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(r.cfg.LeaseDuration / time.Second))
}

func result(err error) string {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		return "conflict"
	}
	return "error"
}

// writes counts the liveness lease writes this process sent (creates and updates, failed ones
// included, as the apiserver counts requests), for the simulator's report: the apiserver's
// request counter cannot tell them from GPU lease creates and kwok's node lease renewals.
var writes struct{ creates, renewals atomic.Int64 }

// Writes is how many liveness lease creates and renewals (updates) this process has sent.
func Writes() (creates, renewals int64) { return writes.creates.Load(), writes.renewals.Load() }
