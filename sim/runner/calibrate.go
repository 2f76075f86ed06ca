package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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

// backgroundWindows is how many windows of quietWindow measureBackground samples the processes'
// background CPU in (agent writes, node heartbeats, the components' resyncs); it keeps the
// second quietest.
const backgroundWindows = 8

// measureCreates runs create, which makes n objects, and returns what one of them cost each
// process in CPU seconds: the CPU used while create ran, less the background the same
// processes used in an idle window just before (once their use stopped falling, waitQuiet),
// scaled to create's duration.
//
// Why: a pod that names a GpuClaimTemplate costs one GpuClaim create more than a pod whose
// claim was made beforehand, and on two shared cores that create's CPU alone bounds how close
// the templated run's throughput can come to the pre-made run's. Measuring the creates the
// pre-made run makes anyway, before its clock, puts that bound into every report instead of
// leaving it to an estimate from differences between runs. The creates go out 32 at a time,
// faster than the workload makes them, so if anything they cost less here than inside the
// workload and the bound drawn from them is generous.
func measureCreates(ctx context.Context, c *cluster.Cluster, n int, create func() error) (map[string]float64, error) {
	if _, _, err := waitQuiet(ctx, c); err != nil {
		return nil, err
	}
	background, err := measureBackground(ctx, c)
	if err != nil {
		return nil, err
	}
	from, start := markCPU(c), time.Now()
	if err := create(); err != nil {
		return nil, err
	}
	return perObject(from.until(markCPU(c)), background, time.Since(start), n), nil
}

// The settle before an idle window (waitQuiet): windows of quietWindow, until quietWindows
// of them in a row each used at least quietRatio of the CPU of the window before, or no more
// than quietNoise cores less (the use has stopped falling), or quietMax. quietNoise keeps
// a nearly idle small cluster, whose windows differ by hundredths of a core both ways, from
// reading as falling for quietMax.
const (
	quietWindow  = time.Second
	quietWindows = 2
	quietRatio   = 0.9
	quietNoise   = 0.02
	quietMax     = 20 * time.Second
)

// waitQuiet waits until the processes' CPU use has stopped falling, and says how long that took
// and whether it gave up at quietMax. Why: the setup's last writes keep the API server busy for a
// while after their calls return (their watch events, their garbage), and an idle window
// measured in that tail reads it as background, which is subtracted from the run's CPU per pod.
// Every run settles the same way before its idle windows.
func waitQuiet(ctx context.Context, c *cluster.Cluster) (time.Duration, bool, error) {
	start := time.Now()
	rule := newQuietRule()
	for {
		rates, err := sampleWindow(ctx, c)
		if err != nil {
			return time.Since(start), false, err
		}
		if rule.settled(totalCPU(rates)) {
			return time.Since(start), false, nil
		}
		if time.Since(start) >= quietMax {
			return time.Since(start), true, nil
		}
	}
}

// quietRule follows the processes' CPU (cores, over windows of quietWindow) window by window.
type quietRule struct {
	prev   float64 // the window before's; < 0 before the first window
	steady int     // windows in a row that did not fall (quietRatio, quietNoise)
}

func newQuietRule() *quietRule { return &quietRule{prev: -1} }

// settled takes the next window's CPU and tells whether the use has stopped falling.
func (q *quietRule) settled(used float64) bool {
	if q.prev >= 0 && (used >= q.prev*quietRatio || q.prev-used <= quietNoise) {
		q.steady++
	} else {
		q.steady = 0
	}
	q.prev = used
	return q.steady >= quietWindows
}

// measureBackground is each process's CPU per second of wall time while idle: that of the
// second quietest of backgroundWindows windows by their total (quietestWindow). Why not one long
// window, nor their mean: kwok renews every node's lease each quarter of its duration, and the
// leases of a node pool made at once come due together, a burst of one write per node every
// renewal that keeps the API server, etcd and kwok busy for seconds. gpu-scheduler's run reaches
// its idle window about one renewal after making its nodes, where the first burst falls; read as
// background, it was subtracted from the whole workload's CPU (docs/simulator.md). Both
// workloads meet the bursts, which averaged over a renewal cost little; the background is what
// remains between them.
func measureBackground(ctx context.Context, c *cluster.Cluster) (map[string]float64, error) {
	windows := make([]map[string]float64, 0, backgroundWindows)
	for range backgroundWindows {
		rates, err := sampleWindow(ctx, c)
		if err != nil {
			return nil, err
		}
		windows = append(windows, rates)
	}
	return quietestWindow(windows), nil
}

// sampleWindow is each process's CPU per second of wall time over one window of quietWindow.
func sampleWindow(ctx context.Context, c *cluster.Cluster) (map[string]float64, error) {
	from, start := markCPU(c), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(quietWindow):
	}
	spent := from.until(markCPU(c))
	secs := time.Since(start).Seconds()
	rates := make(map[string]float64, len(spent))
	for name, v := range spent {
		rates[name] = v / secs
	}
	return rates, nil
}

// totalCPU is the processes' CPU together.
func totalCPU(rates map[string]float64) float64 {
	t := 0.0
	for _, v := range rates {
		t += v
	}
	return t
}

// quietestWindow is the window with the second lowest total (the lowest with one window): one
// better than the quietest, which a lull of the agents' writes can make too low.
func quietestWindow(windows []map[string]float64) map[string]float64 {
	if len(windows) == 0 {
		return nil
	}
	sorted := slices.Clone(windows)
	slices.SortStableFunc(sorted, func(a, b map[string]float64) int { return cmp.Compare(totalCPU(a), totalCPU(b)) })
	return sorted[min(1, len(sorted)-1)]
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
