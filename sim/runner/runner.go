// Package runner plays a scenario: it brings up a harness cluster, creates the node pools,
// starts the production agent fleet, webhook and gpu-scheduler, plays the workload and the
// faults, records what happens and computes the figures; then it removes what that run created
// but the nodes and does the same on that control plane with the stock kube-scheduler. No
// scheduling happens here.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/baseline"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/profile"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// Modes of a run: gpu-scheduler, the stock kube-scheduler counting nvidia.com/gpu, and the
// stock kube-scheduler allocating GPUs through Dynamic Resource Allocation.
const (
	ModeGPU   = "gpu-scheduler"
	ModeStock = "kube-scheduler"
	ModeDRA   = "kube-scheduler-dra"
	// ModePremade plays a workload of controllers with gpu-scheduler as bare pods naming claims
	// made before the clock (spec.baseline.premadeClaims): with ModeTemplatedBare, the
	// yardstick for claim templates.
	ModePremade = "gpu-scheduler/pre-made"
	// ModeTemplatedBare plays the same bare pods as ModePremade, created the same way at the
	// same times, but naming the workload's GpuClaimTemplates: gpu-scheduler makes each claim
	// while it binds the pod, so the claim create is inside the timed workload. Against
	// ModePremade it differs by the templates alone (the gpu-scheduler run also differs by
	// kube-controller-manager's Job and ReplicaSet work); spec.baseline.premadeClaims runs both.
	ModeTemplatedBare = "gpu-scheduler/templates-bare-pods"
	// ModeStockAffinity is the stock kube-scheduler counting nvidia.com/gpu, with every member
	// of a gang that states gangTopology carrying a required podAffinity to its gang on that
	// level (spec.baseline.gangPodAffinity): what NVIDIA's ComputeDomain examples recommend.
	ModeStockAffinity = "kube-scheduler-gang-affinity"
)

// Modes lists the modes in the order they run and are reported. The DRA run comes last: runs
// after the first reuse its control plane and nodes once the previous run's objects are
// removed, and that removal knows nothing of ResourceSlices, DeviceClasses and
// ResourceClaimTemplates.
var Modes = []string{ModeGPU, ModePremade, ModeTemplatedBare, ModeStock, ModeStockAffinity, ModeDRA}

// ModeTitle is how the report heads a mode's column.
func ModeTitle(mode string) string {
	switch mode {
	case ModeStock:
		return "stock + nvidia.com/gpu"
	case ModeDRA:
		return "stock + DRA"
	case ModeStockAffinity:
		return "stock + gang podAffinity"
	case ModeTemplatedBare:
		return "gpu-scheduler/templates, bare pods"
	}
	return mode
}

// LeaseNamespace holds the GPU leases and the system components.
const LeaseNamespace = "gpu-scheduler"

// Fleet is the running agent fleet of a cluster: it publishes each node's GpuNodeStatus from
// the node's mock topology and takes injected GPU faults.
type Fleet interface {
	Inject(ctx context.Context, node string, gpu int, fault string) error
	// SlicesPublished is how many nodes have their ResourceSlice written (FleetOptions.DRA).
	SlicesPublished() int
	// LivenessWrites is how many liveness lease creates and renewals the agents have sent so
	// far: the apiserver's request counter cannot tell them from GPU lease creates and kwok's
	// node lease renewals, so the report takes them from the agents.
	LivenessWrites() metrics.LivenessWrites
}

// StartFleetFunc starts the agent fleet for the nodes of a cluster.
type StartFleetFunc func(ctx context.Context, c *cluster.Cluster, o FleetOptions) (Fleet, error)

// FleetOptions tune the agent fleet to the scenario.
type FleetOptions struct {
	// GPUFaults: the scenario injects GPU faults, so the agents probe every GPU often enough
	// for faults and recoveries to show within seconds. Without them the agents keep the
	// production probe interval: at 5,000 nodes, probing every 2 seconds cost a good share of
	// a core for nothing.
	GPUFaults bool
	// DRA: every node's agent also publishes the node's GPUs as a ResourceSlice (package
	// sim/dra), and the DeviceClass is created, for the DRA baseline.
	DRA bool
}

func fleetOptions(s *scenario.Scenario) FleetOptions {
	var o FleetOptions
	for _, f := range s.Spec.Faults {
		if f.Type == scenario.FaultGPUUnhealthy || f.Type == scenario.FaultGPURecover {
			o.GPUFaults = true
		}
	}
	return o
}

// Options configure a Run.
type Options struct {
	Scenario *scenario.Scenario
	// Baseline also runs the stock kube-scheduler (unless the scenario disables it).
	Baseline bool
	// StartFleet starts the agent fleet (launch.StartAgentFleet).
	StartFleet StartFleetFunc
	// Progress receives the progress bar; nil for none.
	Progress io.Writer
	// LogDir, when set, receives every component's log of each run.
	LogDir string
	// Kubeconfig, when set, runs against that existing cluster instead of starting a harness
	// control plane. The cluster must run kwok (kwokctl create cluster, gpu-sim cluster up) and a
	// kube-scheduler, and hold no GPU nodes of its own. Only what the run creates is removed.
	Kubeconfig string
	// BaselineKubeconfig, with Kubeconfig, runs the stock baseline on that second existing
	// cluster; without it the baseline runs on the Kubeconfig cluster after the first run's cleanup.
	BaselineKubeconfig string
	// DRA, when set, turns the DRA baseline on or off whatever the scenario says
	// (spec.baseline.dra). It runs only on harness clusters.
	DRA *bool
	// Profile takes CPU profiles of the kube-apiserver, the scheduler and gpu-sim during the
	// workload (into LogDir/profiles-<run>) and splits their CPU time by cause.
	Profile bool
}

