package kubectlgpu

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Skeleton holds the flags of generate-template and submit: enough to write a useful
// GpuClaimTemplate or GpuWorkload, which the user edits further.
type Skeleton struct {
	GPUs          int32
	Topology      string
	MinBandwidth  int32
	Exclusivity   string
	Selector      []string
	Replicas      int32
	Gang          bool
	Image         string
	Command       []string
	ClaimTemplate string
}

func (s *Skeleton) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Int32Var(&s.GPUs, "gpus", 1, "GPUs per claim (per replica for a workload)")
	f.StringVar(&s.Topology, "topology", string(apiv1.TopologyPreferred), "Required, Preferred or Ignore: keep the GPUs in one island")
	f.Int32Var(&s.MinBandwidth, "min-bandwidth", 0, "minimum island bandwidth in GB/s (with --topology Required)")
	f.StringVar(&s.Exclusivity, "exclusivity", string(apiv1.Exclusive), "Exclusive or Shared")
	f.StringSliceVar(&s.Selector, "selector", nil, "node labels the GPUs' node must carry, key=value (repeatable)")
	f.Int32Var(&s.Replicas, "replicas", 1, "workload: how many pods")
	f.BoolVar(&s.Gang, "gang", false, "workload: schedule the replicas all or nothing")
	f.StringVar(&s.Image, "image", "", "workload: the container image (required for a workload)")
	f.StringSliceVar(&s.Command, "command", nil, "workload: the container command, comma separated")
	f.StringVar(&s.ClaimTemplate, "claim-template", "", "workload: name a GpuClaimTemplate instead of an inline claim spec")
}

// kinds maps what the user may type to the kind made.
var kinds = map[string]string{
	"claim-template": "GpuClaimTemplate", "gpuclaimtemplate": "GpuClaimTemplate", "gct": "GpuClaimTemplate",
	"workload": "GpuWorkload", "gpuworkload": "GpuWorkload", "gw": "GpuWorkload",
}

func (s *Skeleton) claimSpec() (apiv1.GpuClaimSpec, error) {
	if s.GPUs < 1 || s.GPUs > apiv1.MaxGPUsPerClaim {
		return apiv1.GpuClaimSpec{}, fmt.Errorf("--gpus must be between 1 and %d, got %d", apiv1.MaxGPUsPerClaim, s.GPUs)
	}
	spec := apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: s.GPUs, Policy: apiv1.PolicyContiguous}}
	switch apiv1.Exclusivity(s.Exclusivity) {
	case apiv1.Exclusive, apiv1.Shared:
		spec.Devices.Exclusivity = apiv1.Exclusivity(s.Exclusivity)
	default:
		return spec, fmt.Errorf("--exclusivity %q: want Exclusive or Shared", s.Exclusivity)
	}
	switch m := apiv1.TopologyMode(s.Topology); m {
	case apiv1.TopologyRequired, apiv1.TopologyPreferred, apiv1.TopologyIgnore:
		spec.Topology = &apiv1.TopologyRequirement{Mode: m, MinBandwidthGBps: s.MinBandwidth}
	default:
		return spec, fmt.Errorf("--topology %q: want Required, Preferred or Ignore", s.Topology)
	}
	if s.MinBandwidth < 0 {
		return spec, fmt.Errorf("--min-bandwidth must not be negative, got %d", s.MinBandwidth)
	}
	for _, kv := range s.Selector {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return spec, fmt.Errorf("--selector %q: want key=value with a valid label key and value", kv)
		}
		if spec.Selector == nil {
			spec.Selector = &apiv1.NodeSelector{MatchLabels: map[string]string{}}
		}
		spec.Selector.MatchLabels[k] = v
	}
	return spec, nil
}

// Object builds the skeleton of kind (see kinds) named name in namespace ns.
func (s *Skeleton) Object(kind, name, ns string) (runtime.Object, error) {
	k, ok := kinds[strings.ToLower(kind)]
	if !ok {
		return nil, fmt.Errorf("unknown kind %q: want claim-template (gct) or workload (gw)", kind)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: ns}
	tm := metav1.TypeMeta{APIVersion: apiv1.SchemeGroupVersion.String(), Kind: k}
	if k == "GpuClaimTemplate" {
		spec, err := s.claimSpec()
		if err != nil {
			return nil, err
		}
		return &apiv1.GpuClaimTemplate{TypeMeta: tm, ObjectMeta: meta, Spec: apiv1.GpuClaimTemplateSpec{Spec: spec}}, nil
	}
	if s.Image == "" {
		return nil, fmt.Errorf("a GpuWorkload needs --image")
	}
	if s.Replicas < 0 || s.Replicas > apiv1.MaxWorkloadReplicas {
		return nil, fmt.Errorf("--replicas must be between 0 and %d, got %d", apiv1.MaxWorkloadReplicas, s.Replicas)
	}
	w := &apiv1.GpuWorkload{TypeMeta: tm, ObjectMeta: meta, Spec: apiv1.GpuWorkloadSpec{
		Replicas: ptr.To(s.Replicas),
		Gang:     s.Gang,
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: s.Image, Command: s.Command}}},
		},
	}}
	if s.ClaimTemplate != "" {
		if s.Gang {
			return nil, fmt.Errorf("--gang needs an inline claim spec: drop --claim-template (a template's claims carry its own gangRef)")
		}
		w.Spec.Claim.TemplateName = s.ClaimTemplate
		return w, nil
	}
	spec, err := s.claimSpec()
	if err != nil {
		return nil, err
	}
	w.Spec.Claim.Spec = &spec
	return w, nil
}

