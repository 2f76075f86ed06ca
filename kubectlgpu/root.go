package kubectlgpu

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Options are shared by every subcommand: kubectl's connection flags and the output format.
type Options struct {
	Flags     *genericclioptions.ConfigFlags
	IO        genericiooptions.IOStreams
	Output    string
	All       bool
	NoHeaders bool
}

// NewCommand returns the kubectl-gpu root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Flags: genericclioptions.NewConfigFlags(true), IO: streams}
	root := &cobra.Command{
		Use:           "kubectl-gpu",
		Short:         "Inspect the GPU fleet managed by gpu-scheduler",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Cobra's own output (help, completion scripts, __complete's suggestions) goes to the
	// plugin's streams too.
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.All, "all-namespaces", "A", false, "list claims in all namespaces")
	root.PersistentFlags().StringVarP(&o.Output, "output", "o", "", outputHelp)
	root.PersistentFlags().BoolVar(&o.NoHeaders, "no-headers", false, "print tables without their header line")
	root.AddCommand(newStatusCommand(o), newNodesCommand(o), newClaimsCommand(o), newHealthCommand(o), newLeasesCommand(o),
		newExplainCommand(o), newWorkloadsCommand(o), newTopCommand(o),
		newGenerateTemplateCommand(o), newSubmitCommand(o))
	if err := o.registerFlagCompletion(root); err != nil {
		// Only a flag name that does not exist fails here: a bug in this package.
		panic(err)
	}
	return root
}

// clients builds the clients from kubectl's flags.
func (o *Options) clients() (kubernetes.Interface, dynamic.Interface, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building a client: %w", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building a dynamic client: %w", err)
	}
	return kc, dc, nil
}

// namespace is the claims namespace: "" for -A, else -n or the kubeconfig's namespace.
func (o *Options) namespace() (string, error) {
	if o.All {
		return "", nil
	}
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading namespace from kubeconfig: %w", err)
	}
	return ns, nil
}

// loadClaims reads the claims of the namespace (all of them with -A), sorted: a namespace
// user's view, which needs none of the fleet's cluster-wide reads.
func (o *Options) loadClaims(ctx context.Context) ([]apiv1.GpuClaim, error) {
	_, dc, err := o.clients()
	if err != nil {
		return nil, err
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, err
	}
	var claims []apiv1.GpuClaim
	if err := listCustom(ctx, dc, "gpuclaims", ns, &claims); err != nil {
		return nil, err
	}
	sort.Slice(claims, func(i, j int) bool {
		a, b := claims[i], claims[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return claims, nil
}

func (o *Options) load(ctx context.Context) (*Fleet, error) {
	kc, dc, err := o.clients()
	if err != nil {
		return nil, err
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, err
	}
	return Load(ctx, kc, dc, ns)
}
