package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// Pod labels and annotations the simulator sets.
const (
	// AnnotationDuration makes kwok complete a running pod after that long (sim/cluster stages).
	AnnotationDuration = "sim.gpu.scheduling/duration"
	// LabelRun marks every workload pod and claim.
	LabelRun = "sim.gpu.scheduling/run"
	// LabelKind is the pod's mix entry.
	LabelKind = "sim.gpu.scheduling/kind"
)

// buildPod makes the pod of one plan entry for a run of mode. For the gpu-scheduler it names
// its claim (in the templated bare pods run, its controller's claim template); for the stock scheduler it asks for nvidia.com/gpu, or with DRA for a claim from
// its shape's ResourceClaimTemplate, and turns the claim's selector into a nodeSelector.
func buildPod(p scenario.PodPlan, ns, run, mode string) *corev1.Pod {
	stock := IsStock(mode)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: ns,
			Labels:      map[string]string{LabelRun: run, LabelKind: p.Kind},
			Annotations: map[string]string{},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "job", Image: "registry.example/sim/gpu-job:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
				}},
			}},
		},
	}
	if p.CPUMilli > 0 {
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(p.CPUMilli), resource.DecimalSI)
	}
	if p.MemoryMiB > 0 {
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(int64(p.MemoryMiB)<<20, resource.BinarySI)
	}
	if p.Duration > 0 {
		pod.Annotations[AnnotationDuration] = p.Duration.String()
	}
	if stock {
		q := *resource.NewQuantity(int64(p.Claim.Count), resource.DecimalSI)
		pod.Spec.Containers[0].Resources.Requests[cluster.ResourceGPU] = q
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{cluster.ResourceGPU: q}
		if len(p.Claim.Selector) > 0 {
			pod.Spec.NodeSelector = map[string]string{}
			for k, v := range p.Claim.Selector {
				pod.Spec.NodeSelector[k] = v
			}
		}
		if mode == ModeDRA {
			return draPod(pod, p)
		}
		if mode == ModeStockAffinity && p.Gang != "" && p.Claim.GangTopology != nil {
			gangAffinity(pod, p)
		}
		return pod
	}
	pod.Spec.SchedulerName = gpuv1.SchedulerName
	if mode == ModeTemplatedBare {
		// The same bare pod as the pre-made run's, but its claim is made from the template.
		pod.Annotations[gpuv1.AnnotationClaimTemplate] = p.Template
		return pod
	}
	pod.Annotations[gpuv1.AnnotationClaim] = p.Name
	return pod
}

// LabelGang names the gang of a pod in the stock run with gang pod affinity: its affinity's
// label selector.
const LabelGang = "sim.gpu.scheduling/gang"

// gangAffinity gives a gang member what NVIDIA's ComputeDomain examples (the nvbandwidth MPIJob)
// give the workers of one job: a label naming the gang and a required podAffinity to the pods
// with that label, with topologyKey the gang's topology level (nvidia.com/gpu.clique). The
// first member placed may go to any node (no pod matches yet, and it matches itself); the
// others must go to nodes with its value of the level. Preferred and Required alike: the
// examples use the required term.
func gangAffinity(pod *corev1.Pod, p scenario.PodPlan) {
	pod.Labels[LabelGang] = p.Gang
	pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelGang: p.Gang}},
			TopologyKey:   p.Claim.GangTopology.Level,
		}},
	}}
}

// IsStock tells whether a mode's pods go to the stock kube-scheduler (the baselines) rather
// than to gpu-scheduler (its own run and the pre-made-claims yardstick).
func IsStock(mode string) bool {
	return mode == ModeStock || mode == ModeStockAffinity || mode == ModeDRA
}

// buildClaim makes the GpuClaim of one plan entry (named like its pod).
func buildClaim(p scenario.PodPlan, ns, run string) *gpuv1.GpuClaim {
	c := &gpuv1.GpuClaim{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns, Labels: map[string]string{LabelRun: run, LabelKind: p.Kind}},
		Spec: gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{
			Count:       int32(p.Claim.Count),
			Policy:      gpuv1.Policy(p.Claim.Policy),
			Exclusivity: gpuv1.Exclusivity(p.Claim.Exclusivity),
		}},
	}
	for _, id := range p.Claim.PreferIDs {
		c.Spec.Devices.PreferIDs = append(c.Spec.Devices.PreferIDs, int32(id))
	}
	if len(p.Claim.Selector) > 0 {
		c.Spec.Selector = &gpuv1.NodeSelector{MatchLabels: p.Claim.Selector}
	}
	if sh := p.Claim.Share; sh != nil {
		c.Spec.Devices.Share = &gpuv1.GPUShare{ComputePercent: int32(sh.ComputePercent), MemoryPercent: int32(sh.MemoryPercent)}
	}
	if t := p.Claim.Topology; t != nil {
		c.Spec.Topology = &gpuv1.TopologyRequirement{Mode: gpuv1.TopologyMode(t.Mode), MinBandwidthGBps: int32(t.MinBandwidthGBps)}
	}
	if p.Gang != "" {
		c.Spec.GangRef, c.Spec.GangSize = p.Gang, ptr.To(int32(p.GangSize))
		if t := p.Claim.GangTopology; t != nil {
			c.Spec.GangTopology = &gpuv1.GangTopology{Level: t.Level, Mode: gpuv1.TopologyMode(t.Mode)}
		}
	}
	return c
}