// RunResult is one scheduler's run.
type RunResult struct {
	Mode    string         `json:"mode"`
	Metrics metrics.Result `json:"metrics"`
	// LowestFree is, for the stock run, the placement figures had its pods got the
	// lowest-numbered free GPUs instead of the device plugin's pick (the simulator's earlier,
	// naive reading), on the same bindings: how much the policy itself changes.
	LowestFree *PlacementFigures `json:"lowestFree,omitempty"`
	// Writes are the apiserver's write requests during the workload, by verb and resource.
	Writes           []metrics.WriteRow `json:"writes"`
	SchedulingWrites float64            `json:"schedulingWrites"`
	// AgentWrites are the agents' GpuNodeStatus and ResourceSlice writes; LivenessWrites their
	// liveness lease writes (creates and renewals), which the kubelet-like liveness signal costs.
	AgentWrites    float64 `json:"agentWrites"`
	LivenessWrites float64 `json:"livenessWrites"`
	Events         float64 `json:"events"`
	// Per bound pod.
	SchedulingWritesPerPod float64 `json:"schedulingWritesPerPod"`
	EventsPerPod           float64 `json:"eventsPerPod"`
	AgentWritesPerPod      float64 `json:"agentWritesPerPod"`
	LivenessWritesPerPod   float64 `json:"livenessWritesPerPod"`
	MeanGPUsPerPod         float64 `json:"meanGPUsPerPod"`
	// LeasesLeft are GPU leases still present after every pod was deleted.
	LeasesLeft int `json:"leasesLeft"`
	// OvercommittedLeases are the GPU leases seen, at any change, with their holders' shares
	// past the GPU's compute or memory.
	OvercommittedLeases int `json:"overcommittedLeases"`
	// ClaimsLeft and PodsLeft are the GpuClaims and pods left in the workload's namespace after
	// the run deleted its workload (its Jobs and Deployments, or its bare pods and any pre-made claims);
	// counted for workloads of controllers only (nil otherwise).
	ClaimsLeft *int `json:"claimsLeft,omitempty"`
	PodsLeft   *int `json:"podsLeft,omitempty"`
	// ClaimCreates are the GpuClaim creates during the workload (made from the templates: by
	// gpu-scheduler at binding, by gpu-controller for gangs), and ClaimCreatesPerPod per bound pod; PremadeClaims the claims created
	// before the clock (not in the workload's writes).
	ClaimCreates       float64 `json:"claimCreates"`
	ClaimCreatesPerPod float64 `json:"claimCreatesPerPod"`
	PremadeClaims      int     `json:"premadeClaims,omitempty"`
	// ClaimCreateCPU is what one of the PremadeClaims cost each process in CPU seconds, measured
	// while they were created (background subtracted, measureCreates): the price of the one
	// GpuClaim create a templated pod adds, on this machine, in this run.
	ClaimCreateCPU map[string]float64 `json:"claimCreateCPU,omitempty"`
	// ContractWriteCPU is what a GPU lease create and a GpuClaim status write cost, measured on
	// scratch objects before the clock (measureContractWrites): with the stock run's CPU per
	// pod, the floor the API contract's writes put under gpu-scheduler's.
	ContractWriteCPU *ContractWriteCPU `json:"contractWriteCPU,omitempty"`
	// BackgroundCPU is each process's CPU per second of wall time in an idle window just before
	// the workload (measureBackground): node heartbeats, agent writes, the components' resyncs.
	BackgroundCPU map[string]float64 `json:"backgroundCPU,omitempty"`
	// StampP50 and StampP99: for a workload of controllers, from the controller's create call
	// to its pod seen (kube-controller-manager's part of the latency).
	StampP50 time.Duration `json:"stampP50,omitempty"`
	StampP99 time.Duration `json:"stampP99,omitempty"`
	// ExtraPods are pods its controllers made beyond the plan (replacements); not in the figures.
	ExtraPods int `json:"extraPods,omitempty"`
	// ThroughputFromMade is pods bound per second from the first pod seen (made by its controller,
	// or created by the simulator) to the last binding: Throughput without the time a Job or
	// Deployment takes to make its first pod. Set for workloads of controllers.
	ThroughputFromMade float64 `json:"throughputFromMade,omitempty"`
	// PeakRSSBytes of all processes together (cluster, components and this one).
	PeakRSSBytes     int64            `json:"peakRSSBytes"`
	PeakRSSByProcess map[string]int64 `json:"peakRSSByProcess"`
	// WorkloadCPUSeconds is the CPU time each process used while the workload ran (processes
	// that exited before its end, such as a killed scheduler, are not counted), and
	// WorkloadCPUTotal their sum: on a shared machine this says where the throughput went.
	WorkloadCPUSeconds map[string]float64 `json:"workloadCPUSeconds"`
	WorkloadCPUTotal   float64            `json:"workloadCPUTotal"`
	// SchedulerStages is where the scheduled pods' latency went inside the scheduler, from its
	// own histograms at the end of the workload; nil without a reports directory or when the
	// scheduler's metrics could not be read (a note says why).
	SchedulerStages *metrics.Stages `json:"schedulerStages,omitempty"`
	// Waterfall is where the bound pods' time went, stage by stage, from each pod's own
	// timeline (metrics.ComputeWaterfall).
	Waterfall []metrics.Span `json:"waterfall,omitempty"`
	// APIServer is where the requests' time went inside the kube-apiserver during the
	// workload, by verb and resource and by admission webhook, from its own histograms.
	APIServer *metrics.APIServer `json:"apiServer,omitempty"`
	// CPUCauses split the profiled processes' workload CPU by cause (Options.Profile).
	CPUCauses    []profile.Breakdown `json:"cpuCauses,omitempty"`
	CreateErrors int64               `json:"createErrors"`
	Setup        time.Duration       `json:"setup"`
	Workload     time.Duration       `json:"workload"`
	Teardown     time.Duration       `json:"teardown"`
	// Phases are the run's steps in order with their durations (setup steps, workload,
	// deleting the workload, stopping the control plane).
	Phases []Phase `json:"phases"`
	// Unschedulable groups the last scheduler messages of pods never bound.
	Unschedulable map[string]int `json:"unschedulable,omitempty"`
	Notes         []string       `json:"notes,omitempty"`
	// DRAPodsWithoutIDs counts, in the DRA run, bound pods whose GPU IDs were not found in an
	// allocated ResourceClaim of theirs: the figures of that run stand on those IDs.
	DRAPodsWithoutIDs int `json:"draPodsWithoutIDs,omitempty"`
	// Fill holds the allocation figures of a fill run (workload.traceFile.fill).
	Fill *metrics.Fill `json:"fill,omitempty"`
	Pods []metrics.Pod `json:"-"`
}