// skeletonYAML renders the object without the empty fields a typed object carries.
func skeletonYAML(obj runtime.Object) ([]byte, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "status")
	unstructured.RemoveNestedField(u, "spec", "metadata") // a template's empty claim metadata
	if cs, ok, _ := unstructured.NestedSlice(u, "spec", "template", "spec", "containers"); ok {
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				delete(m, "resources")
			}
		}
		_ = unstructured.SetNestedSlice(u, cs, "spec", "template", "spec", "containers")
	}
	return yaml.Marshal(u)
}

func newGenerateTemplateCommand(o *Options) *cobra.Command {
	s := &Skeleton{}
	cmd := &cobra.Command{
		Use:   "generate-template claim-template|workload NAME",
		Short: "Write a GpuClaimTemplate or GpuWorkload skeleton as YAML, to edit and kubectl apply",
		Example: `  kubectl gpu generate-template claim-template a100x2 --gpus 2 --selector gpu-type=a100 > gct.yaml
  kubectl gpu generate-template workload train --gpus 8 --replicas 4 --gang --topology Required --image my/trainer:1`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return fmt.Errorf("reading namespace from kubeconfig: %w", err)
			}
			obj, err := s.Object(args[0], args[1], ns)
			if err != nil {
				return err
			}
			return o.printSkeleton(obj)
		},
	}
	s.addFlags(cmd)
	if err := o.registerSkeletonCompletion(cmd); err != nil {
		panic(err) // a flag name that does not exist: a bug in this package
	}
	return cmd
}

func newSubmitCommand(o *Options) *cobra.Command {
	s := &Skeleton{}
	var dryRun string
	cmd := &cobra.Command{
		Use:               "submit claim-template|workload NAME",
		Short:             "Create the GpuClaimTemplate or GpuWorkload that generate-template would write",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, dc, err := o.clients()
			if err != nil {
				return err
			}
			ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return fmt.Errorf("reading namespace from kubeconfig: %w", err)
			}
			obj, err := s.Object(args[0], args[1], ns)
			if err != nil {
				return err
			}
			switch dryRun {
			case "none", "server":
			case "client":
				// As kubectl's: print what would be sent, send nothing.
				return o.printSkeleton(obj)
			default:
				return fmt.Errorf("--dry-run %q: want none, client or server", dryRun)
			}
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				return fmt.Errorf("converting %T: %w", obj, err)
			}
			kind := obj.GetObjectKind().GroupVersionKind().Kind
			resource := strings.ToLower(kind) + "s"
			opts := metav1.CreateOptions{FieldManager: "kubectl-gpu"}
			if dryRun == "server" {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			// The API server validates (schema and CEL rules) and fills in the defaults.
			_, err = dc.Resource(apiv1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).Create(cmd.Context(), &unstructured.Unstructured{Object: u}, opts)
			if err != nil {
				return fmt.Errorf("creating %s %s/%s: %w", kind, ns, args[1], err)
			}
			suffix := ""
			if dryRun == "server" {
				suffix = " (server dry run)"
			}
			fmt.Fprintf(o.IO.Out, "%s %s/%s created%s\n", strings.ToLower(kind), ns, args[1], suffix)
			return nil
		},
	}
	s.addFlags(cmd)
	if err := o.registerSkeletonCompletion(cmd); err != nil {
		panic(err) // a flag name that does not exist: a bug in this package
	}
	cmd.Flags().StringVar(&dryRun, "dry-run", "none", "none: create the object; server: have the API server validate and default it without storing it (also plain --dry-run); client: print it and send nothing")
	cmd.Flags().Lookup("dry-run").NoOptDefVal = "server"
	return cmd
}

// printSkeleton writes a generated object: as the skeleton YAML (the default, and -o yaml), or
// in another --output data format.
func (o *Options) printSkeleton(obj runtime.Object) error {
	if o.Output != "" && o.Output != "yaml" && o.Output != "wide" {
		_, err := o.printData(o.IO.Out, "object", obj)
		return err
	}
	b, err := skeletonYAML(obj)
	if err != nil {
		return err
	}
	_, err = o.IO.Out.Write(b)
	return err
}
