package runner

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// createIdle is how long the processes' background CPU is sampled before the pre-made claims
// are created: a few seconds of agent writes, node heartbeats and the components' resyncs.
const createIdle = 3 * time.Second

// measureCreates runs create, which makes n objects, and returns what one of them cost each
// process in CPU seconds: the CPU used while create ran, less the background the same
// processes used in an idle window just before, scaled to create's duration.
//
// Why: a pod that names a GpuClaimTemplate costs one GpuClaim create more than a pod whose
// claim was made beforehand, and on two shared cores that create's CPU alone bounds how close
// the templated run's throughput can come to the pre-made run's. Measuring the creates the
// pre-made run makes anyway, before its clock, puts that bound into every report instead of
// leaving it to an estimate from differences between runs. The creates go out 32 at a time,
// faster than the workload makes them, so if anything they cost less here than inside the
// workload and the bound drawn from them is generous.
func measureCreates(ctx context.Context, c *cluster.Cluster, n int, create func() error) (map[string]float64, error) {
	background, err := measureBackground(ctx, c, createIdle)
	if err != nil {
		return nil, err
	}
	from, start := markCPU(c), time.Now()
	if err := create(); err != nil {
		return nil, err
	}
	return perObject(from.until(markCPU(c)), background, time.Since(start), n), nil
}

// measureBackground is each process's CPU per second of wall time over an idle window of
// length d.
func measureBackground(ctx context.Context, c *cluster.Cluster, d time.Duration) (map[string]float64, error) {
	from, start := markCPU(c), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(d):
	}
	spent := from.until(markCPU(c))
	secs := time.Since(start).Seconds()
	out := make(map[string]float64, len(spent))
	for name, v := range spent {
		out[name] = v / secs
	}
	return out, nil
}

// perObject is each process's CPU per object: what it spent while busy, less its background
// rate (CPU seconds per second, measureBackground) times busy, divided by the n objects made. A
// process's figure may come out slightly negative when its background was noisier than its
// share of the work; the values are left as measured so that their sum stays unbiased.
func perObject(spent, background map[string]float64, busy time.Duration, n int) map[string]float64 {
	if n <= 0 {
		return nil
	}
	out := make(map[string]float64, len(spent))
	for name, s := range spent {
		out[name] = (s - background[name]*busy.Seconds()) / float64(n)
	}
	return out
}

// calibrationNamespace holds the scratch objects measureContractWrites writes and deletes:
// no component watches it, so its writes reach no informer of the scheduler or the agents.
const calibrationNamespace = "gpu-sim-calibration"

// calibrationObjects is how many leases and claim statuses measureContractWrites writes for a
// workload of pods: half as many, at least 1,000 and at most 5,000. A batch of 1,000 is over
// in about a second at 5,000 nodes, where one garbage collection of the apiserver's heap can
// move a write's price by a millisecond or more; 5,000 spread that over five seconds and more.
func calibrationObjects(pods int) int { return min(5000, max(1000, pods/2)) }

// ContractWriteCPU is what the two writes the API contract adds to a stock binding cost each
// process, in CPU seconds per write, measured in the run: a GPU lease create (one per GPU) and
// a GpuClaim status write (one per claim). Objects is how many of each were written.
type ContractWriteCPU struct {
	LeaseCreate map[string]float64 `json:"leaseCreate"`
	ClaimStatus map[string]float64 `json:"claimStatus"`
	Objects     int                `json:"objects"`
}

