package features

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// Steps about the GPU leases and the scheduler processes that race for them.
func registerLeaseSteps(sc *godog.ScenarioContext) {
	sc.Step(`^a second gpu-scheduler is running$`, secondScheduler)
	sc.Step(`^both gpu-schedulers bound some of those pods$`, bothSchedulersBound)
	sc.Step(`^the second gpu-scheduler stops$`, stopSecondScheduler)
	sc.Step(`^its peer lease is gone$`, secondPeerLeaseGone)
	sc.Step(`^the gpu-scheduler is killed$`, killScheduler)
	sc.Step(`^the gpu-scheduler is killed as soon as (\d+) of them (?:is|are) bound$`, killSchedulerAfter)
	sc.Step(`^a new gpu-scheduler is started$`, startScheduler)
	sc.Step(`^the gpu-scheduler is restarted$`, restartScheduler)
	sc.Step(`^no GPU is held twice$`, noGPUHeldTwice)
	sc.Step(`^the agents report the leased GPUs in use$`, agentsReportLeases)
	sc.Step(`^the leases of pod "([^"]*)" are unchanged$`, leasesUnchanged)
}

// secondScheduler starts another gpu-scheduler beside the shared one, without leader
// election, so that both schedule every pod and race for the same GPUs.
func secondScheduler(ctx context.Context) error {
	st := state(ctx)
	name := st.extraSchedulerName(len(st.schedulers))
	sched, err := launch.StartScheduler(ctx, st.suite.cluster, launch.SchedulerOptions{
		Name:           name,
		LeaseNamespace: LeaseNamespace,
	})
	if err != nil {
		return err
	}
	st.schedulers = append(st.schedulers, sched)
	// Without leader election it announces itself at start (its peer lease); the scenario's
	// pods come after, as they would after a rollout, not in the moment before its peers know.
	lease := apiv1.SchedulerPeerLeaseName(name)
	return eventually(ctx, 10*time.Second, "peer lease "+lease+" created", func(ctx context.Context) (bool, string, error) {
		_, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

// bothSchedulersBound reads, in each scheduler's log, the pods of the scenario's batches it
// bound (kube-scheduler's "Successfully bound pod to node" line): each must have bound some,
// and no pod may have been bound by both.
func bothSchedulersBound(ctx context.Context) error {
	st := state(ctx)
	if len(st.schedulers) == 0 {
		return fmt.Errorf("the scenario started no second gpu-scheduler")
	}
	logs := map[string]string{"the shared gpu-scheduler": st.suite.Scheduler().LogPath(), "the second gpu-scheduler": st.schedulers[0].LogPath()}
	byPod := map[string][]string{}
	counts := map[string]int{}
	for who, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading the log of %s: %w", who, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, "Successfully bound pod to node") {
				continue
			}
			for _, name := range st.batch {
				if strings.Contains(line, fmt.Sprintf("pod=%q", st.ns+"/"+name)) {
					byPod[name] = append(byPod[name], who)
					counts[who]++
				}
			}
		}
	}
	for name, who := range byPod {
		if len(who) > 1 {
			return fmt.Errorf("pod %s was bound by %v", name, who)
		}
	}
	for who := range logs {
		if counts[who] == 0 {
			return fmt.Errorf("%s bound none of the %d pods (bound by each: %v)", who, len(st.batch), counts)
		}
	}
	return nil
}

// stopSecondScheduler stops the scenario's second gpu-scheduler as a rollout would: SIGTERM.
func stopSecondScheduler(ctx context.Context) error {
	st := state(ctx)
	if len(st.schedulers) == 0 {
		return fmt.Errorf("the scenario started no second gpu-scheduler")
	}
	sched := st.schedulers[0]
	if err := sched.Stop(10 * time.Second); err != nil {
		return fmt.Errorf("stopping %s: %w", filepath.Base(sched.LogPath()), err)
	}
	return nil
}

// secondPeerLeaseGone: a scheduler that stops deletes its peer lease, so that its peers take
// over its pods at once rather than when the lease runs out.
func secondPeerLeaseGone(ctx context.Context) error {
	st := state(ctx)
	name := apiv1.SchedulerPeerLeaseName(st.extraSchedulerName(0))
	return eventually(ctx, 5*time.Second, "peer lease "+name+" deleted", func(ctx context.Context) (bool, string, error) {
		_, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return false, "the lease is still there", nil
	})
}

