package fleet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
)

func node(name, topology string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}}}
	if topology != "" {
		n.Labels[apiv1.LabelTopology] = topology
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: never happened", what)
	}
}

func TestFleet(t *testing.T) {
	kube := fake.NewClientset(node("n1", mock.DGXA100), node("n2", mock.TwoIsland), node("n3", mock.PCIeOnly), node("n4", ""), node("n5", "no-such-topology"))
	gpus := gpufake.NewSimpleClientset()
	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus, LeaseNamespace: "gpu-scheduler",
		Agent:            agent.Config{ProbeInterval: 20 * time.Millisecond, MinWriteInterval: -1, UsageWriteInterval: -1, HeartbeatInterval: time.Hour},
		EventWaitTimeout: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	get := func(name string) *apiv1.GpuNodeStatus {
		st, _ := gpus.GpuV1().GpuNodeStatuses().Get(context.Background(), name, metav1.GetOptions{})
		return st
	}
	healthy := map[string]int32{"n1": 8, "n2": 7, "n3": 8}
	for name, want := range healthy {
		eventually(t, "status of "+name, func() bool { st := get(name); return st != nil && st.Status.Total == 8 && st.Status.Healthy == want })
	}
	if got := f.Nodes(); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Errorf("Nodes() = %v, want the three nodes with a known topology", got)
	}
	if st := get("n1"); st.Status.Devices[0].BandwidthGBps != 600 || st.Status.Devices[0].Island != "nvlink-group-0" {
		t.Errorf("n1 GPU 0: %+v", st.Status.Devices[0])
	}

	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	post := func(q url.Values) int {
		resp, err := http.PostForm(srv.URL+"/fault", q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		q    url.Values
		want int
	}{
		{url.Values{"node": {"n1"}, "gpu": {"2"}, "fault": {"boom"}}, http.StatusBadRequest},
		{url.Values{"node": {"n1"}, "gpu": {"x"}, "fault": {"xid79"}}, http.StatusBadRequest},
		{url.Values{"node": {"n1"}, "gpu": {"9"}, "fault": {"xid79"}}, http.StatusBadRequest},
		{url.Values{"node": {"n4"}, "gpu": {"0"}, "fault": {"xid79"}}, http.StatusNotFound},
	} {
		if got := post(tc.q); got != tc.want {
			t.Errorf("POST /fault %v: %d, want %d", tc.q, got, tc.want)
		}
	}
	eventually(t, "n1 watched", func() bool { return f.Watched("n1") })
	if got := post(url.Values{"node": {"n1"}, "gpu": {"2"}, "fault": {"xid79"}}); got != http.StatusOK {
		t.Fatalf("POST /fault xid79: %d", got)
	}
	// Recover only once the agent has both read the Xid and probed the GPU lost: a reset the
	// agent never saw the GPU lost for leaves an Xid standing for the whole quiet period.
	eventually(t, "n1 GPU 2 lost after Xid 79", func() bool {
		d := get("n1").Status.Devices[2]
		return get("n1").Status.Healthy == 7 && strings.Contains(d.Reason, "lost") && strings.Contains(d.Reason, "Xid 79")
	})
	for _, d := range get("n1").Status.Devices {
		if (d.ID == 2) != (d.Health == apiv1.Unhealthy) {
			t.Errorf("n1 GPU %d is %s after a fault on GPU 2", d.ID, d.Health)
		}
	}
	if err := f.InjectFault("n1", 2, mock.Fault{Kind: mock.FaultRecover}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n1 GPU 2 Healthy again", func() bool { return get("n1").Status.Healthy == 8 })

	_, err = kube.CoordinationV1().Leases("gpu-scheduler").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-n3-0", Labels: map[string]string{apiv1.LabelLeaseNode: "n3", apiv1.LabelLeaseGPU: "0"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-1")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "n3 GPU 0 in use", func() bool { return get("n3").Status.Free == 7 })

	if err := kube.CoreV1().Nodes().Delete(context.Background(), "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n2's agent stopped", func() bool { return !slices.Contains(f.Nodes(), "n2") })
}