// measureContractWrites prices the writes that gpu-scheduler makes and the stock scheduler does
// not, on scratch objects shaped like the real ones (a lease with the labels, annotations and
// holder of a GPU lease; a claim status naming its pod), so that the report can put a floor
// under gpu-scheduler's CPU per pod from measurements rather than estimates: the stock run's
// CPU per pod plus g lease creates and one claim status write. The scratch namespace has no
// watchers but the apiserver's own cache, so these writes miss the fan-out to the scheduler's
// and the agents' informers that the real ones pay: the floor drawn from them is low, if
// anything. The objects are deleted before the workload starts.
func measureContractWrites(ctx context.Context, c *cluster.Cluster, cs kubernetes.Interface, gcs versioned.Interface, n int) (*ContractWriteCPU, error) {
	ns := calibrationNamespace
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	defer func() {
		// Not measured; the workload must not pay for it, so it is done before the clock.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = cs.CoordinationV1().Leases(ns).DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = gcs.GpuV1().GpuClaims(ns).DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}()
	claims := make([]*gpuv1.GpuClaim, n)
	if err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		made, err := gcs.GpuV1().GpuClaims(ns).Create(ctx, &gpuv1.GpuClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("calibration-%04d", i), Namespace: ns},
			Spec:       gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: 2}},
		}, metav1.CreateOptions{})
		claims[i] = made
		if err != nil {
			return fmt.Errorf("creating GpuClaim %s/calibration-%04d: %w", ns, i, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := &ContractWriteCPU{Objects: n}
	var err error
	out.ClaimStatus, err = measureCreates(ctx, c, n, func() error {
		return parallel(ctx, n, 32, func(ctx context.Context, i int) error {
			cl := claims[i].DeepCopy()
			// Pending, not Bound: a Bound status naming GPUs would count in the recorder's
			// bookings. The Bound one the scheduler writes carries a node and IDs besides.
			cl.Status = gpuv1.GpuClaimStatus{Phase: gpuv1.ClaimPending, PodName: cl.Name, PodUID: string(uuid.NewUUID()),
				Message: "waiting for free GPUs (a status written to measure what a claim status write costs)", ObservedGeneration: cl.Generation}
			if _, err := gcs.GpuV1().GpuClaims(ns).UpdateStatus(ctx, cl, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("writing the status of GpuClaim %s/%s: %w", ns, cl.Name, err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out.LeaseCreate, err = measureCreates(ctx, c, n, func() error {
		return parallel(ctx, n, 32, func(ctx context.Context, i int) error {
			now := metav1.NewMicroTime(time.Now())
			uid := string(uuid.NewUUID())
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("gpu-calibration-%04d-%d", i/8, i%8), Namespace: ns,
					Labels: map[string]string{gpuv1.LabelLeaseNode: fmt.Sprintf("calibration-%04d", i/8), gpuv1.LabelLeaseGPU: strconv.Itoa(i % 8),
						gpuv1.LabelPodNamespace: ns, gpuv1.LabelPodUID: uid, gpuv1.LabelPodName: fmt.Sprintf("calibration-%04d", i)},
					Annotations: map[string]string{gpuv1.GroupName + "/pod-namespace": ns, gpuv1.GroupName + "/pod-name": fmt.Sprintf("calibration-%04d", i)},
				},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &uid, AcquireTime: &now},
			}
			if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating lease %s/%s: %w", ns, l.Name, err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// waitFleetSettled waits until every one of nodes has its GpuNodeStatus published with its
// devices and the agents' status writes have fallen to their steady rate (at most 2 % of the
// nodes within 2 s; heartbeats alone are ~1 %), or until timeout. A fleet just started writes
// every node's status once or twice within seconds: a run whose clock started in that burst
// (the stock runs did: 0.60 agent writes per pod at scale-5k, against 0.38 in gpu-scheduler's
// run, which starts long after) would pay for it in its figures and its idle background.
func waitFleetSettled(ctx context.Context, rec *recorder, nodes int, timeout time.Duration) error {
	const window = 2 * time.Second
	deadline := time.Now().Add(timeout)
	quiet := int64(nodes/50 + 2)
	for {
		published, before := rec.published()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		_, after := rec.published()
		if published >= nodes && after-before <= quiet {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent fleet had not settled within %s (%d of %d statuses published, %d status writes in the last %s); the clock started anyway",
				timeout, published, nodes, after-before, window)
		}
	}
}
