package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

// Clusters shared by consecutive runs (sites). With Options.Kubeconfig the runs start no control
// plane: they create the node pools (kwok must run in that cluster to make them Ready and to run
// and complete the pods), install the CRDs, run the agent fleet, webhook and gpu-scheduler
// against it, and afterwards remove exactly what they created (owned); the stock baseline uses
// the cluster's own kube-scheduler. Without it the runs share one harness control plane that
// the first starts, in the same way: each run removes what it created but the nodes, the next
// one reuses them, and the last stops the control plane.

// site is one cluster and the runs on it, one after the other.
type site struct {
	kubeconfig string // "": the harness control plane this process starts
	c          *cluster.Cluster
	own        *owned
	runs       []string // the runs played on it so far (their LabelRun values)
	closed     bool
}

// open starts the harness control plane, or attaches to the existing cluster, once; it records
// what the cluster holds before the first run, so that cleanup removes only what the runs make.
// run labels the nodes the runs create on an existing cluster.
func (st *site) open(ctx context.Context, s *scenario.Scenario, run string, profiling bool) error {
	if st.c != nil {
		return nil
	}
	var err error
	if st.kubeconfig != "" {
		st.c, err = cluster.Attach(ctx, "sim", st.kubeconfig)
	} else {
		// No stock kube-scheduler yet: the stock run starts its own (StartStockScheduler).
		st.c, err = cluster.Start(ctx, cluster.Config{Name: "sim", Profiling: profiling})
	}
	if err != nil {
		return err
	}
	before, err := survey(ctx, st.c.RESTConfig())
	if err == nil {
		var o owned
		if o, err = planOwned(s, run, before, ourCRDs, webhookNames()); err == nil {
			st.own = &o
			return nil
		}
	}
	_ = st.c.Stop()
	st.c, st.closed = nil, true
	if st.kubeconfig == "" {
		return fmt.Errorf("harness cluster: %w", err)
	}
	return fmt.Errorf("cluster of %s: %w", st.kubeconfig, err)
}

// close stops every process started for the site (for the harness, the control plane itself)
// and, on an existing cluster, removes what the runs created there, nodes included, even after
// Ctrl-C. It is safe to call more than once.
func (st *site) close(ctx context.Context) error {
	if st.c == nil || st.closed {
		return nil
	}
	st.closed = true
	err := st.c.Stop()
	if st.kubeconfig != "" && st.own != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		err = errors.Join(err, st.own.cleanup(cctx, st.c.RESTConfig(), st.runs, false))
	}
	return err
}

// poolNodes names the scenario's pool nodes that exist already: none on a fresh cluster, all of
// them (but those a NodeRemoved fault deleted) when an earlier run on the site made them.
func poolNodes(ctx context.Context, mc metadata.Interface, s *scenario.Scenario) (sets.Set[string], error) {
	var pools []string
	for _, p := range s.Spec.NodePools {
		pools = append(pools, p.Name)
	}
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(cluster.LabelPool, selection.In, pools)
	if err != nil {
		return nil, fmt.Errorf("selecting the nodes of pools %v: %w", pools, err)
	}
	l, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, metav1.ListOptions{LabelSelector: sel.Add(*req).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the nodes of pools %v: %w", pools, err)
	}
	have := sets.New[string]()
	for _, n := range l.Items {
		have.Insert(n.Name)
	}
	return have, nil
}

// missingNodes are the indices of the pool's nodes that poolNodes did not find.
func missingNodes(p scenario.NodePool, have sets.Set[string]) []int {
	missing := []int{}
	for i := range p.Count {
		if !have.Has(cluster.NodeName(p.Name, i)) {
			missing = append(missing, i)
		}
	}
	return missing
}

