package features

import (
	"context"
	"fmt"
	"time"

	"github.com/cucumber/godog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/agent/liveness"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps about the node agents' liveness leases (agent/liveness).
func registerLivenessSteps(sc *godog.ScenarioContext) {
	sc.Step(`^the agent of node (\d+) stops renewing its liveness lease$`, agentStopsRenewing)
	sc.Step(`^the agent of node (\d+) renews its liveness lease again, its GpuNodeStatus left as it was$`, leaseRenewedAlone)
	sc.Step(`^the GpuNodeStatus of node (\d+) still has the heartbeat of 15 minutes ago$`, statusStillSilent)
	sc.Step(`^the agent of node (\d+) runs again$`, agentRunsAgain)
}

// silentFor is how far back a stopped agent's last renewal and status heartbeat are set: past
// the scheduler's default statusFreshnessSeconds (10 minutes), which the suite's scheduler uses.
const silentFor = 15 * time.Minute

// agentStopsRenewing stops the node's agent (no renewals, no status writes) and sets its last
// renewal and status heartbeat silentFor back, standing in for the time a dead agent stays
// silent before the scheduler gives up on its node.
func agentStopsRenewing(ctx context.Context, node int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	lease, err := apiv1.AgentLeaseName(name)
	if err != nil {
		return err
	}
	// The lease and the status exist once the agent has run its first loop.
	if err := eventually(ctx, waitBound, fmt.Sprintf("the liveness lease %s exists", lease), func(ctx context.Context) (bool, string, error) {
		_, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	}); err != nil {
		return err
	}
	if err := st.suite.agents.fleet.Suspend(ctx, name); err != nil {
		return err
	}
	then := time.Now().Add(-silentFor)
	leases := st.suite.kube.CoordinationV1().Leases(LeaseNamespace)
	l, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading liveness lease %s: %w", lease, err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: then}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting liveness lease %s back %s: %w", lease, silentFor, err)
	}
	statuses := st.suite.gpu.GpuV1().GpuNodeStatuses()
	g, err := statuses.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading GpuNodeStatus %s: %w", name, err)
	}
	g.Status.LastHeartbeatTime = metav1.NewTime(then)
	if _, err := statuses.UpdateStatus(ctx, g, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the heartbeat of GpuNodeStatus %s back %s: %w", name, silentFor, err)
	}
	return nil
}

// leaseRenewedAlone renews the node's liveness lease with the agent's own renewer
// (agent/liveness) while the rest of the agent stays stopped: the status keeps its old
// heartbeat, so only the lease can make the node fresh again.
func leaseRenewedAlone(ctx context.Context, node int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	r, err := liveness.New(liveness.Config{Node: name, Namespace: LeaseNamespace, Client: st.suite.kube, Interval: 3 * time.Minute})
	if err != nil {
		return err
	}
	n, err := st.suite.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if _, err := r.Renew(ctx, n); err != nil {
		return err
	}
	return nil
}

// statusStillSilent checks that nothing rewrote the node's status since the agent stopped.
func statusStillSilent(ctx context.Context, node int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading GpuNodeStatus %s: %w", name, err)
	}
	if age := time.Since(g.Status.LastHeartbeatTime.Time); age < silentFor-time.Minute {
		return fmt.Errorf("GpuNodeStatus %s was written %s ago, after its agent stopped:\n%s", name, age.Round(time.Second), describeNodeStatus(g))
	}
	return nil
}

// agentRunsAgain starts the node's agent again; its first loop renews the lease at once.
func agentRunsAgain(ctx context.Context, node int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	lease, err := apiv1.AgentLeaseName(name)
	if err != nil {
		return err
	}
	if err := st.suite.agents.fleet.Resume(name); err != nil {
		return err
	}
	return eventually(ctx, waitBound, fmt.Sprintf("the agent of node %d renews its liveness lease", node), func(ctx context.Context) (bool, string, error) {
		l, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > time.Minute {
			return false, fmt.Sprintf("lease %s renewed at %v", lease, l.Spec.RenewTime), nil
		}
		return true, "", nil
	})
}