// Run plays the scenario with the gpu-scheduler and, if asked, the stock scheduler.
func Run(ctx context.Context, o Options) ([]*RunResult, error) {
	targets, err := o.Targets()
	if err != nil {
		return nil, err
	}
	// The in-process agent fleet builds each node's mock NVML by the node's topology name:
	// the scenario's own hardware descriptions must be known by then.
	if err := scenario.RegisterHardware(o.Scenario); err != nil {
		return nil, err
	}
	var modes []string
	for _, m := range Modes {
		if _, ok := targets[m]; ok {
			modes = append(modes, m)
		}
	}
	// One site per cluster: the runs on the same one follow each other on its control plane.
	sites := map[string]*site{}
	defer func() {
		// Normally the last run on each site has closed it; this is for a run that failed
		// before it could.
		for _, st := range sites {
			_ = st.close(ctx)
		}
	}()
	var out []*RunResult
	for i, m := range modes {
		k := targets[m]
		st := sites[k]
		if st == nil {
			st = &site{kubeconfig: k}
			sites[k] = st
		}
		last := true
		for _, later := range modes[i+1:] {
			if targets[later] == k {
				last = false
			}
		}
		r, err := runOne(ctx, o, m, st, last)
		if err != nil {
			return out, fmt.Errorf("%s run of scenario %s: %w", m, o.Scenario.Metadata.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// runOne plays the scenario once, with mode's scheduler, on st's cluster; the first run on st
// starts (or attaches to) it, the last one stops it. The steps are modeRun's methods, in the
// order they run: the cluster and its nodes, the agents, the mode's own setup (gpu-scheduler's
// components and claims, or the DRA baseline's templates), the workload, the figures, the drain.
func runOne(ctx context.Context, o Options, mode string, st *site, last bool) (_ *RunResult, err error) {
	r := newModeRun(o, mode, st)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("mode", mode))
	if err := r.open(ctx); err != nil {
		return nil, err
	}
	defer func() { err = r.teardown(ctx, last, err) }()
	// Before the teardown above (defers run last-in first-out): the workload's goroutines, then
	// the agent fleet, then the recorder's watch; each is a no-op until its step started it.
	defer func() { r.stopWatch() }()
	defer func() { r.stopFleet() }()
	defer func() { r.stopWorkload() }()
	if err := r.prepareCluster(ctx); err != nil {
		return nil, err
	}
	if err := r.startAgents(ctx); err != nil {
		return nil, err
	}
	switch {
	case !r.stock: // gpu-scheduler, pre-made claims, templated bare pods
		if err := r.setupGPUScheduler(ctx); err != nil {
			return nil, err
		}
	case r.withDRA:
		if err := r.setupDRA(ctx); err != nil {
			return nil, err
		}
	}
	if !r.external {
		// What the processes use with nothing scheduled (node heartbeats, agent writes, resyncs):
		// the workload pays it for as long as it lasts, so the slower run pays more of it per pod.
		// Before the write counters are read, so that its writes count in no workload.
		r.bar.phase("waiting for the setup's writes to settle")
		waited, gaveUp, err := waitQuiet(ctx, r.c)
		if err != nil {
			return nil, err
		}
		if gaveUp {
			r.res.Notes = append(r.res.Notes, fmt.Sprintf("the processes' CPU use was still falling %s after the setup's last write; the idle background was measured anyway and may be high", waited.Round(time.Second)))
		}
		r.bar.phase("measuring the idle background")
		if r.res.BackgroundCPU, err = measureBackground(ctx, r.c); err != nil {
			return nil, err
		}
	}
	r.res.Setup = time.Since(r.began)
	w, err := r.playWorkload(ctx)
	if err != nil {
		return nil, err
	}
	r.workloadNotes(w)
	r.figures(w)
	return r.drain(ctx, last)
}

// modeRun is one run of the scenario with one mode's scheduler: what its steps share.
type modeRun struct {
	o    Options
	s    *scenario.Scenario
	mode string
	st   *site
	// stock: the stock kube-scheduler schedules (both baselines); withDRA: through DRA.
	// controllers: the run plays the workload's Jobs and Deployments (the gpu-scheduler and stock
	// runs); the pre-made and templated bare pods runs play their pods. templated: the pods name
	// GpuClaimTemplates, whose claims the garbage collector removes with their pods.
	stock, withDRA, controllers, templated bool
	// external: st is an existing cluster; reused: a run before this one opened st.
	external, reused bool

	res            *RunResult
	bar            *progress
	began          time.Time
	short, run, ns string
	nodes          int
	schedOpts      launch.SchedulerOptions

	// Set by the steps, in order.
	c       *cluster.Cluster
	mark    int // the cluster's processes before this run's
	cs      *kubernetes.Clientset
	gcs     *versioned.Clientset
	gcKnows chan error
	rec     *recorder
	plan    []scenario.PodPlan
	fleet   Fleet
	sched   *launch.Scheduler

	stopWatch, stopFleet, stopWorkload context.CancelFunc
}

func newModeRun(o Options, mode string, st *site) *modeRun {
	s := o.Scenario
	stock := IsStock(mode) // the baselines run the stock kube-scheduler
	controllers := len(s.Spec.Workload.Controllers) > 0 && mode != ModePremade && mode != ModeTemplatedBare
	began := time.Now()
	short := map[string]string{ModeGPU: "ours", ModeStock: "stock", ModeStockAffinity: "stockaff", ModeDRA: "dra", ModePremade: "premade", ModeTemplatedBare: "tmplbare"}[mode]
	nodes, _ := s.TotalNodes()
	noop := func() {}
	return &modeRun{
		o: o, s: s, mode: mode, st: st,
		stock: stock, withDRA: mode == ModeDRA, controllers: controllers,
		templated: (controllers && !stock) || mode == ModeTemplatedBare,
		external:  st.kubeconfig != "", reused: st.c != nil,
		res: &RunResult{Mode: mode, PeakRSSByProcess: map[string]int64{}},
		bar: newProgress(o.Progress, mode), began: began,
		short: short, run: runID(short, began), ns: s.Spec.Workload.Namespace, nodes: nodes,
		schedOpts: launch.SchedulerOptions{Name: "gpu-scheduler", LeaseNamespace: LeaseNamespace, NodeStrategy: s.Spec.Scheduler.NodeStrategy, QPS: float32(s.Spec.Scheduler.QPS), Profiling: o.Profile},
		stopWatch: noop, stopFleet: noop, stopWorkload: noop,
	}
}

// open starts the site's cluster, attaches to it or takes it over from the run before, and
// notes which; on a harness cluster a run after the first restarts etcd and kube-apiserver.
func (r *modeRun) open(ctx context.Context) error {
	switch {
	case r.reused:
		// No phase line: nothing is started.
	case r.external:
		r.bar.phase("attaching to the cluster of " + r.st.kubeconfig)
	default:
		r.bar.phase("starting the control plane")
	}
	if err := r.st.open(ctx, r.s, r.run, r.o.Profile); err != nil {
		return err
	}
	r.st.runs = append(r.st.runs, r.run)
	r.c = r.st.c
	r.mark = r.c.ProcessMark()
	if r.external {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("ran on the existing cluster of %s (its own kwok%s); peak RSS counts only the processes this run started and gpu-sim", r.st.kubeconfig, map[bool]string{true: " and kube-scheduler", false: ""}[r.stock]))
	}
	if r.reused && r.external {
		r.res.Notes = append(r.res.Notes, "ran after the run before it on the same cluster had removed everything it made but its nodes, which this run reused")
	}
	if r.reused && !r.external {
		r.res.Notes = append(r.res.Notes, "ran on the nodes and control plane of the run before it (etcd and kube-apiserver restarted on the same data, kube-controller-manager and kwok kept), after removing that run's processes, pods, claims, leases, GpuNodeStatuses, CRDs, webhook configurations and namespaces (docs/simulator.md)")
		// Fresh etcd and kube-apiserver processes on the same data: the figures of this run,
		// peak RSS above all, are then those of processes that served this run alone.
		r.bar.phase("restarting etcd and kube-apiserver")
		if err := r.c.RestartEtcdAndAPIServer(ctx); err != nil {
			_ = r.st.close(ctx)
			return err
		}
	}
	if r.reused {
		// gpu-sim itself cannot restart: the run before's agent fleet and recorder are gone,
		// and their heap goes back to the kernel now rather than gradually during this run.
		debug.FreeOSMemory()
	}
	return nil
}

// teardown, deferred, ends the run and returns err joined with what failed here. The site's
// last run (or a failed one: no run follows) stops everything and, on an existing cluster,
// removes what the runs created, even after Ctrl-C. A run that another follows on the same
// control plane and nodes stops its own processes and removes everything else it made, so
// that the next one starts as on a fresh cluster whose nodes are Ready.
func (r *modeRun) teardown(ctx context.Context, last bool, err error) error {
	t := time.Now()
	defer func() { r.bar.mark(""); r.res.Phases = r.bar.phases }()
	if last || err != nil {
		r.bar.phase(map[bool]string{true: "stopping the run's processes and removing its objects from the cluster", false: "stopping the control plane"}[r.external])
		if r.o.LogDir != "" {
			copyLogs(r.c.WorkDir(), filepath.Join(r.o.LogDir, "logs-"+r.short))
		}
		err = errors.Join(err, r.st.close(ctx))
	} else {
		r.bar.phase("stopping the run's processes")
		stopErr := r.c.StopSince(r.mark)
		if r.o.LogDir != "" {
			copyLogs(r.c.WorkDir(), filepath.Join(r.o.LogDir, "logs-"+r.short))
		}
		r.bar.phase("removing the run's objects (the nodes stay for the next run)")
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		err = errors.Join(err, stopErr, r.st.own.cleanup(cctx, r.c.RESTConfig(), []string{r.run}, true))
	}
	r.bar.phase("")
	r.res.Teardown += time.Since(t)
	return err
}

// prepareCluster readies the cluster for the run: the stock scheduler of a baseline run, the
// clients, the CRDs, the namespaces and the scenario's nodes, Ready.
func (r *modeRun) prepareCluster(ctx context.Context) error {
	if r.stock && !r.external {
		// The stock scheduler of this run only: a run after it starts its own.
		r.bar.phase("starting kube-scheduler")
		if err := r.c.StartStockScheduler(ctx); err != nil {
			return err
		}
	}
	cfg := r.c.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 10000
	var err error
	if r.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if r.gcs, err = versioned.NewForConfig(cfg); err != nil {
		return fmt.Errorf("GPU client: %w", err)
	}
	root, err := launch.RepoRoot()
	if err != nil {
		return err
	}
	if err := r.c.InstallCRDs(ctx, filepath.Join(root, "charts", "gpu-scheduler", "crds")); err != nil {
		return err
	}
	for _, n := range []string{LeaseNamespace, r.ns} {
		if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", n, err)
		}
	}
	// The garbage collector must know GpuClaims before the workload (waitGCKnowsClaims); its
	// probe runs alongside the setup and is waited for before the agent fleet starts.
	gcKnows := make(chan error, 1)
	r.gcKnows = gcKnows
	if r.templated {
		cs, gcs := r.cs, r.gcs
		go func() { gcKnows <- waitGCKnowsClaims(ctx, cs, gcs, r.ns, r.run) }()
	} else {
		gcKnows <- nil
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	return r.createNodes(ctx, mc)
}

// createNodes makes the scenario's nodes the cluster lacks and waits until kwok has them all
// Ready.
func (r *modeRun) createNodes(ctx context.Context, mc metadata.Interface) error {
	have, err := poolNodes(ctx, mc, r.s)
	if err != nil {
		return err
	}
	if have.Len() < r.nodes {
		r.bar.phase(fmt.Sprintf("creating %d nodes", r.nodes-have.Len()))
	}
	for _, p := range r.s.Spec.NodePools {
		if err := r.c.CreateNodes(ctx, r.nodePool(p), missingNodes(p, have)); err != nil {
			return err
		}
	}
	// One step after the other: overlapping the agent fleet's start and the claims with kwok
	// making 5,000 nodes Ready saturated the apiserver until its requests timed out and were
	// retried, which made the setup twice as long (5m45s instead of about 2.5 minutes).
	r.bar.phase(fmt.Sprintf("waiting for %d nodes to be Ready (kwok)", r.nodes))
	if err := r.c.WaitNodesReady(ctx, labels.SelectorFromSet(labels.Set{cluster.LabelKwokType: "kwok"}), r.nodes, 5*time.Minute); err != nil {
		if r.external {
			return fmt.Errorf("%w (does the cluster run kwok? make it with \"kwokctl create cluster\" or \"gpu-sim cluster up\")", err)
		}
		return err
	}
	return waitServiceAccount(ctx, r.cs, r.ns)
}

// nodePool is the cluster's description of the scenario's pool p.
func (r *modeRun) nodePool(p scenario.NodePool) cluster.NodePool {
	np := cluster.NodePool{Name: p.Name, Count: p.Count, GPUsPerNode: p.GPUsPerNode, Topology: p.Topology, Labels: p.Labels}
	if p.CPUMilli > 0 {
		np.CPU = *resource.NewMilliQuantity(int64(p.CPUMilli), resource.DecimalSI)
	}
	if p.MemoryMiB > 0 {
		np.Memory = *resource.NewQuantity(int64(p.MemoryMiB)<<20, resource.BinarySI)
	}
	if r.external {
		// Cleanup deletes exactly the nodes carrying the site's label.
		np.Labels = map[string]string{LabelRun: r.st.own.run}
		for k, v := range p.Labels {
			np.Labels[k] = v
		}
	}
	for _, t := range p.Taints {
		np.Taints = append(np.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return np
}

// startAgents starts the recorder's watch, then the agent fleet, and waits until every node's
// GpuNodeStatus (and, for DRA, its ResourceSlice) is published and the start-up writes settled.
func (r *modeRun) startAgents(ctx context.Context) error {
	// The recorder's clock starts now; the workload's offsets are taken from t0 (newPlayer).
	r.rec = newRecorder(time.Now())
	r.plan = scenario.Expand(r.s)
	if r.controllers {
		r.rec.useSlots(r.plan)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	r.stopWatch = stopWatch
	if err := r.rec.watch(watchCtx, r.cs, r.gcs, r.ns, r.withDRA, !r.stock); err != nil {
		return err
	}
	// Waited for before the agents start, not just before the clock: an agent writes its GPUs'
	// usage at its first change once agent.Config.UsageWriteInterval has passed since its last
	// write (30 s when this wait was added: 40 writes inside workloads.yaml's workload from
	// agents started half a minute before it; 10 minutes now), so the agents start as close
	// to the clock as in the other runs.
	if r.templated {
		r.bar.phase("waiting for the garbage collector to know GpuClaims")
	}
	if err := <-r.gcKnows; err != nil {
		return err
	}
	r.bar.phase("starting the agent fleet")
	fleetCtx, stopFleet := context.WithCancel(ctx)
	r.stopFleet = stopFleet
	fo := fleetOptions(r.s)
	fo.DRA = r.withDRA
	fleet, err := r.o.StartFleet(fleetCtx, r.c, fo)
	if err != nil {
		return err
	}
	r.fleet = fleet
	rec, nodes := r.rec, r.nodes
	if err := waitFor(ctx, 3*time.Minute, func() bool { return rec.statusCount() >= nodes }); err != nil {
		return fmt.Errorf("waiting for the agent fleet to publish %d GpuNodeStatus objects (have %d): %w", nodes, rec.statusCount(), err)
	}
	r.bar.phase("waiting for the agent fleet's start-up writes to settle")
	if err := waitFleetSettled(ctx, rec, nodes, 2*time.Minute); err != nil {
		r.res.Notes = append(r.res.Notes, err.Error())
	}
	if r.withDRA {
		if err := waitFor(ctx, 3*time.Minute, func() bool { return fleet.SlicesPublished() >= nodes }); err != nil {
			return fmt.Errorf("waiting for the agent fleet to publish %d ResourceSlices (have %d): %w", nodes, fleet.SlicesPublished(), err)
		}
	}
	return nil
}

// setupGPUScheduler starts gpu-scheduler's components (the gpu-scheduler, pre-made claims and
// templated bare pods runs), then makes what the pods name: the GpuClaimTemplates, or the
// claims themselves before the clock.
func (r *modeRun) setupGPUScheduler(ctx context.Context) error {
	r.bar.phase("starting the webhook and gpu-scheduler")
	if _, err := launch.StartWebhook(ctx, r.c, launch.WebhookOptions{Namespace: LeaseNamespace}); err != nil {
		return err
	}
	var err error
	if r.sched, err = launch.StartScheduler(ctx, r.c, r.schedOpts); err != nil {
		return err
	}
	// gpu-controller makes the claims of pods that name a GpuClaimTemplate (and runs
	// GpuWorkloads); one small process, idle when a scenario uses neither.
	if _, err := launch.StartController(ctx, r.c, launch.ControllerOptions{}); err != nil {
		return err
	}
	if r.templated {
		r.bar.phase(fmt.Sprintf("creating %d GpuClaimTemplates", len(r.s.Spec.Workload.ClaimTemplates)))
		return createClaimTemplates(ctx, r.gcs, r.s, r.ns, r.run)
	}
	return r.premakeClaims(ctx)
}

// premakeClaims creates every pod's GpuClaim before the clock and, on a cluster this run
// started, measures what a create costs and (gpu-scheduler run) what the API contract's lease
// creates and claim status writes cost.
func (r *modeRun) premakeClaims(ctx context.Context) error {
	r.bar.phase(fmt.Sprintf("creating %d GpuClaims (and measuring what a create costs)", len(r.plan)))
	create := func() error { return createClaims(ctx, r.gcs, r.plan, r.ns, r.run) }
	if r.external {
		// The processes of a cluster gpu-sim did not start are not measured.
		if err := create(); err != nil {
			return err
		}
	} else {
		cost, err := measureCreates(ctx, r.c, len(r.plan), create)
		if err != nil {
			return err
		}
		r.res.ClaimCreateCPU = cost
	}
	r.res.PremadeClaims = len(r.plan)
	if r.mode == ModeGPU && !r.external {
		n := calibrationObjects(len(r.plan))
		r.bar.phase(fmt.Sprintf("measuring what %d lease creates and claim status writes cost", n))
		var err error
		if r.res.ContractWriteCPU, err = measureContractWrites(ctx, r.c, r.cs, r.gcs, n); err != nil {
			return err
		}
	}
	return nil
}

// setupDRA creates the DRA baseline's ResourceClaimTemplates and notes what of the claims DRA
// cannot express.
func (r *modeRun) setupDRA(ctx context.Context) error {
	r.bar.phase("creating the ResourceClaimTemplates")
	if err := createTemplates(ctx, r.cs, r.plan, r.ns); err != nil {
		return err
	}
	r.res.Notes = append(r.res.Notes, draGaps(r.plan)...)
	return nil
}

// workload is what playing the workload leaves for the figures.
type workload struct {
	pl            *player
	t0, end       time.Duration // on the recorder's clock
	before, after metrics.RequestCounts
	// apiBefore and apiAfter are the API server's latency histograms at the two ends.
	apiBefore, apiAfter metrics.Histograms
	liveness            metrics.LivenessWrites
	full, timedOut      bool
}

// playWorkload plays the workload and the faults from the clock's start until the workload is
// done (waitWorkload), and reads what it cost: CPU, profiles, the apiserver's requests, the
// agents' liveness writes.
func (r *modeRun) playWorkload(ctx context.Context) (*workload, error) {
	before, apiBefore, err := scrapeRequests(ctx, r.cs)
	if err != nil {
		return nil, err
	}
	livenessBefore := r.fleet.LivenessWrites()
	pl := r.newPlayer()
	w := &workload{pl: pl, t0: pl.t0, before: before, apiBefore: apiBefore}
	var prof *profile.Collection
	if r.o.Profile && r.o.LogDir != "" {
		if prof, err = startProfiles(ctx, r.c, r.sched, r.schedOpts.Name, filepath.Join(r.o.LogDir, "profiles-"+r.short)); err != nil {
			return nil, err
		}
	}
	cpuStart := markCPU(r.c)
	r.bar.mark("workload")
	wctx, cancelW := context.WithCancel(ctx)
	r.stopWorkload = cancelW
	var wg sync.WaitGroup
	var rssMu sync.Mutex
	wg.Go(func() { sampleRSS(wctx, r.c, &rssMu, r.res) })
	f := &faults{c: r.c, cs: r.cs, fleet: r.fleet, stock: r.stock, external: r.external, sched: r.sched, schedOpts: r.schedOpts, res: r.res}
	wg.Go(func() { f.play(wctx, r.s.Spec.Faults, r.rec, w.t0) })
	playErr := make(chan error, 1)
	go func() { playErr <- pl.play(wctx) }()
	if err := r.waitWorkload(ctx, w); err != nil {
		return nil, err
	}
	r.res.Workload = w.end - w.t0
	r.res.WorkloadCPUSeconds = cpuStart.until(markCPU(r.c))
	for _, v := range r.res.WorkloadCPUSeconds {
		r.res.WorkloadCPUTotal += v
	}
	bound, _ := r.rec.counts()
	if prof != nil {
		files, perr := prof.Stop()
		if perr != nil {
			r.res.Notes = append(r.res.Notes, "profiles: "+perr.Error())
		}
		if r.res.CPUCauses, perr = profile.Breakdowns(files, r.res.WorkloadCPUSeconds, bound); perr != nil {
			r.res.Notes = append(r.res.Notes, perr.Error())
		}
	}
	r.bar.last = time.Time{}
	r.bar.update(bound, int(pl.created.Load()), len(r.plan), w.end-w.t0)
	r.bar.done()
	if w.after, w.apiAfter, err = scrapeRequests(ctx, r.cs); err != nil {
		return nil, err
	}
	w.liveness = r.fleet.LivenessWrites().Sub(livenessBefore)
	// After the counters are read, so that the list is in no figure; before the timeline file.
	r.readScheduled(ctx)
	if r.o.LogDir != "" {
		r.saveRunFiles(ctx)
	}
	cancelW()
	wg.Wait()
	if perr := <-playErr; perr != nil && !errors.Is(perr, context.Canceled) {
		return nil, perr
	}
	return w, nil
}

// newPlayer makes the workload's player, with the plan's times moved to the recorder's clock
// from now (t0).
func (r *modeRun) newPlayer() *player {
	workers := 32
	if len(r.plan) > 2000 {
		workers = 64
	}
	pl := &player{cs: r.cs, rec: r.rec, plan: r.plan, ns: r.ns, run: r.run, mode: r.mode, serial: r.s.Spec.Workload.Deterministic, workers: workers}
	if r.controllers {
		pl.controllers = r.s.Spec.Workload.Controllers
	}
	t0 := r.rec.now()
	pl.t0 = t0
	for i := range pl.plan {
		pl.plan[i].At += t0
		if pl.plan[i].DeleteAt > 0 {
			pl.plan[i].DeleteAt += t0
		}
	}
	return pl
}

// waitWorkload waits, updating the progress bar, until every pod is created and settled and
// every delete made, a fill run's cluster is full, or spec.timeout has passed; w.end is then.
func (r *modeRun) waitWorkload(ctx context.Context, w *workload) error {
	deadline := w.t0 + r.s.Spec.Timeout.Duration
	fill := r.s.Spec.Workload.IsFill()
	total := len(r.plan)
	for pl := w.pl; ; {
		bound, _ := r.rec.counts()
		r.bar.update(bound, int(pl.created.Load()), total, r.rec.now()-w.t0)
		if int(pl.created.Load())+int(pl.createErrors.Load()) >= total && pl.settled(r.rec) && pl.deletesDone.Load() {
			break
		}
		if fill && r.rec.full(r.s.Spec.Workload.TraceFile.QuietPeriodOrDefault()) {
			// The cluster is full: waiting out the timeout would add nothing but minutes.
			w.full = true
			break
		}
		if r.rec.now() > deadline {
			w.timedOut = true
			break
		}
		select {
		case <-ctx.Done():
			r.bar.done()
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	w.end = r.rec.now()
	return nil
}

// saveRunFiles writes, beside the components' logs, where each pod's time went and how the
// scheduler's queue moved them (read when a figure needs explaining), and the scheduler's
// metrics page, from which it takes the scheduler's stages.
func (r *modeRun) saveRunFiles(ctx context.Context) {
	if err := r.rec.writeTimeline(filepath.Join(r.o.LogDir, "pods-"+r.short+".tsv")); err != nil {
		r.res.Notes = append(r.res.Notes, err.Error())
	}
	url := ""
	switch {
	case r.sched != nil:
		url = "https://127.0.0.1:" + strconv.Itoa(r.sched.Port)
	case r.stock && !r.c.Attached():
		url = r.c.SchedulerURL()
	}
	if url == "" {
		return
	}
	page, err := saveSchedulerMetrics(ctx, r.c.RESTConfig(), url, filepath.Join(r.o.LogDir, "scheduler-metrics-"+r.short+".txt"))
	if err != nil {
		r.res.Notes = append(r.res.Notes, err.Error())
	} else if stages, err := metrics.ParseStages(bytes.NewReader(page)); err != nil {
		r.res.Notes = append(r.res.Notes, err.Error())
	} else {
		r.res.SchedulerStages = &stages
	}
}

// readScheduled takes the bound pods' binding moments from their schedulers' Scheduled events
// (recorder.observeScheduled), before the drain deletes them. On an existing cluster the
// scheduler's clock need not be this machine's, so it is skipped there.
func (r *modeRun) readScheduled(ctx context.Context) {
	if r.external {
		return
	}
	events, err := listScheduledEvents(ctx, r.cs, r.ns)
	if err != nil {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("no latency to the scheduler's stamp: %v", err))
		return
	}
	stamped := r.rec.observeScheduled(events)
	if bound, _ := r.rec.counts(); stamped < bound {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%d of %d bound pods had a Scheduled event (a scheduler's event broadcaster drops events when its queue is full); the latency to the scheduler's stamp is over those", stamped, bound))
	}
}

// workloadNotes notes how the workload ended and what the mode's own records add: a DRA
// run's fallbacks and claims, a workload of controllers' stamping and extra pods, failed creates.
func (r *modeRun) workloadNotes(w *workload) {
	res := r.res
	if w.full {
		res.Notes = append(res.Notes, fmt.Sprintf("fill: stopped %s after the first pod could not be placed and the last binding; %d of %d pods created", r.s.Spec.Workload.TraceFile.QuietPeriodOrDefault(), w.pl.created.Load(), len(r.plan)))
	}
	if w.timedOut {
		res.Notes = append(res.Notes, fmt.Sprintf("the workload did not finish within spec.timeout %s; pods still pending count as unscheduled", r.s.Spec.Timeout.Duration))
	}
	if r.withDRA {
		r.draNotes(w.pl)
	}
	res.CreateErrors = w.pl.createErrors.Load()
	if r.controllers {
		res.StampP50, res.StampP99, res.ExtraPods = r.rec.stamping()
		if res.ExtraPods > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("the Jobs and Deployments made %d pods beyond their replicas (replacements); they are not in the figures", res.ExtraPods))
		}
	}
	if res.CreateErrors > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d pod creates failed (see the log)", res.CreateErrors))
	}
}

// draNotes counts the DRA run's bound pods without GPU IDs and notes how many topology
// Preferred pods the prioritized list's fallback placed, and the ResourceClaims made.
func (r *modeRun) draNotes(pl *player) {
	rec, res := r.rec, r.res
	rec.mu.Lock()
	made, late := rec.claimsSeen.Len(), rec.claimsAfterEnd
	preferred, fellBack := 0, 0
	for _, p := range r.plan {
		if pr := rec.pods[p.Name]; pr != nil && pr.boundOK && len(pr.ids) == 0 {
			res.DRAPodsWithoutIDs++
		}
		if shapeOf(p.Claim).mode != gpuv1.TopologyPreferred {
			continue
		}
		if pr := rec.pods[p.Name]; pr != nil && pr.boundOK && len(pr.ids) > 0 {
			preferred++
			if pr.draFallback {
				fellBack++
			}
		}
	}
	rec.mu.Unlock()
	if preferred > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d of %d bound pods with topology Preferred were allocated by the prioritized list's fallback (any GPUs), not in one island", fellBack, preferred))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("kube-controller-manager made %d ResourceClaims for the %d pods created; %d of them for pods that had already finished (a finished pod's claim is deleted, and the delete brings the pod back to the resource-claim controller, which makes the claim anew from the template)", made, pl.created.Load(), late))
}

// figures computes the run's figures from what the recorder saw: placement and latency, the
// waterfall, throughput from the first pod made, the stock run's lowest-free reading, a fill
// run's allocation, why pods stayed unscheduled, and the writes.
func (r *modeRun) figures(w *workload) {
	res := r.res
	pools := map[string]scenario.NodePool{}
	for _, p := range r.s.Spec.NodePools {
		pools[p.Name] = p
	}
	in := collect(r.rec, r.plan, pools, w.t0, w.end, r.stock && !r.withDRA)
	res.Pods = in.Pods
	res.Metrics = metrics.Compute(in)
	res.OvercommittedLeases = r.rec.overcommittedLeases()
	// The player shifted the plan to the recorder's clock; controllers' pods have no plan times.
	res.Waterfall = metrics.ComputeWaterfall(r.rec.steps(r.plan, w.t0, !r.controllers))
	res.APIServer = metrics.APIServerFigures(w.apiAfter.Sub(w.apiBefore))
	// From the first pod made: needs the bound figures, so after Compute.
	if len(r.s.Spec.Workload.Controllers) > 0 {
		if first, ok := r.rec.firstSeen(); ok && res.Metrics.Bound > 0 {
			if span := (res.Metrics.LastBound - (first - w.t0)).Seconds(); span > 0 {
				res.ThroughputFromMade = float64(res.Metrics.Bound) / span
			}
		}
	}
	if r.mode == ModeStock {
		naive := in
		naive.StockPick = nil
		m := metrics.Compute(naive)
		res.LowestFree = &PlacementFigures{IslandLocal: m.IslandLocal, IslandPossible: m.IslandPossible, IslandLocalRatio: m.IslandLocalRatio, ContiguityRatio: m.ContiguityRatio}
	}
	if r.s.Spec.Workload.IsFill() {
		res.Fill = r.fillFigures(in)
	}
	res.Unschedulable = r.unschedulable()
	r.writeFigures(w, in)
}

// fillFigures are a fill run's allocation figures, over the pods that arrived before it stopped.
func (r *modeRun) fillFigures(in metrics.Input) *metrics.Fill {
	arrived := in
	arrived.Pods = nil
	r.rec.mu.Lock()
	for _, p := range in.Pods {
		if pr := r.rec.pods[p.Name]; pr != nil && pr.createdOK {
			arrived.Pods = append(arrived.Pods, p)
		}
	}
	r.rec.mu.Unlock()
	f := metrics.ComputeFill(arrived)
	return &f
}

// unschedulable groups the last scheduler messages of the pods never bound.
func (r *modeRun) unschedulable() map[string]int {
	out := map[string]int{}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	for _, p := range r.plan {
		if pr := r.rec.pods[p.Name]; pr != nil && !pr.boundOK && pr.unschedulable != "" {
			msg := pr.unschedulable
			if len(msg) > 160 {
				msg = msg[:160] + "..."
			}
			out[msg]++
		}
	}
	return out
}

// writeFigures are the apiserver writes of the workload, by kind and per bound pod.
func (r *modeRun) writeFigures(w *workload, in metrics.Input) {
	res := r.res
	diff := w.after.Sub(w.before)
	res.Writes, res.SchedulingWrites, res.AgentWrites, _ = metrics.Writes(diff, w.liveness)
	res.LivenessWrites = w.liveness.Creates + w.liveness.Renewals
	for k, v := range diff {
		if k.Resource == "events" && metrics.IsWrite(k.Verb) {
			res.Events += v
		}
	}
	for k, v := range diff {
		if k.Resource == "gpuclaims" && k.Subresource == "" && k.Verb == "POST" {
			res.ClaimCreates += v
		}
	}
	if b := float64(res.Metrics.Bound); b > 0 {
		res.ClaimCreatesPerPod = res.ClaimCreates / b
		res.SchedulingWritesPerPod = res.SchedulingWrites / b
		res.EventsPerPod = res.Events / b
		res.AgentWritesPerPod = res.AgentWrites / b
		res.LivenessWritesPerPod = res.LivenessWrites / b
		gpus := 0
		for _, p := range in.Pods {
			if p.BoundOK {
				gpus += p.GPUs
			}
		}
		res.MeanGPUsPerPod = float64(gpus) / b
	}
}

// drain deletes the workload once the figures are taken and counts what outlives it: the GPU
// leases the scheduler should have released, and a workload of controllers' claims and pods.
func (r *modeRun) drain(ctx context.Context, last bool) (*RunResult, error) {
	t := time.Now()
	if r.stock && !r.external && last {
		// The stock run's cluster is thrown away with everything in it, and it has no leases to
		// count: deleting its pods would only add minutes to a large scenario.
		r.res.Teardown = time.Since(t)
		return r.res, nil
	}
	// The figures are taken: stop the agents and the watch before the teardown. Every lease the
	// scheduler releases would otherwise make the node's agent rewrite its GpuNodeStatus (at
	// scale-5k thousands of custom-resource writes competing with the releases we wait for),
	// and the recorder would process every pod delete. Neither deletes leases, so the count of
	// leases left is the scheduler's alone either way.
	r.stopFleet()
	r.stopWatch()
	r.bar.phase("deleting the workload")
	if r.controllers {
		if err := deleteControllers(ctx, r.cs, r.ns, r.run); err != nil {
			return nil, err
		}
	}
	if err := deleteWorkload(ctx, r.cs, r.ns, r.run); err != nil {
		return nil, err
	}
	if !r.stock {
		if err := r.waitLeasesReleased(ctx); err != nil {
			return nil, err
		}
	}
	if len(r.s.Spec.Workload.Controllers) > 0 {
		if err := r.countLeftovers(ctx); err != nil {
			return nil, err
		}
	}
	r.res.Teardown = time.Since(t)
	r.bar.phase("")
	return r.res, nil
}

// waitLeasesReleased waits up to 5 minutes for the scheduler to release every GPU lease and
// records how many are left.
func (r *modeRun) waitLeasesReleased(ctx context.Context) error {
	r.bar.phase("waiting for the scheduler to release the GPU leases")
	// Polls 0.2 s apart at first, then at most every 2 s: a full list of 26,000 leases five
	// times a second slowed down the very releases it waited for, while a small run's
	// leases are gone well within the first 2 s.
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 1 << 20, Cap: 2 * time.Second}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		n, err := countLeases(ctx, r.cs)
		r.res.LeasesLeft = n
		if (err == nil && n == 0) || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff.Step()):
		}
	}
}