// Targets says which cluster each mode runs on: "" is the harness cluster, anything else
// the kubeconfig of an existing one. It also checks the combination of options.
func (o Options) Targets() (map[string]string, error) {
	if o.BaselineKubeconfig != "" && o.Kubeconfig == "" {
		return nil, errors.New("--baseline-kubeconfig needs --kubeconfig (the gpu-scheduler run's cluster)")
	}
	if o.BaselineKubeconfig != "" && !o.baselineWanted() {
		return nil, errors.New("--baseline-kubeconfig is given but the baseline is off (--no-baseline or spec.baseline.disabled)")
	}
	t := map[string]string{ModeGPU: o.Kubeconfig}
	if o.draWanted() {
		if o.Kubeconfig != "" {
			if o.DRA != nil {
				return nil, errors.New("--dra: the DRA baseline runs only on the simulator's own clusters, not with --kubeconfig")
			}
		} else {
			t[ModeDRA] = ""
		}
	}
	if o.Scenario != nil && o.Scenario.Spec.Baseline.PremadeClaims {
		t[ModePremade] = o.Kubeconfig // like the stock run: after the first run's cleanup
		t[ModeTemplatedBare] = o.Kubeconfig
	}
	if o.baselineWanted() {
		t[ModeStock] = o.Kubeconfig // sequentially on the same cluster, after the first run's cleanup
		if o.BaselineKubeconfig != "" {
			t[ModeStock] = o.BaselineKubeconfig
		}
		if o.Scenario != nil && o.Scenario.Spec.Baseline.GangPodAffinity {
			t[ModeStockAffinity] = t[ModeStock] // after the plain stock run, on its cluster
		}
	}
	return t, nil
}

func (o Options) baselineWanted() bool {
	return o.Baseline && (o.Scenario == nil || !o.Scenario.Spec.Baseline.Disabled)
}

// draWanted: the DRA baseline runs when the baselines run and the flag, or else the scenario,
// asks for it.
func (o Options) draWanted() bool {
	if !o.baselineWanted() {
		return false
	}
	if o.DRA != nil {
		return *o.DRA
	}
	return o.Scenario != nil && o.Scenario.Spec.Baseline.DRA
}

// owned is what the runs on a site create there; cleanup removes exactly this.
type owned struct {
	run        string   // value of LabelRun on its nodes (on an existing cluster)
	nodes      []string // its pools' nodes (none existed before: preflight checks)
	namespaces []string // namespaces that did not exist before
	crds       []string // CRDs that did not exist before
	webhooks   []string // webhook configurations that did not exist before (same name for both kinds)
	podNS      string   // the workload's namespace
}

// existing is what the cluster held before the run.
type existing struct {
	namespaces sets.Set[string]
	nodes      sets.Set[string]
	gpuNodes   []string // nodes labelled with a GPU topology (the agent fleet would serve them)
	crds       sets.Set[string]
	webhooks   sets.Set[string]
}

// planOwned decides what the run will own from what existed before it.
func planOwned(s *scenario.Scenario, run string, before existing, crdNames, webhookNames []string) (owned, error) {
	o := owned{run: run, podNS: s.Spec.Workload.Namespace}
	var clash []string
	for _, p := range s.Spec.NodePools {
		for i := range p.Count {
			n := cluster.NodeName(p.Name, i)
			if before.nodes.Has(n) {
				clash = append(clash, n)
			}
			o.nodes = append(o.nodes, n)
		}
	}
	if len(clash) > 0 {
		return owned{}, fmt.Errorf("the cluster already has %d node(s) named like the scenario's pools (%s): remove them or use a cluster without them; the simulator only deletes nodes it created", len(clash), strings.Join(first(clash, 3), ", "))
	}
	if len(before.gpuNodes) > 0 {
		return owned{}, fmt.Errorf("the cluster already has %d node(s) labelled %s (%s): the agent fleet would serve them and the figures would include them; use a cluster without GPU nodes (gpu-sim cluster up without --nodes, or kwokctl create cluster)", len(before.gpuNodes), gpuv1.LabelTopology, strings.Join(first(before.gpuNodes, 3), ", "))
	}
	for _, n := range sets.List(sets.New(LeaseNamespace, o.podNS)) {
		if !before.namespaces.Has(n) {
			o.namespaces = append(o.namespaces, n)
		}
	}
	for _, n := range crdNames {
		if !before.crds.Has(n) {
			o.crds = append(o.crds, n)
		}
	}
	for _, n := range webhookNames {
		if !before.webhooks.Has(n) {
			o.webhooks = append(o.webhooks, n)
		}
	}
	return o, nil
}

// ownedLeases picks, among the GPU leases found, those of the run's nodes.
func ownedLeases(leases []metav1.ObjectMeta, nodes []string) []string {
	ours := sets.New(nodes...)
	var out []string
	for _, l := range leases {
		if n, ok := l.Labels[gpuv1.LabelLeaseNode]; ok && ours.Has(n) {
			out = append(out, l.Name)
		}
	}
	sort.Strings(out)
	return out
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(append([]string(nil), s[:n]...), "...")
	}
	return s
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// The CRDs the chart ships (the run installs them all; cleanup looks them up by index), and the webhook configurations launch.StartWebhook registers.
var (
	ourCRDs = []string{"gpuclaims." + gpuv1.GroupName, "gpunodestatuses." + gpuv1.GroupName,
		"gpuclaimtemplates." + gpuv1.GroupName, "gpuworkloads." + gpuv1.GroupName}
)