// extraSchedulerName names the scenario's i-th extra gpu-scheduler (0: the second one), which
// is also its identity among peers (launch's default).
func (st *scenario) extraSchedulerName(i int) string {
	return fmt.Sprintf("%s-gpu-scheduler-%d", st.id, i+2)
}

func killScheduler(ctx context.Context) error {
	return state(ctx).suite.killScheduler()
}

// killSchedulerAfter kills the shared scheduler the moment n pods of the scenario's batches
// are bound: the others are then anywhere between queued and half bound.
func killSchedulerAfter(ctx context.Context, n int) error {
	st := state(ctx)
	err := eventually(ctx, waitBound, fmt.Sprintf("%d pods bound", n), func(ctx context.Context) (bool, string, error) {
		list, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound >= n, fmt.Sprintf("%d of %d pods bound", bound, len(list.Items)), nil
	})
	if err != nil {
		return err
	}
	return st.suite.killScheduler()
}

func startScheduler(ctx context.Context) error {
	return state(ctx).suite.ensureSchedulerRunning(ctx)
}

func restartScheduler(ctx context.Context) error {
	_, err := state(ctx).suite.restartScheduler(ctx)
	return err
}

func noGPUHeldTwice(ctx context.Context) error {
	return state(ctx).noGPUHeldTwice(ctx)
}

// noGPUHeldTwice checks the scenario's pods, claims and GPU leases against each other. Two
// live pods or two bound claims on one GPU fail at once, unless all of them are Shared; the
// records agreeing (a lease per
// allocated GPU held by its pod, no lease without a pod, a claim status per pod) is awaited,
// since a scheduler that lost a race removes its leases a moment later.
func (st *scenario) noGPUHeldTwice(ctx context.Context) error {
	return eventually(ctx, waitBound, "pods, claims and GPU leases agree", func(ctx context.Context) (bool, string, error) {
		pods, err := st.suite.kube.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		claims, err := st.suite.gpu.GpuV1().GpuClaims(st.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		shared := map[string]bool{} // claim name -> Shared
		for i := range claims.Items {
			shared[claims.Items[i].Name] = claims.Items[i].Spec.Devices.Exclusivity == apiv1.Shared
		}
		var problems []string
		podsOf := map[string][]string{} // node/id -> pod names
		uidsOf := map[string][]string{} // node/id -> pod UIDs
		liveUID := map[string]string{}  // pod UID -> pod name
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName == "" || !live(p) {
				continue
			}
			a, err := allocationOf(p)
			if err != nil {
				return false, "", err
			}
			liveUID[string(p.UID)] = p.Name
			for _, id := range a.IDs {
				gpu := fmt.Sprintf("%s/%d", a.Node, id)
				podsOf[gpu] = append(podsOf[gpu], p.Name)
				uidsOf[gpu] = append(uidsOf[gpu], string(p.UID))
				if len(podsOf[gpu]) < 2 {
					continue
				}
				// Shared pods may share a GPU; a GPU with an Exclusive pod has no other.
				for _, other := range podsOf[gpu] {
					if !shared[claimOfPod(pods.Items, other)] {
						return false, "", fmt.Errorf("GPU %d of node %s is allocated to pods %v, and pod %s's claim is not Shared", id, a.Node, podsOf[gpu], other)
					}
				}
			}
		}
		claimOf := map[string]string{}
		for i := range claims.Items {
			c := &claims.Items[i]
			if c.Status.Phase != apiv1.ClaimBound && c.Status.Phase != apiv1.ClaimReserved {
				continue
			}
			for _, id := range c.Status.GpuIDs {
				gpu := fmt.Sprintf("%s/%d", c.Status.NodeName, id)
				if other, dup := claimOf[gpu]; dup && (!shared[c.Name] || !shared[other]) {
					return false, "", fmt.Errorf("GPU %d of node %s is in the status of both GpuClaim %s and GpuClaim %s, which are not both Shared", id, c.Status.NodeName, other, c.Name)
				}
				claimOf[gpu] = c.Name
			}
			if _, ok := liveUID[c.Status.PodUID]; !ok {
				problems = append(problems, fmt.Sprintf("%s names no live bound pod", describeClaim(c)))
			}
		}
		leased := map[string]bool{}
		for i := range leases {
			l := &leases[i]
			node := l.Labels[apiv1.LabelLeaseNode]
			gpu := node + "/" + l.Labels[apiv1.LabelLeaseGPU]
			leased[gpu] = true
			hs := holders(l)
			for _, h := range hs {
				if _, ok := liveUID[h]; !ok {
					problems = append(problems, fmt.Sprintf("lease %s is held by %s, which is no live bound pod", l.Name, h))
				}
			}
			for i, uid := range uidsOf[gpu] {
				if !contains(hs, uid) {
					problems = append(problems, fmt.Sprintf("lease %s is held by %v, but GPU %s is allocated to pod %s (%s)", l.Name, hs, gpu, podsOf[gpu][i], uid))
				}
			}
		}
		for gpu, pods := range podsOf {
			if !leased[gpu] {
				problems = append(problems, fmt.Sprintf("GPU %s is allocated to pods %v but no lease locks it", gpu, pods))
			}
		}
		sort.Strings(problems)
		if len(problems) > 0 {
			return false, strings.Join(problems, "\n") + "\nleases:\n" + describeLeases(leases), nil
		}
		return true, "", nil
	})
}

