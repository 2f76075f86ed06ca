package kubectlgpu

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
)

// Explanation is everything explain shows about one pod or claim.
type Explanation struct {
	Pod string `json:"pod,omitempty"`
	// SchedulerName is the pod's spec.schedulerName.
	SchedulerName string                `json:"schedulerName,omitempty"`
	PodPhase      string                `json:"podPhase,omitempty"`
	Node          string                `json:"node,omitempty"`
	Conditions    []corev1.PodCondition `json:"podConditions,omitempty"`
	Claim         string                `json:"claim"`
	// ClaimMissing is set when the pod names a claim that does not exist (and, for a pod naming
	// a GpuClaimTemplate, the template does not exist either).
	ClaimMissing bool `json:"claimMissing,omitempty"`
	// FromTemplate names the GpuClaimTemplate the pod's claim is made from when the claim does
	// not exist yet: the scheduler places the pod with it and makes the claim when it binds
	// the pod, so the dry run uses the claim the template describes.
	FromTemplate string               `json:"fromTemplate,omitempty"`
	ClaimPhase   string               `json:"claimPhase,omitempty"`
	ClaimMessage string               `json:"claimMessage,omitempty"`
	Request      string               `json:"request,omitempty"`
	Events       []EventView          `json:"events,omitempty"`
	DryRun       ledger.DryRunResult  `json:"dryRun"`
	Summary      []ledger.ReasonCount `json:"summary,omitempty"`
	Freshness    metav1.Duration      `json:"statusFreshness"`
	// Notes say what was left out because the user may not read it: a namespace user sees
	// the pod, the claim and their events, and no dry run (it reads the whole cluster).
	Notes Notes `json:"notes,omitempty"`
}

