package kubectlgpu

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// LeaseView is one GPU lease and, when it is provably stale, why.
type LeaseView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	GPU       string `json:"gpu"`
	Holder    string `json:"holder"`
	Stale     string `json:"stale,omitempty"`
	uid       string
	rv        string
}

// podLookup returns the pod or nil when it does not exist.
type podLookup func(ns, name string) (*corev1.Pod, error)

// Staleness says why an exclusive lease is provably stale, or "" when it is not (or cannot be
// proven: shared leases, leases without pod labels, pods whose allocation is not written yet).
func Staleness(l *coordinationv1.Lease, get podLookup) (string, error) {
	if l.Labels[apiv1.LabelLeaseShared] == "true" || l.Spec.HolderIdentity == nil {
		return "", nil
	}
	ns, name := l.Labels[apiv1.LabelPodNamespace], l.Labels[apiv1.LabelPodName]
	if ns == "" || name == "" {
		return "", nil
	}
	pod, err := get(ns, name)
	if err != nil {
		return "", err
	}
	if pod == nil {
		return "holder pod gone", nil
	}
	if string(pod.UID) != *l.Spec.HolderIdentity {
		return "holder pod gone (a new pod has its name)", nil
	}
	raw, ok := pod.Annotations[apiv1.AnnotationAllocated]
	if !ok {
		return "", nil
	}
	a, err := apiv1.ParseAllocation(raw)
	if err != nil {
		return "", nil
	}
	ref, ok := claims.ParseGPULease(l)
	if !ok {
		return "", nil
	}
	if a.Node != ref.Node || !slices.Contains(a.IDs, ref.GPU) {
		return "GPU not in the pod's allocation " + a.String(), nil
	}
	if ref.MIG {
		refs, _ := apiv1.ParseMIGDevices(pod.Annotations[apiv1.AnnotationMIGDevices])
		if !slices.Contains(refs, apiv1.MIGDeviceRef{GPU: ref.GPU, Slot: ref.Slot}) {
			return fmt.Sprintf("MIG device %d:%d not in the pod's MIG devices %q", ref.GPU, ref.Slot, pod.Annotations[apiv1.AnnotationMIGDevices]), nil
		}
	}
	return "", nil
}

func listLeases(ctx context.Context, kc kubernetes.Interface) ([]LeaseView, error) {
	list, err := kc.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		return nil, fmt.Errorf("listing GPU leases: %w", err)
	}
	get := func(ns, name string) (*corev1.Pod, error) {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
		return p, nil
	}
	out := []LeaseView{}
	for i := range list.Items {
		l := &list.Items[i]
		why, err := Staleness(l, get)
		if err != nil {
			return nil, fmt.Errorf("lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		holder := l.Labels[apiv1.LabelPodNamespace] + "/" + l.Labels[apiv1.LabelPodName]
		if l.Labels[apiv1.LabelPodName] == "" && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		out = append(out, LeaseView{Namespace: l.Namespace, Name: l.Name, Node: l.Labels[apiv1.LabelLeaseNode],
			GPU: l.Labels[apiv1.LabelLeaseGPU], Holder: holder, Stale: why, uid: string(l.UID), rv: l.ResourceVersion})
	}
	return out, nil
}

func newLeasesCommand(o *Options) *cobra.Command {
	var staleOnly, deleteStale, yes bool
	cmd := &cobra.Command{
		Use:   "leases [--stale] [--delete-stale [--yes]]",
		Short: "GPU leases; --stale shows those whose holder pod is gone or whose GPU is not in the pod's allocation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kc, _, err := o.clients()
			if err != nil {
				return err
			}
			all, err := listLeases(cmd.Context(), kc)
			var notes Notes
			if err != nil && !notes.denied(err, "GPU leases are not shown", permLeases) {
				return err
			}
			notes.print(o.IO.ErrOut)
			shown := all
			if staleOnly || deleteStale {
				shown = []LeaseView{}
				for _, l := range all {
					if l.Stale != "" {
						shown = append(shown, l)
					}
				}
			}
			if deleteStale {
				return deleteLeases(cmd.Context(), o, kc, shown, yes)
			}
			if done, err := o.printData(o.IO.Out, "lease", shown); done || err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.tableOut(o.IO.Out), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAMESPACE\tNAME\tNODE\tGPU\tHOLDER\tSTALE")
			for _, l := range shown {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Namespace, l.Name, l.Node, l.GPU, l.Holder, dash(l.Stale))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&staleOnly, "stale", false, "show only provably stale leases")
	cmd.Flags().BoolVar(&deleteStale, "delete-stale", false, "delete provably stale leases (a dry run unless --yes)")
	cmd.Flags().BoolVar(&yes, "yes", false, "with --delete-stale: really delete")
	return cmd
}

// deleteLeases deletes each stale lease only if it is still the object we judged (UID and
// resourceVersion preconditions), so a lease re-acquired meanwhile is never removed.
func deleteLeases(ctx context.Context, o *Options, kc kubernetes.Interface, stale []LeaseView, yes bool) error {
	for _, l := range stale {
		if !yes {
			fmt.Fprintf(o.IO.Out, "would delete lease %s/%s (%s); run with --yes to delete\n", l.Namespace, l.Name, l.Stale)
			continue
		}
		uid, rv := l.uid, l.rv
		err := kc.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: (*types.UID)(&uid), ResourceVersion: &rv}})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			fmt.Fprintf(o.IO.Out, "lease %s/%s changed meanwhile; left alone\n", l.Namespace, l.Name)
		case err != nil:
			return fmt.Errorf("deleting lease %s/%s: %w", l.Namespace, l.Name, err)
		default:
			fmt.Fprintf(o.IO.Out, "deleted lease %s/%s (%s)\n", l.Namespace, l.Name, l.Stale)
		}
	}
	if len(stale) == 0 {
		fmt.Fprintln(o.IO.Out, "No stale leases.")
	}
	return nil
}