// A fleet with a node selector runs agents for its pool only, labels their statuses with its
// scheduler, and stops the agent of a node relabelled out of the pool.
func TestFleetKeepsToItsPool(t *testing.T) {
	inPool := func(n *corev1.Node, pool string) *corev1.Node { n.Labels["pool"] = pool; return n }
	kube := fake.NewClientset(inPool(node("a1", mock.PCIeOnly), "a"), inPool(node("a2", mock.PCIeOnly), "a"), inPool(node("b1", mock.PCIeOnly), "b"))
	gpus := gpufake.NewSimpleClientset()
	if _, err := fleet.New(fleet.Config{KubeClient: kube, GPUClient: gpus, NodeSelector: "pool in (a"}); err == nil ||
		!strings.Contains(err.Error(), `node selector "pool in (a"`) {
		t.Errorf("a bad node selector: error %v, want one naming the selector", err)
	}
	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus, LeaseNamespace: "team-a", NodeSelector: "pool=a",
		Agent:            agent.Config{SchedulerName: "team-a", ProbeInterval: 20 * time.Millisecond, MinWriteInterval: -1, UsageWriteInterval: -1, HeartbeatInterval: time.Hour},
		EventWaitTimeout: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for _, n := range []string{"a1", "a2"} {
		eventually(t, "status of "+n+" labelled for team-a", func() bool {
			st, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, n, metav1.GetOptions{})
			return err == nil && st.Labels[apiv1.LabelSchedulerName] == "team-a" && st.Status.Total == 8
		})
	}
	if got := f.Nodes(); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("Nodes() = %v, want the pool's a1 and a2", got)
	}
	if _, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, "b1", metav1.GetOptions{}); err == nil {
		t.Error("the team-a fleet published a status for b1, a node of pool b")
	}
	a2, err := kube.CoreV1().Nodes().Get(ctx, "a2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a2.Labels["pool"] = "b"
	if _, err := kube.CoreV1().Nodes().Update(ctx, a2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a2's agent stopped once a2 left the pool", func() bool { return !slices.Contains(f.Nodes(), "a2") })
}

// The fleet's GB200 trays publish their rack's NVLink domain, in status.fabric and in the
// clique label, as one agent per node does: trays 0-17 of a pool share one domain, tray 18 is
// in the next; a DGX is in none.
func TestFleetPublishesTheNVLinkDomain(t *testing.T) {
	const gb200 = "gb200-nvl72"
	kube := fake.NewClientset(node("rack-0", gb200), node("rack-17", gb200), node("rack-18", gb200), node("dgx-0", mock.DGXH100))
	gpus := gpufake.NewSimpleClientset()
	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus, LeaseNamespace: "gpu-scheduler",
		Agent:            agent.Config{ProbeInterval: 20 * time.Millisecond, MinWriteInterval: -1, HeartbeatInterval: time.Hour},
		EventWaitTimeout: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	clique := map[string]string{}
	for _, name := range []string{"rack-0", "rack-17", "rack-18"} {
		var st *apiv1.GpuNodeStatus
		eventually(t, "the fabric of "+name, func() bool {
			st, _ = gpus.GpuV1().GpuNodeStatuses().Get(context.Background(), name, metav1.GetOptions{})
			return st != nil && st.Status.Fabric != nil
		})
		fab := st.Status.Fabric
		if fab.State != "Completed" || fab.CliqueID != 1 || fab.Clique != fab.ClusterUUID+".1" || fab.ClusterUUID == "" {
			t.Errorf("%s: fabric %+v, want clique 1 of a domain, Completed", name, *fab)
		}
		clique[name] = fab.Clique
		eventually(t, "the clique label of "+name, func() bool {
			n, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			return err == nil && n.Labels[apiv1.LabelGPUClique] == fab.Clique
		})
	}
	if clique["rack-0"] != clique["rack-17"] || clique["rack-0"] == clique["rack-18"] {
		t.Errorf("cliques %v: want rack-0 and rack-17 in one, rack-18 in another", clique)
	}
	var st *apiv1.GpuNodeStatus
	eventually(t, "the status of dgx-0", func() bool {
		st, _ = gpus.GpuV1().GpuNodeStatuses().Get(context.Background(), "dgx-0", metav1.GetOptions{})
		return st != nil && st.Status.Total == 8
	})
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "dgx-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Fabric != nil || n.Labels[apiv1.LabelGPUClique] != "" {
		t.Errorf("dgx-0: fabric %+v, clique label %q; want neither", st.Status.Fabric, n.Labels[apiv1.LabelGPUClique])
	}
}