// parallel runs f for 0..n-1 on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// createClaims creates every claim before the clock starts: claims are the user's standing
// requests, and the stock run has none, so their creation is not part of the timed workload.
func createClaims(ctx context.Context, gcs versioned.Interface, plan []scenario.PodPlan, ns, run string) error {
	return parallel(ctx, len(plan), 32, func(ctx context.Context, i int) error {
		c := buildClaim(plan[i], ns, run)
		err := retryTransient(ctx, func() error {
			_, err := gcs.GpuV1().GpuClaims(ns).Create(ctx, c, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating GpuClaim %s/%s: %w", ns, c.Name, err)
		}
		return nil
	})
}

// player creates the workload's pods at their offsets (and deletes those with deleteAt).
type player struct {
	cs      kubernetes.Interface
	rec     *recorder
	plan    []scenario.PodPlan
	ns, run string
	mode    string
	serial  bool
	workers int
	// controllers, when set, are created instead of the plan's pods; t0 is the workload's start.
	controllers []scenario.Controller
	t0          time.Duration

	createErrors atomic.Int64
	created      atomic.Int64
	deletesDone  atomic.Bool
}

// sleepUntil waits until offset d of the recorder's clock.
func (pl *player) sleepUntil(ctx context.Context, d time.Duration) error {
	wait := d - pl.rec.now()
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (pl *player) create(ctx context.Context, p scenario.PodPlan) {
	pod := buildPod(p, pl.ns, pl.run, pl.mode)
	pl.rec.created(p.Name, pl.rec.now())
	// The pod's clock starts at the first attempt, so a retry shows as latency.
	err := retryTransient(ctx, func() error {
		_, err := pl.cs.CoreV1().Pods(pl.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		err = nil // an attempt that timed out on the client went through
	}
	if err != nil && ctx.Err() == nil {
		if pl.createErrors.Add(1) <= 3 {
			klog.FromContext(ctx).Error(err, "Creating a workload pod failed", "pod", klog.KObj(pod))
		}
		return
	}
	pl.created.Add(1)
}

// play creates every pod; it returns when all are created (not bound).
func (pl *player) play(ctx context.Context) error {
	if len(pl.controllers) > 0 {
		pl.deletesDone.Store(true) // controllers' pods have no deleteAt
		return pl.playControllers(ctx, pl.controllers)
	}
	go pl.deletes(ctx)
	if pl.serial {
		for _, p := range pl.plan {
			if err := pl.sleepUntil(ctx, p.At); err != nil {
				return err
			}
			pl.create(ctx, p)
			if err := pl.waitSettled(ctx, p.Name, time.Minute); err != nil {
				return err
			}
		}
		return nil
	}
	work := make(chan scenario.PodPlan, 1024)
	var wg sync.WaitGroup
	for range pl.workers {
		wg.Go(func() {
			for p := range work {
				pl.create(ctx, p)
			}
		})
	}
	var err error
	for _, p := range pl.plan {
		if err = pl.sleepUntil(ctx, p.At); err != nil {
			break
		}
		work <- p
	}
	close(work)
	wg.Wait()
	return err
}

// waitSettled waits until the pod is bound, found unschedulable or ended.
func (pl *player) waitSettled(ctx context.Context, name string, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		pl.rec.mu.Lock()
		p := pl.rec.pods[name]
		done := p != nil && (p.boundOK || p.endedOK || p.unschedulable != "")
		pl.rec.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil // give up on this pod; the report shows it unscheduled
		case <-pl.rec.changed:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deletes deletes pods at their deleteAt offsets.
func (pl *player) deletes(ctx context.Context) {
	defer pl.deletesDone.Store(true)
	var del []scenario.PodPlan
	for _, p := range pl.plan {
		if p.DeleteAt > 0 {
			del = append(del, p)
		}
	}
	sortByDelete(del)
	for _, p := range del {
		if pl.sleepUntil(ctx, p.DeleteAt) != nil {
			return
		}
		err := pl.cs.CoreV1().Pods(pl.ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Deleting a workload pod failed", "pod", klog.KRef(pl.ns, p.Name))
		}
	}
}

func sortByDelete(ps []scenario.PodPlan) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].DeleteAt < ps[j-1].DeleteAt; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// retryTransient retries f while it fails for reasons that say nothing about the request: an
// overloaded apiserver (timeouts, 429, 5xx, a TLS handshake or connection that timed out or
// was reset). At 5,000 nodes on two cores the apiserver is saturated for minutes, and one
// such error used to end the whole run.
func retryTransient(ctx context.Context, f func() error) error {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 10 * time.Second}
	return retry.OnError(backoff, func(err error) bool { return ctx.Err() == nil && transient(err) }, f)
}

func transient(err error) bool {
	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err), utilnet.IsTimeout(err):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() // "TLS handshake timeout" is one
}

// runID names one run's objects.
func runID(mode string, t time.Time) string { return mode + "-" + strconv.FormatInt(t.Unix(), 10) }