// countLeftovers counts the GpuClaims and pods a workload of controllers left behind, after
// deleting the pre-made run's claims as their user would.
func (r *modeRun) countLeftovers(ctx context.Context) error {
	if r.mode == ModePremade {
		// The user deletes hand-made claims; templated ones go with their pods.
		if err := r.gcs.GpuV1().GpuClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: LabelRun + "=" + r.run}); err != nil {
			return fmt.Errorf("deleting the pre-made GpuClaims in %s: %w", r.ns, err)
		}
	}
	r.bar.phase("counting the GpuClaims and pods left")
	claims, pods, err := leftovers(ctx, r.cs, r.gcs, r.ns, 2*time.Minute)
	if err != nil {
		return err
	}
	r.res.ClaimsLeft, r.res.PodsLeft = &claims, &pods
	return nil
}

// startProfiles profiles the kube-apiserver and the scheduler (on a cluster this run started)
// and gpu-sim itself while the workload runs.
func startProfiles(ctx context.Context, c *cluster.Cluster, sched *launch.Scheduler, schedName, dir string) (*profile.Collection, error) {
	var targets []profile.Target
	if !c.Attached() {
		targets = append(targets, profile.Target{Process: cluster.ComponentAPIServer, URL: c.RESTConfig().Host})
		if u := c.SchedulerURL(); u != "" {
			targets = append(targets, profile.Target{Process: cluster.ComponentScheduler, URL: u})
		}
	}
	if sched != nil {
		targets = append(targets, profile.Target{Process: schedName, URL: "https://127.0.0.1:" + strconv.Itoa(sched.Port)})
	}
	return profile.Start(ctx, dir, c.RESTConfig(), targets)
}

