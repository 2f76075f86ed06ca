package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	versioned "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

// Existing clusters (Options.Kubeconfig). The run starts no control plane: it creates its node
// pools (kwok must run in that cluster to make them Ready and to run and complete the pods),
// installs the CRDs, runs the agent fleet, webhook and gpu-scheduler against it, and afterwards
// removes exactly what it created (owned). The stock baseline uses the cluster's own
// kube-scheduler.

// Targets says which cluster each mode runs on: "" is a fresh harness cluster, anything else
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
	}
	if o.baselineWanted() {
		t[ModeStock] = o.Kubeconfig // sequentially on the same cluster, after the first run's cleanup
		if o.BaselineKubeconfig != "" {
			t[ModeStock] = o.BaselineKubeconfig
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

// owned is what one run created on an existing cluster; cleanup removes exactly this.
type owned struct {
	run        string   // value of LabelRun on its nodes, pods and claims
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

// The CRDs the chart ships, and the webhook configurations launch.StartWebhook registers.
var (
	ourCRDs = []string{"gpuclaims." + gpuv1.GroupName, "gpunodestatuses." + gpuv1.GroupName}
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

// cleanup removes what the run created, after its processes are stopped. It waits until the
// namespaces are gone, so that a following run on the same cluster starts clean.
func (o owned) cleanup(ctx context.Context, cfg *rest.Config) error {
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
	keep := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("cleanup: %s: %w", what, err))
		}
	}
	byRun := metav1.ListOptions{LabelSelector: LabelRun + "=" + o.run}
	zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	// Webhooks first: with their server gone they would only slow down (or fail) the deletes.
	ar := cs.AdmissionregistrationV1()
	for _, n := range o.webhooks {
		keep("MutatingWebhookConfiguration "+n, ar.MutatingWebhookConfigurations().Delete(ctx, n, metav1.DeleteOptions{}))
		keep("ValidatingWebhookConfiguration "+n, ar.ValidatingWebhookConfigurations().Delete(ctx, n, metav1.DeleteOptions{}))
	}
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	keep("Jobs of run "+o.run, cs.BatchV1().Jobs(o.podNS).DeleteCollection(ctx, bg, byRun))
	keep("Deployments of run "+o.run, cs.AppsV1().Deployments(o.podNS).DeleteCollection(ctx, bg, byRun))
	keep("ReplicaSets of run "+o.run, cs.AppsV1().ReplicaSets(o.podNS).DeleteCollection(ctx, bg, byRun))
	keep("pods of run "+o.run, cs.CoreV1().Pods(o.podNS).DeleteCollection(ctx, zero, byRun))
	keep("GpuClaimTemplates of run "+o.run, gcs.GpuV1().GpuClaimTemplates(o.podNS).DeleteCollection(ctx, metav1.DeleteOptions{}, byRun))
	if !sets.New(o.crds...).Has(ourCRDs[0]) {
		keep("GpuClaims of run "+o.run, gcs.GpuV1().GpuClaims(o.podNS).DeleteCollection(ctx, metav1.DeleteOptions{}, byRun))
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
	keep("nodes of run "+o.run, cs.CoreV1().Nodes().DeleteCollection(ctx, zero, byRun))
	for _, n := range o.nodes {
		keep("node lease "+n, cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, n, metav1.DeleteOptions{}))
		if !sets.New(o.crds...).Has(ourCRDs[1]) {
			keep("GpuNodeStatus "+n, gcs.GpuV1().GpuNodeStatuses().Delete(ctx, n, metav1.DeleteOptions{}))
		}
	}
	for _, n := range o.crds {
		keep("CRD "+n, dc.Resource(crdGVR).Delete(ctx, n, metav1.DeleteOptions{}))
	}
	for _, n := range o.namespaces {
		keep("namespace "+n, cs.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{}))
	}
	gone := func() bool {
		for _, n := range o.namespaces {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		for _, n := range o.crds {
			if _, err := dc.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	}
	if err := waitFor(ctx, 3*time.Minute, gone); err != nil {
		errs = append(errs, fmt.Errorf("cleanup: namespaces %v / CRDs %v still there after 3m", o.namespaces, o.crds))
	}
	logger.Info("Cleaned up the run's objects on the existing cluster", "run", o.run, "nodes", len(o.nodes), "namespaces", o.namespaces, "crds", o.crds, "webhooks", o.webhooks)
	return errors.Join(errs...)
}