func webhookNames() []string {
	name := manifests.DefaultName
	return []string{name}
}

// survey reads what the cluster holds before the run.
func survey(ctx context.Context, cfg *rest.Config) (existing, error) {
	e := existing{namespaces: sets.New[string](), nodes: sets.New[string](), crds: sets.New[string](), webhooks: sets.New[string]()}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return e, err
	}
	nsl, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return e, fmt.Errorf("listing namespaces: %w", err)
	}
	for _, n := range nsl.Items {
		if n.Status.Phase == corev1.NamespaceTerminating {
			return e, fmt.Errorf("namespace %s is still being deleted (a previous run?); wait for it to go", n.Name)
		}
		e.namespaces.Insert(n.Name)
	}
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return e, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nl.Items {
		e.nodes.Insert(n.Name)
		if _, ok := n.Labels[gpuv1.LabelTopology]; ok {
			e.gpuNodes = append(e.gpuNodes, n.Name)
		}
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return e, err
	}
	for _, n := range ourCRDs {
		if _, err := dc.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{}); err == nil {
			e.crds.Insert(n)
		} else if !apierrors.IsNotFound(err) {
			return e, fmt.Errorf("reading CRD %s: %w", n, err)
		}
	}
	ar := cs.AdmissionregistrationV1()
	for _, n := range webhookNames() {
		_, errM := ar.MutatingWebhookConfigurations().Get(ctx, n, metav1.GetOptions{})
		_, errV := ar.ValidatingWebhookConfigurations().Get(ctx, n, metav1.GetOptions{})
		if errM == nil || errV == nil {
			e.webhooks.Insert(n)
		}
	}
	return e, nil
}