// deleteWorkload deletes the run's pods with grace 0 (they are fake, and waiting for kwok to
// finish 10,000 graceful deletions took longer than the run itself; the scheduler sees the
// deletes either way) with DeleteCollection by the run's label, repeated until no pod of the
// run is left. The harness apiserver deletes a collection's items on 64 workers
// (--delete-collection-workers), which costs it less than one request per pod; an existing
// cluster's apiserver may do it one after another, and a call that outlasts its request timeout
// is simply made again for what is left.
func deleteWorkload(ctx context.Context, cs kubernetes.Interface, ns, run string) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zeroGrace}
	byRun := metav1.ListOptions{LabelSelector: LabelRun + "=" + run}
	var lastErr error
	gone := waitFor(ctx, 5*time.Minute, func() bool {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: byRun.LabelSelector, Limit: 1})
		if err == nil && len(l.Items) == 0 {
			return true
		}
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, opts, byRun); err != nil {
			lastErr = err
		}
		return false
	})
	if gone != nil {
		// %v, not %w: lastErr is nil when every delete succeeded and the pods still did not go, and
		// %w would print that as %!w(<nil>).
		return fmt.Errorf("deleting the workload pods in %s: %w (last delete error: %v)", ns, gone, lastErr) //nolint:errorlint // see above
	}
	return nil
}