// EventView is one recent event of the pod or the claim.
type EventView struct {
	Object  string    `json:"object"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
	Last    time.Time `json:"last"`
}

// maxEvents bounds the events shown: explain is meant to fit one screen.
const maxEvents = 8

func newExplainCommand(o *Options) *cobra.Command {
	freshness := ledger.DefaultFreshness
	cmd := &cobra.Command{
		Use:               "explain POD|pod/NAME|claim/NAME",
		Short:             "Why a pod or GpuClaim is Pending: its status, recent events and a dry run of the scheduler's GPU filter on every node",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeExplain,
		RunE: func(cmd *cobra.Command, argv []string) error {
			kc, dc, err := o.clients()
			if err != nil {
				return err
			}
			ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return fmt.Errorf("reading namespace from kubeconfig: %w", err)
			}
			ex, err := Explain(cmd.Context(), kc, dc, ns, argv[0], freshness)
			if err != nil {
				return err
			}
			if done, err := o.printData(o.IO.Out, "explanation", ex); done || err != nil {
				return err
			}
			return printExplanation(o.IO.Out, ex, time.Now())
		},
	}
	cmd.Flags().DurationVar(&freshness, "status-freshness", freshness, "the scheduler's statusFreshnessSeconds: a node whose GpuNodeStatus heartbeat and agent liveness lease renewal are both older is stale")
	return cmd
}

// Explain reads the pod (or claim) named by what in namespace ns and runs the plugin's dry run.
func Explain(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, ns, what string, freshness time.Duration) (*Explanation, error) {
	kind, name, hasKind := strings.Cut(what, "/")
	if !hasKind {
		kind, name = "", what
	}
	ex := &Explanation{Freshness: metav1.Duration{Duration: freshness}}
	var pod *corev1.Pod
	var claimName string
	switch strings.ToLower(kind) {
	case "", "pod", "pods", "po":
		p, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && kind == "" {
			claimName = name // a bare name that is no pod may be a claim
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
		pod = p
		cn, ok := claims.Name(p)
		if !ok {
			return nil, fmt.Errorf("pod %s/%s asks for no GPUs: it has neither a %s nor a %s annotation", ns, name, apiv1.AnnotationClaim, apiv1.AnnotationClaimTemplate)
		}
		claimName = cn
		ex.Pod, ex.PodPhase, ex.Node = ns+"/"+name, string(p.Status.Phase), p.Spec.NodeName
		ex.Conditions = p.Status.Conditions
		ex.SchedulerName = p.Spec.SchedulerName
	case "claim", "gpuclaim", "gpuclaims", "gclaim":
		claimName = name
	default:
		return nil, fmt.Errorf("explain %q: want a pod name, pod/NAME or claim/NAME", what)
	}
	ex.Claim = ns + "/" + claimName
	claim, err := getCustom[apiv1.GpuClaim](ctx, dc, "gpuclaims", ns, claimName)
	switch {
	case apierrors.IsNotFound(err) && pod != nil:
		claim = claimFromTemplate(ctx, dc, pod)
		if claim == nil {
			ex.ClaimMissing = true
		} else {
			ex.FromTemplate, _ = claims.Template(pod)
		}
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("neither a pod nor a GpuClaim %s/%s exists", ns, claimName)
	case err != nil:
		return nil, err
	}
	if ex.Events, err = recentEvents(ctx, kc, ns, pod, claimName); err != nil {
		return nil, err
	}
	if claim == nil {
		return ex, nil
	}
	ex.ClaimPhase, ex.ClaimMessage = string(claim.Status.Phase), claim.Status.Message
	if ex.ClaimPhase == "" {
		ex.ClaimPhase = string(apiv1.ClaimPending)
	}
	ex.Request = describeRequest(claim)
	snap, err := loadSnapshot(ctx, kc, dc)
	if ex.Notes.denied(err, "the dry run of the scheduler's GPU filter is left out", permDryRun) {
		return ex, nil
	}
	if err != nil {
		return nil, err
	}
	ex.DryRun = ledger.DryRun(claim, pod, snap, time.Now(), freshness)
	ex.Summary = ex.DryRun.Summary()
	return ex, nil
}

// claimFromTemplate is the claim the scheduler would make for a pod that names a
// GpuClaimTemplate (not a gang's, nor one for a pod of a PodGroup: gpu-controller makes those
// first); nil when the pod names none or the template cannot be read.
func claimFromTemplate(ctx context.Context, dc dynamic.Interface, pod *corev1.Pod) *apiv1.GpuClaim {
	template, ok := claims.Template(pod)
	if !ok {
		return nil
	}
	tmpl, err := getCustom[apiv1.GpuClaimTemplate](ctx, dc, "gpuclaimtemplates", pod.Namespace, template)
	if err != nil || tmpl.Spec.Spec.GangRef != "" || tmpl.Spec.Spec.GangTopology != nil || claims.InPodGroup(pod) {
		return nil
	}
	claim, err := apiv1.ClaimFromTemplate(pod, tmpl)
	if err != nil {
		return nil
	}
	return claim
}

func getCustom[T any](ctx context.Context, dc dynamic.Interface, resource, ns, name string) (*T, error) {
	u, err := dc.Resource(apiv1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", resource, ns, name, err)
	}
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", resource, ns, name, err)
	}
	return &v, nil
}

// loadSnapshot reads what the scheduler's informers hold: nodes, GpuNodeStatuses, GPU leases,
// bound pods (their allocations count as holds) and claims.
func loadSnapshot(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface) (*ledger.Snapshot, error) {
	snap := &ledger.Snapshot{}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	snap.Nodes = nodes.Items
	if err := listCustom(ctx, dc, "gpunodestatuses", "", &snap.Statuses); err != nil {
		return nil, err
	}
	if err := listCustom(ctx, dc, "gpuclaims", "", &snap.Claims); err != nil {
		return nil, err
	}
	leases, err := kc.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		return nil, fmt.Errorf("listing GPU leases: %w", err)
	}
	snap.Leases = leases.Items
	// The agents' liveness leases: a node is fresh while its status or its lease is recent.
	live, err := kc.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelAgentLiveness})
	if err != nil {
		return nil, fmt.Errorf("listing the agents' liveness leases: %w", err)
	}
	snap.Leases = append(snap.Leases, live.Items...)
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	if err != nil {
		return nil, fmt.Errorf("listing bound pods: %w", err)
	}
	snap.Pods = pods.Items
	return snap, nil
}

// recentEvents are the newest events of the pod and the claim, newest last.
func recentEvents(ctx context.Context, kc kubernetes.Interface, ns string, pod *corev1.Pod, claim string) ([]EventView, error) {
	type obj struct{ kind, name string }
	objs := []obj{{"GpuClaim", claim}}
	if pod != nil {
		objs = append([]obj{{"Pod", pod.Name}}, objs...)
	}
	var out []EventView
	for _, o := range objs {
		list, err := kc.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=" + o.kind + ",involvedObject.name=" + o.name})
		if err != nil {
			return nil, fmt.Errorf("listing events of %s %s/%s: %w", o.kind, ns, o.name, err)
		}
		for _, e := range list.Items {
			last := e.LastTimestamp.Time
			if last.IsZero() {
				last = e.EventTime.Time
			}
			if last.IsZero() {
				last = e.CreationTimestamp.Time
			}
			out = append(out, EventView{Object: strings.ToLower(o.kind) + "/" + o.name, Type: e.Type, Reason: e.Reason,
				Message: strings.TrimSpace(e.Message), Count: e.Count, Last: last})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Last.Before(out[j].Last) })
	if len(out) > maxEvents {
		out = out[len(out)-maxEvents:]
	}
	return out, nil
}

func describeRequest(c *apiv1.GpuClaim) string {
	d := c.Spec.Devices
	parts := []string{fmt.Sprintf("%d GPUs", d.Count)}
	if d.Exclusivity == apiv1.MIG {
		parts[0] = fmt.Sprintf("%d MIG devices of profile %s", d.Count, d.MigProfile)
	}
	if d.Policy != "" {
		parts = append(parts, string(d.Policy))
	}
	if d.Exclusivity != "" && d.Exclusivity != apiv1.MIG {
		parts = append(parts, string(d.Exclusivity))
	}
	if t := c.Spec.Topology; t != nil && t.Mode != "" {
		s := "topology " + string(t.Mode)
		if t.MinBandwidthGBps > 0 {
			s += fmt.Sprintf(" ≥ %d GB/s", t.MinBandwidthGBps)
		}
		parts = append(parts, s)
	}
	if sel := c.Spec.Selector; sel != nil && len(sel.MatchLabels) > 0 {
		var kv []string
		for k, v := range sel.MatchLabels {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		parts = append(parts, "selector "+strings.Join(kv, ","))
	}
	if c.Spec.GangRef != "" {
		parts = append(parts, "gang "+c.Spec.GangRef)
	}
	return strings.Join(parts, ", ")
}

// SummaryLines renders the dry run per reason, "612 nodes: ...", largest group first; nodes
// that fit name an example placement.
func SummaryLines(r ledger.DryRunResult) []string {
	if r.Blocked != "" {
		return []string{"no node is looked at: " + r.Blocked}
	}
	if len(r.Nodes) == 0 {
		return []string{"the cluster has no nodes"}
	}
	var lines []string
	for _, rc := range r.Summary() {
		noun := "nodes"
		if rc.Nodes == 1 {
			noun = "node"
		}
		if rc.Reason != "fits" {
			lines = append(lines, fmt.Sprintf("%d %s: %s", rc.Nodes, noun, rc.Reason))
			continue
		}
		for _, v := range r.Nodes {
			if v.Reason == "" {
				where := "GPUs " + apiv1.FormatIDs(v.GPUs)
				if len(v.MIGDevices) > 0 {
					where = "MIG devices " + strings.Join(v.MIGDevices, ",")
				}
				lines = append(lines, fmt.Sprintf("%d %s: fit (e.g. %s, %s)", rc.Nodes, noun, v.Node, where))
				break
			}
		}
	}
	return lines
}

func printExplanation(w io.Writer, ex *Explanation, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if ex.Pod != "" {
		fmt.Fprintf(tw, "Pod:\t%s\t%s\tnode %s\tscheduler %s\n", ex.Pod, dash(ex.PodPhase), dash(ex.Node), dash(ex.SchedulerName))
		for _, c := range ex.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(tw, "\t%s=%s\t%s\t%s\n", c.Type, c.Status, dash(c.Reason), oneLine(c.Message))
			}
		}
	}
	if ex.ClaimMissing {
		fmt.Fprintf(tw, "GpuClaim:\t%s\tdoes not exist\n", ex.Claim)
	} else if ex.FromTemplate != "" {
		fmt.Fprintf(tw, "GpuClaim:\t%s\tnot made yet (from GpuClaimTemplate %s when the pod is bound)\t%s\n", ex.Claim, ex.FromTemplate, ex.Request)
	} else {
		fmt.Fprintf(tw, "GpuClaim:\t%s\t%s\t%s\n", ex.Claim, ex.ClaimPhase, ex.Request)
		if ex.ClaimMessage != "" {
			fmt.Fprintf(tw, "\tmessage\t%s\n", oneLine(ex.ClaimMessage))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ex.Events) > 0 {
		fmt.Fprintln(w, "Events:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, e := range ex.Events {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", duration.HumanDuration(now.Sub(e.Last)), e.Type, e.Reason, e.Object, oneLine(e.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if ex.ClaimMissing {
		return nil
	}
	if len(ex.Notes) > 0 {
		ex.Notes.print(w)
		return nil
	}
	fmt.Fprintf(w, "Dry run of the scheduler's GPU filter on %d nodes (a node whose GpuNodeStatus and agent liveness lease are older than %s is stale):\n", len(ex.DryRun.Nodes), ex.Freshness.Duration)
	for _, l := range SummaryLines(ex.DryRun) {
		fmt.Fprintln(w, "  "+l)
	}
	if ex.DryRun.NoMIG != "" {
		fmt.Fprintln(w, "  "+ex.DryRun.NoMIG)
	}
	if ex.SchedulerName != "" && ex.SchedulerName != apiv1.SchedulerName && ex.Node == "" {
		fmt.Fprintf(w, "  note: the pod names scheduler %q; gpu-scheduler serves pods whose spec.schedulerName is its profile (%q unless the release renamed it)\n", ex.SchedulerName, apiv1.SchedulerName)
	}
	if ex.DryRun.Gang != "" {
		fmt.Fprintf(w, "  the claim is in gang %s: the scheduler also waits until every member fits\n", ex.DryRun.Gang)
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