// cleanup removes what the runs created, after their processes are stopped: the workload objects
// of runs (by their LabelRun values), and the rest of what the site owns. With keepNodes (a run
// follows) the nodes, their node leases and labels stay for the next run, and so do the
// namespaces the runs made, emptied. It waits until the CRDs (and namespaces it deletes) are
// gone, so that a following run on the same cluster starts clean.
func (o owned) cleanup(ctx context.Context, cfg *rest.Config, runs []string, keepNodes bool) error {
	logger := klog.FromContext(ctx)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gcs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var errs []error
	var mu sync.Mutex
	keep := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("cleanup: %s: %w", what, err))
			mu.Unlock()
		}
	}
	sel, err := labels.NewRequirement(LabelRun, selection.In, runs)
	if err != nil {
		return fmt.Errorf("cleanup: selecting runs %v: %w", runs, err)
	}
	byRun := metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*sel).String()}
	nodesByRun := metav1.ListOptions{LabelSelector: LabelRun + "=" + o.run}
	zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	what := strings.Join(runs, ", ")
	// Webhooks first: with their server gone they would only slow down (or fail) the deletes.
	ar := cs.AdmissionregistrationV1()
	for _, n := range o.webhooks {
		keep("MutatingWebhookConfiguration "+n, ar.MutatingWebhookConfigurations().Delete(ctx, n, metav1.DeleteOptions{}))
		keep("ValidatingWebhookConfiguration "+n, ar.ValidatingWebhookConfigurations().Delete(ctx, n, metav1.DeleteOptions{}))
	}
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	keep("Jobs of runs "+what, cs.BatchV1().Jobs(o.podNS).DeleteCollection(ctx, bg, byRun))
	keep("Deployments of runs "+what, cs.AppsV1().Deployments(o.podNS).DeleteCollection(ctx, bg, byRun))
	keep("ReplicaSets of runs "+what, cs.AppsV1().ReplicaSets(o.podNS).DeleteCollection(ctx, bg, byRun))
	keep("pods of runs "+what, cs.CoreV1().Pods(o.podNS).DeleteCollection(ctx, zero, byRun))
	// The objects of a CRD the runs installed are all theirs: every one goes, by collection,
	// before the CRD itself. Left to the CRD's finalizer, they would be listed again only
	// 5 s after its delete (its poll), which made each cleanup 5 s longer.
	crds := sets.New(o.crds...)
	mine := func(crd string) metav1.ListOptions {
		if crds.Has(crd) {
			return metav1.ListOptions{}
		}
		return byRun
	}
	v1 := gcs.GpuV1()
	keep("GpuClaimTemplates of runs "+what, v1.GpuClaimTemplates(o.podNS).DeleteCollection(ctx, metav1.DeleteOptions{}, mine(ourCRDs[2])))
	keep("GpuClaims of runs "+what, v1.GpuClaims(o.podNS).DeleteCollection(ctx, metav1.DeleteOptions{}, mine(ourCRDs[0])))
	if crds.Has(ourCRDs[1]) {
		keep("GpuNodeStatuses", v1.GpuNodeStatuses().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	}
	if crds.Has(ourCRDs[3]) {
		keep("GpuWorkloads", v1.GpuWorkloads(o.podNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	}
	if l, err := cs.CoordinationV1().Leases(LeaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: gpuv1.LabelLeaseNode}); err == nil {
		metas := make([]metav1.ObjectMeta, len(l.Items))
		for i := range l.Items {
			metas[i] = l.Items[i].ObjectMeta
		}
		for _, n := range ownedLeases(metas, o.nodes) {
			keep("lease "+LeaseNamespace+"/"+n, cs.CoordinationV1().Leases(LeaseNamespace).Delete(ctx, n, metav1.DeleteOptions{}))
		}
	} else {
		keep("listing GPU leases", err)
	}
	if !keepNodes {
		keep("nodes of run "+o.run, cs.CoreV1().Nodes().DeleteCollection(ctx, zero, nodesByRun))
	}
	// Node leases and GpuNodeStatuses (of a CRD that was there before) carry no run label: by
	// name, from many workers. A kept node keeps its lease (kwok renews it) but not its status:
	// the next run's agents publish it anew, as on a fresh cluster.
	statuses := !crds.Has(ourCRDs[1])
	_ = parallel(ctx, len(o.nodes), 32, func(ctx context.Context, i int) error {
		n := o.nodes[i]
		if !keepNodes {
			keep("node lease "+n, cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, n, metav1.DeleteOptions{}))
		}
		if statuses {
			keep("GpuNodeStatus "+n, gcs.GpuV1().GpuNodeStatuses().Delete(ctx, n, metav1.DeleteOptions{}))
		}
		return nil
	})
	// The CRDs go first and the namespaces only once they are gone: deleted together, the
	// namespace controller met the CRDs' group vanishing from discovery while it emptied the
	// namespaces and took 5 s more to finish them.
	for _, n := range o.crds {
		keep("CRD "+n, dc.Resource(crdGVR).Delete(ctx, n, metav1.DeleteOptions{}))
	}
	waitGone := func(what string, names []string, get func(string) error) time.Duration {
		t := time.Now()
		err := waitFor(ctx, 3*time.Minute, func() bool {
			for _, n := range names {
				if !apierrors.IsNotFound(get(n)) {
					return false
				}
			}
			return true
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup: %s %v still there after 3m", what, names))
		}
		return time.Since(t)
	}
	crdsGone := waitGone("CRDs", o.crds, func(n string) error {
		_, err := dc.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
		return err
	})
	var nsGone time.Duration
	if keepNodes {
		// A run follows: the namespaces stay, emptied of what is left in them (events, and in
		// the lease namespace any lease: the GPU leases were counted, the scheduler's own are
		// its). Deleting them cost 6 s of kube-controller-manager's namespace controller per
		// run, and the next run would make them again with the same service account and CA
		// ConfigMap that stay here.
		for _, n := range o.namespaces {
			keep("events in "+n, cs.CoreV1().Events(n).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
			keep("leases in "+n, cs.CoordinationV1().Leases(n).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
		}
	} else {
		for _, n := range o.namespaces {
			keep("namespace "+n, cs.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{}))
		}
		nsGone = waitGone("namespaces", o.namespaces, func(n string) error {
			_, err := cs.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
			return err
		})
	}
	logger.Info("Removed the runs' objects from the cluster", "runs", runs, "nodes", len(o.nodes), "keepNodes", keepNodes, "namespaces", o.namespaces, "crds", o.crds, "webhooks", o.webhooks, "waitedForCRDs", crdsGone.Round(time.Millisecond), "waitedForNamespaces", nsGone.Round(time.Millisecond))
	return errors.Join(errs...)
}
