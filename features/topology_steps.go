package features

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cucumber/godog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// Steps that make the scenario's nodes and look at the islands of an allocation.
func registerTopologySteps(sc *godog.ScenarioContext) {
	sc.Step(`^a cluster of (\d+) "([^"]*)" nodes?$`, clusterOf)
	sc.Step(`^(\d+) "([^"]*)" nodes? joins? the cluster$`, clusterOf)
	sc.Step(`^(\d+) "([^"]*)" nodes? labelled "([^"]*)"$`, nodesLabelled)
	sc.Step(`^the GPUs of pod "([^"]*)" lie in one island$`, inOneIsland)
	sc.Step(`^the GPUs of pod "([^"]*)" span (\d+) islands$`, spanIslands)
	sc.Step(`^the GPUs of each of them lie in one island$`, batchInOneIsland)
	sc.Step(`^pods "([^"]*)" and "([^"]*)" share an island$`, shareIsland)
	sc.Step(`^the GPUs of pod "([^"]*)" have at least (\d+) GB/s$`, minBandwidth)
}

func clusterOf(ctx context.Context, n int, topology string) error {
	return state(ctx).addNodes(ctx, n, topology, nil)
}

func nodesLabelled(ctx context.Context, n int, topology, labelList string) error {
	l := map[string]string{}
	for _, kv := range strings.Split(labelList, ",") {
		k, v, err := splitLabel(kv)
		if err != nil {
			return err
		}
		l[k] = v
	}
	return state(ctx).addNodes(ctx, n, topology, l)
}

// splitLabel reads "key=value".
func splitLabel(kv string) (key, value string, err error) {
	k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
	if !ok {
		return "", "", fmt.Errorf("label %q: want key=value", kv)
	}
	return k, v, nil
}

// addNodes creates n kwok nodes with a mock topology, as one node pool of the scenario, and
// has the node agent serve them; it returns once every node is Ready and its agent has
// published the node's GPUs.
func (st *scenario) addNodes(ctx context.Context, n int, topology string, extra map[string]string) error {
	return st.addNodesServedBy(ctx, n, topology, extra, st.suite.agents)
}

// addNodesServedBy is addNodes for nodes that agents serves (a release's own fleet).
func (st *scenario) addNodesServedBy(ctx context.Context, n int, topology string, extra map[string]string, agents *agentFleet) error {
	server, err := mock.New(topology)
	if err != nil {
		return err
	}
	labels := maps.Clone(extra)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelScenario] = st.id
	pool := cluster.NodePool{
		Name:        fmt.Sprintf("%s-%d", st.id, st.pools),
		Count:       n,
		GPUsPerNode: server.NumDevices(),
		Topology:    topology,
		Labels:      labels,
	}
	st.pools++
	c := st.suite.cluster
	if err := c.CreateNodePool(ctx, pool); err != nil {
		return err
	}
	var names []string
	for i := range n {
		names = append(names, cluster.NodeName(pool.Name, i))
	}
	st.nodes = append(st.nodes, names...)
	if err := st.waitNodesReady(ctx, pool.Name, n); err != nil {
		return err
	}
	if err := agents.add(ctx, names); err != nil {
		return err
	}
	for _, node := range names {
		if err := st.waitPublished(ctx, node, pool.GPUsPerNode); err != nil {
			return err
		}
	}
	return nil
}