// claimOfPod is the claim a pod of the list names.
func claimOfPod(pods []corev1.Pod, name string) string {
	for i := range pods {
		if pods[i].Name == name {
			return podClaimName(&pods[i])
		}
	}
	return ""
}

// agentsReportLeases waits until every scenario node's GpuNodeStatus says, GPU by GPU, that
// exactly the pods holding its lease use it: the agents read the leases, so their view of
// which GPUs are taken agrees with the lock.
func agentsReportLeases(ctx context.Context) error {
	st := state(ctx)
	return eventually(ctx, waitBound, "the agents' inUseBy agrees with the GPU leases", func(ctx context.Context) (bool, string, error) {
		leases, err := st.nodeLeases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		want := map[string][]string{} // node/id -> holders
		for i := range leases {
			l := &leases[i]
			hs := slices.Clone(holders(l))
			slices.Sort(hs)
			want[l.Labels[apiv1.LabelLeaseNode]+"/"+l.Labels[apiv1.LabelLeaseGPU]] = hs
		}
		var problems []string
		for _, node := range st.nodes {
			g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, d := range g.Status.Devices {
				gpu := fmt.Sprintf("%s/%d", node, d.ID)
				got := slices.Clone(d.InUseBy)
				slices.Sort(got)
				if !slices.Equal(got, want[gpu]) {
					problems = append(problems, fmt.Sprintf("GPU %s: the agent reports inUseBy %v, the lease says %v", gpu, got, want[gpu]))
				}
			}
		}
		return len(problems) == 0, strings.Join(problems, "\n"), nil
	})
}

// rememberLeases notes the leases a bound pod holds, to tell later whether they were ever
// taken over (deleted and created again, or handed to another holder).
func (st *scenario) rememberLeases(ctx context.Context, pod string) error {
	got, err := st.podLeases(ctx, pod)
	if err != nil {
		return err
	}
	st.leases[pod] = got
	return nil
}

// podLeases returns, for each GPU lease of a pod's allocation, the lease's UID and holder.
func (st *scenario) podLeases(ctx context.Context, name string) (map[string]string, error) {
	p, err := st.getPod(ctx, name)
	if err != nil {
		return nil, err
	}
	a, err := allocationOf(p)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	lnames, err := leaseNamesOf(p, a)
	if err != nil {
		return nil, err
	}
	for _, lname := range lnames {
		l, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lname, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading lease %s of pod %s: %w", lname, name, err)
		}
		out[lname] = fmt.Sprintf("uid=%s holder=%s", l.UID, strings.Join(holders(l), ","))
	}
	return out, nil
}

func leasesUnchanged(ctx context.Context, pod string) error {
	st := state(ctx)
	before, ok := st.leases[pod]
	if !ok {
		return fmt.Errorf("pod %s was never seen bound, so there are no leases to compare", pod)
	}
	now, err := st.podLeases(ctx, pod)
	if err != nil {
		return err
	}
	var diffs []string
	for name, was := range before {
		if now[name] != was {
			diffs = append(diffs, fmt.Sprintf("lease %s was %s, is %s", name, was, now[name]))
		}
	}
	if len(now) != len(before) {
		diffs = append(diffs, fmt.Sprintf("pod %s held leases %v, holds %v", pod, before, now))
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return fmt.Errorf("the leases of pod %s changed hands:\n%s", pod, strings.Join(diffs, "\n"))
	}
	return nil
}