// settled: every created pod is bound or ended.
func (pl *player) settled(rec *recorder) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, p := range pl.plan {
		r := rec.pods[p.Name]
		if r == nil || !r.createdOK {
			return false
		}
		if !r.boundOK && !r.endedOK {
			return false
		}
	}
	return true
}

// collect turns the recorder's observations into metrics input, with offsets from t0.
func collect(rec *recorder, plan []scenario.PodPlan, pools map[string]scenario.NodePool, t0, end time.Duration, stock bool) metrics.Input {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	in := metrics.Input{AnyN: stock, End: end - t0}
	if stock {
		in.StockPick = stockPick
	}
	names := make([]string, 0, len(rec.nodes))
	for n := range rec.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := rec.nodes[n]
		node := metrics.Node{Name: n, Islands: make([]string, len(st.Status.Devices)), BandwidthGBps: make([]int, len(st.Status.Devices)), MemoryMiB: make([]int64, len(st.Status.Devices))}
		if i := strings.LastIndexByte(n, '-'); i > 0 {
			node.Pool = n[:i]
			node.Topology = pools[node.Pool].Topology
			node.Labels = nodeLabels(pools[node.Pool], n)
		}
		for _, d := range st.Status.Devices {
			if int(d.ID) < len(node.Islands) {
				node.Islands[d.ID] = d.Island
				node.BandwidthGBps[d.ID] = int(d.BandwidthGBps)
				node.MemoryMiB[d.ID] = d.MemoryMiB
			}
		}
		in.Nodes = append(in.Nodes, node)
	}
	for _, h := range rec.health {
		h.At = max(h.At-t0, 0)
		in.Health = append(in.Health, h)
	}
	for _, p := range plan {
		r := rec.pods[p.Name]
		mp := metrics.Pod{Name: p.Name, Kind: p.Kind, GPUs: p.Claim.Count, Shared: p.Claim.Exclusivity == string(gpuv1.Shared), Gang: p.Gang, Selector: p.Claim.Selector}
		if t := p.Claim.Topology; t != nil {
			mp.Topology, mp.MinBandwidthGBps = t.Mode, t.MinBandwidthGBps
		}
		if t := p.Claim.GangTopology; t != nil && p.Gang != "" {
			mp.GangLevel, mp.GangMode = t.Level, t.Mode
		}
		// The stock runs hold a whole GPU for it, but the pod asked for its part: the fill
		// figures count what was asked, in every run alike.
		if sh := p.Claim.Share; sh != nil && sh.ComputePercent > 0 {
			mp.Part = float64(sh.ComputePercent) / 100
		}
		if r != nil {
			mp.Created = r.created - t0
			if r.seenOK {
				mp.Seen, mp.SeenOK = r.seen-t0, true
			}
			if r.unschedOK {
				mp.Unschedulable, mp.UnschedulableOK = r.unschedAt-t0, true
			}
			if r.boundOK {
				mp.Bound, mp.BoundOK, mp.Node, mp.IDs = r.bound-t0, true, r.node, r.ids
				mp.ShareMemoryMiB, mp.ShareComputePercent = r.share.MemoryMiB, int(r.share.ComputePercent)
			}
			if r.endedOK {
				mp.Ended, mp.EndedOK = r.ended-t0, true
			}
		}
		in.Pods = append(in.Pods, mp)
	}
	return in
}