// waitNodesReady waits until the pool's nodes are Ready and untainted. (It polls rather than
// use cluster.WaitNodesReady, whose informer shutdown waits on a context only the caller ends.)
func (st *scenario) waitNodesReady(ctx context.Context, pool string, n int) error {
	sel := cluster.PoolSelector(pool).String()
	return eventually(ctx, waitBound, fmt.Sprintf("the %d nodes of pool %s Ready", n, pool), func(ctx context.Context) (bool, string, error) {
		list, err := st.suite.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		for i := range list.Items {
			if cluster.NodeSchedulable(&list.Items[i]) {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d nodes Ready", ready, n), nil
	})
}

// waitPublished waits until the agent has published a node's GPUs.
func (st *scenario) waitPublished(ctx context.Context, node string, gpus int) error {
	return eventually(ctx, waitBound, fmt.Sprintf("the agent publishes the %d GPUs of node %s", gpus, node), func(ctx context.Context) (bool, string, error) {
		g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		fresh := time.Since(g.Status.LastHeartbeatTime.Time) < time.Minute
		return len(g.Status.Devices) == gpus && fresh, describeNodeStatus(g), nil
	})
}

// devicesOf reads a node's GPUs as its agent published them, by ID.
func (st *scenario) devicesOf(ctx context.Context, node string) (map[int]apiv1.Device, error) {
	g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading GpuNodeStatus %s: %w", node, err)
	}
	out := map[int]apiv1.Device{}
	for _, d := range g.Status.Devices {
		out[int(d.ID)] = d
	}
	return out, nil
}

// islandsOf returns the islands a bound pod's GPUs lie in, sorted, and the pod's allocation.
func (st *scenario) islandsOf(ctx context.Context, pod string) ([]string, apiv1.Allocation, error) {
	a, err := st.waitBound(ctx, pod)
	if err != nil {
		return nil, a, err
	}
	devs, err := st.devicesOf(ctx, a.Node)
	if err != nil {
		return nil, a, err
	}
	var islands []string
	for _, id := range a.IDs {
		d, ok := devs[id]
		if !ok {
			return nil, a, fmt.Errorf("pod %s got GPU %d of node %s, which its GpuNodeStatus does not list", pod, id, a.Node)
		}
		if !slices.Contains(islands, d.Island) {
			islands = append(islands, d.Island)
		}
	}
	slices.Sort(islands)
	return islands, a, nil
}

func inOneIsland(ctx context.Context, pod string) error {
	return spanIslands(ctx, pod, 1)
}

// batchInOneIsland checks every bound pod of the scenario's batches.
func batchInOneIsland(ctx context.Context) error {
	st := state(ctx)
	for _, name := range st.batch {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return err
		}
		if pod.Spec.NodeName == "" {
			continue
		}
		if err := spanIslands(ctx, name, 1); err != nil {
			return err
		}
	}
	return nil
}

func spanIslands(ctx context.Context, pod string, n int) error {
	islands, a, err := state(ctx).islandsOf(ctx, pod)
	if err != nil {
		return err
	}
	if len(islands) != n {
		return fmt.Errorf("pod %s got GPUs %s on node %s in islands %v, want %d island(s)", pod, apiv1.FormatIDs(a.IDs), a.Node, islands, n)
	}
	return nil
}

func shareIsland(ctx context.Context, p1, p2 string) error {
	st := state(ctx)
	i1, a1, err := st.islandsOf(ctx, p1)
	if err != nil {
		return err
	}
	i2, a2, err := st.islandsOf(ctx, p2)
	if err != nil {
		return err
	}
	if a1.Node != a2.Node || len(i1) != 1 || !slices.Equal(i1, i2) {
		return fmt.Errorf("pod %s got %s (islands %v) and pod %s got %s (islands %v); want one island for both", p1, a1, i1, p2, a2, i2)
	}
	return nil
}

func minBandwidth(ctx context.Context, pod string, gbps int) error {
	st := state(ctx)
	a, err := st.waitBound(ctx, pod)
	if err != nil {
		return err
	}
	devs, err := st.devicesOf(ctx, a.Node)
	if err != nil {
		return err
	}
	for _, id := range a.IDs {
		if bw := int(devs[id].BandwidthGBps); bw < gbps {
			return fmt.Errorf("pod %s got GPU %d of node %s, which has %d GB/s, below %d GB/s (allocation %s)", pod, id, a.Node, bw, gbps, a)
		}
	}
	return nil
}
