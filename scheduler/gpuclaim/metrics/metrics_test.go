package metrics

import (
	"strings"
	"testing"

	"k8s.io/component-base/metrics/testutil"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
)

// sources is a scheduler process's state as the fleet gauges read it.
type sources struct {
	gpus              []GPUCount
	pending           int
	oldest            float64
	peers, leftToPeer int
	hasPeers          bool
	shared            []ledger.SharerCount
	mig               []ledger.MIGCount
}

func (s *sources) GPUCounts() []GPUCount { return s.gpus }
func (s *sources) PartCounts() ([]ledger.SharerCount, []ledger.MIGCount) {
	return s.shared, s.mig
}
func (s *sources) Pending() (int, float64, bool)           { return s.pending, s.oldest, true }
func (s *sources) Peers() (size, leftToPeers int, ok bool) { return s.peers, s.leftToPeer, s.hasPeers }

func TestGPUsGauge(t *testing.T) {
	src := &sources{gpus: []GPUCount{{Model: "H100", State: StateFree, Count: 5}, {Model: "A100", State: StateAllocated, Count: 2}}}
	if err := testutil.CustomCollectAndCompare(&fleetCollector{src: src}, strings.NewReader(`
# HELP gpu_scheduler_gpus [ALPHA] GPUs the scheduler sees, by model (the agent's product name) and state: free (healthy, unheld), allocated (held by a pod), unhealthy (not Healthy).
# TYPE gpu_scheduler_gpus gauge
gpu_scheduler_gpus{model="A100",state="allocated"} 2
gpu_scheduler_gpus{model="H100",state="free"} 5
`), "gpu_scheduler_gpus"); err != nil {
		t.Error(err)
	}
	if err := testutil.CustomCollectAndCompare(&fleetCollector{}, strings.NewReader(""), "gpu_scheduler_gpus"); err != nil {
		t.Errorf("without a source: %v", err)
	}
}

func TestPlacementsStartAtZero(t *testing.T) {
	Register(nil)
	for _, r := range reasons {
		if v, err := testutil.GetCounterMetricValue(Placements.WithLabelValues(r[0], r[1])); err != nil || v != 0 {
			t.Errorf("placements_total{%s,%s} = %v, %v; want 0 before any attempt", r[0], r[1], v, err)
		}
	}
	Placement(ResultUnschedulable, ReasonNoFit)
	if v, _ := testutil.GetCounterMetricValue(Placements.WithLabelValues(ResultUnschedulable, ReasonNoFit)); v != 1 {
		t.Errorf("after one no_fit: %v", v)
	}
}

func TestPendingGauges(t *testing.T) {
	if err := testutil.CustomCollectAndCompare(&fleetCollector{src: &sources{pending: 3, oldest: 420}}, strings.NewReader(`
# HELP gpu_scheduler_pending_claims [ALPHA] GPU pods (one claim each) the scheduler turned away that still wait for GPUs.
# TYPE gpu_scheduler_pending_claims gauge
gpu_scheduler_pending_claims 3
# HELP gpu_scheduler_pending_claims_max_age_seconds [ALPHA] Age of the oldest GPU pod that still waits for GPUs; 0 when none waits.
# TYPE gpu_scheduler_pending_claims_max_age_seconds gauge
gpu_scheduler_pending_claims_max_age_seconds 420
`), "gpu_scheduler_pending_claims", "gpu_scheduler_pending_claims_max_age_seconds"); err != nil {
		t.Error(err)
	}
}

func TestPeersGauges(t *testing.T) {
	if err := testutil.CustomCollectAndCompare(&fleetCollector{src: &sources{peers: 2, leftToPeer: 17, hasPeers: true}}, strings.NewReader(`
# HELP gpu_scheduler_peers [ALPHA] gpu-scheduler processes that serve this profile and divide its GPU pods among them, this one included (1: it schedules them all).
# TYPE gpu_scheduler_peers gauge
gpu_scheduler_peers 2
# HELP gpu_scheduler_pods_left_to_peers [ALPHA] Pending GPU pods this process leaves to the peer that owns them.
# TYPE gpu_scheduler_pods_left_to_peers gauge
gpu_scheduler_pods_left_to_peers 17
`), "gpu_scheduler_peers", "gpu_scheduler_pods_left_to_peers"); err != nil {
		t.Error(err)
	}
}

func TestSharedAndMIGGauges(t *testing.T) {
	src := &sources{
		shared: []ledger.SharerCount{{Model: "H100", Sharers: 3, Count: 2}},
		mig:    []ledger.MIGCount{{Model: "H100", Profile: "1g.10gb", State: StateFree, Count: 4}},
	}
	if err := testutil.CustomCollectAndCompare(&fleetCollector{src: src}, strings.NewReader(`
# HELP gpu_scheduler_mig_devices [ALPHA] MIG devices the agents publish, by model, profile and state: free (healthy, unused), allocated (in use by a pod), unhealthy.
# TYPE gpu_scheduler_mig_devices gauge
gpu_scheduler_mig_devices{model="H100",profile="1g.10gb",state="free"} 4
# HELP gpu_scheduler_shared_gpus [ALPHA] GPUs held by Shared pods, by model and number of sharers (the pods sharing each; bounded by maxSharersPerGPU).
# TYPE gpu_scheduler_shared_gpus gauge
gpu_scheduler_shared_gpus{model="H100",sharers="3"} 2
`), "gpu_scheduler_shared_gpus", "gpu_scheduler_mig_devices"); err != nil {
		t.Error(err)
	}
}