// nodeLabels are the labels node name of pool carries, as sim/cluster's NodePool.Node sets
// them (the pool's own cannot override the others): what a claim's selector is matched on.
func nodeLabels(pool scenario.NodePool, name string) map[string]string {
	l := map[string]string{cluster.LabelPool: pool.Name, corev1.LabelHostname: name,
		corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", cluster.LabelKwokType: "kwok"}
	if pool.Topology != "" {
		l[gpuv1.LabelTopology] = pool.Topology
	}
	for k, v := range pool.Labels {
		if _, set := l[k]; !set {
			l[k] = v
		}
	}
	return l
}

// scrapeRequests reads the API server's request totals and its latency histograms
// (metrics.APIServerFamilies) from its /metrics.
func scrapeRequests(ctx context.Context, cs kubernetes.Interface) (metrics.RequestCounts, metrics.Histograms, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	counts, err := metrics.ParseRequestTotals(string(raw))
	if err != nil {
		return nil, nil, err
	}
	hist, err := metrics.ParseHistograms(bytes.NewReader(raw), metrics.APIServerFamilies...)
	if err != nil {
		return nil, nil, err
	}
	return counts, hist, nil
}

// countLeases counts the GPU leases. (A one-item page would not help: the apiserver gives no
// remaining-item count for a list with a label selector.)
func countLeases(ctx context.Context, cs kubernetes.Interface) (int, error) {
	l, err := cs.CoordinationV1().Leases(LeaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: gpuv1.LabelLeaseNode})
	if err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

func waitServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string) error {
	err := waitFor(ctx, time.Minute, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("waiting for service account %s/default: %w", ns, err)
	}
	return nil
}

// waitFor polls cond every 200ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
}

var zeroGrace int64

// sampleRSS records the peak resident memory of all processes together, every second.
func sampleRSS(ctx context.Context, c *cluster.Cluster, mu *sync.Mutex, res *RunResult) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var total int64
		mu.Lock()
		for _, p := range c.Processes() {
			if !p.Running {
				continue // an earlier run's scheduler or webhook, on a reused control plane
			}
			total += p.RSSBytes
			res.PeakRSSByProcess[p.Name] = max(res.PeakRSSByProcess[p.Name], p.RSSBytes)
		}
		if self, err := cluster.RSS(os.Getpid()); err == nil {
			total += self
			res.PeakRSSByProcess["gpu-sim"] = max(res.PeakRSSByProcess["gpu-sim"], self)
		}
		res.PeakRSSBytes = max(res.PeakRSSBytes, total)
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// cpuMark is the CPU time used so far by each running process, by PID.
type cpuMark map[int]cpuUse

type cpuUse struct {
	name    string
	seconds float64
}

// markCPU reads the CPU time of the cluster's processes and of this one.
func markCPU(c *cluster.Cluster) cpuMark {
	m := cpuMark{}
	for _, p := range c.Processes() {
		if p.Running {
			m[p.PID] = cpuUse{p.Name, p.CPUSeconds}
		}
	}
	if self, err := cluster.CPUSeconds(os.Getpid()); err == nil {
		m[os.Getpid()] = cpuUse{"gpu-sim", self}
	}
	return m
}

// until is the CPU time each process used between m and later, by name. A process started in
// between counts from zero.
func (m cpuMark) until(later cpuMark) map[string]float64 {
	out := map[string]float64{}
	for pid, u := range later {
		out[u.name] += u.seconds - m[pid].seconds
	}
	return out
}

// copyLogs keeps the components' logs of a run next to its report.
func copyLogs(workDir, dst string) {
	src := filepath.Join(workDir, "logs")
	entries, err := os.ReadDir(src)
	if err != nil || os.MkdirAll(dst, 0o755) != nil {
		return
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err == nil {
			_ = os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644)
		}
	}
}

// killPID ends a process this run started (the stock scheduler) by its PID.
func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// stockPick is the stock cluster's choice of GPU IDs inside a node: the NVIDIA device plugin's
// preferred allocation (package sim/baseline), on the graph of the node's hardware read from
// the same mock NVML the agent runs on.
func stockPick(node metrics.Node, available []int, size int) []int {
	g, err := baseline.ForTopology(node.Topology)
	if err != nil || g.Len() != len(node.Islands) {
		return nil
	}
	return g.Allocate(available, nil, size)
}

// PlacementFigures are the island and contiguity figures of a run.
type PlacementFigures struct {
	IslandLocal      int     `json:"islandLocal"`
	IslandPossible   int     `json:"islandPossible"`
	IslandLocalRatio float64 `json:"islandLocalRatio"`
	ContiguityRatio  float64 `json:"contiguityRatio"`
}
