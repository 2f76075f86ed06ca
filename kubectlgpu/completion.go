package kubectlgpu

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// completionTimeout bounds one listing for shell completion: a <TAB> that hangs on an
// unreachable cluster is worse than no suggestion.
const completionTimeout = 5 * time.Second

var (
	nodeStatuses   = apiv1.SchemeGroupVersion.WithResource("gpunodestatuses")
	gpuClaims      = apiv1.SchemeGroupVersion.WithResource("gpuclaims")
	gpuWorkloads   = apiv1.SchemeGroupVersion.WithResource("gpuworkloads")
	claimTemplates = apiv1.SchemeGroupVersion.WithResource("gpuclaimtemplates")
	pods           = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	namespaces     = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// names lists the names of resource in the namespace the flags name (-A: every namespace;
// cluster-scoped resources: pass namespaced false), starting with prefix, sorted and without
// duplicates. It reads object metadata only: a <TAB> over 5,000 GpuNodeStatus objects should
// not download their device lists.
func (o *Options) names(ctx context.Context, resource schema.GroupVersionResource, namespaced bool, prefix string) ([]string, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a metadata client: %w", err)
	}
	ns := ""
	if namespaced {
		if ns, err = o.namespace(); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	list, err := mc.Resource(resource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", resource.Resource, err)
	}
	var out []string
	for _, item := range list.Items {
		if strings.HasPrefix(item.Name, prefix) {
			out = append(out, item.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// completeNames is a ValidArgsFunction offering the names of resource not given yet.
func (o *Options) completeNames(resource schema.GroupVersionResource, namespaced bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		names, err := o.names(cmd.Context(), resource, namespaced, toComplete)
		if err != nil {
			cobra.CompErrorln(err.Error())
			return nil, cobra.ShellCompDirectiveError
		}
		names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(args, n) })
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNodes offers the nodes that have a GpuNodeStatus (named after their node).
func (o *Options) completeNodes(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return o.completeNames(nodeStatuses, false)(cmd, args, toComplete)
}

// completeOneNode is completeNodes for commands that take at most one node.
func (o *Options) completeOneNode(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return o.completeNodes(cmd, args, toComplete)
}

// completeExplain offers explain's one argument: pod names, pod/NAME or claim/NAME.
func (o *Options) completeExplain(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	kind, name, typed := strings.Cut(toComplete, "/")
	resource, prefix := pods, ""
	if typed {
		switch strings.ToLower(kind) {
		case "pod", "pods", "po":
		case "claim", "gpuclaim", "gpuclaims", "gclaim":
			resource = gpuClaims
		default:
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		prefix = kind + "/"
	} else {
		name = toComplete
	}
	names, err := o.names(cmd.Context(), resource, true, name)
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveError
	}
	out := make([]cobra.Completion, 0, len(names)+2)
	for _, n := range names {
		out = append(out, prefix+n)
	}
	if !typed {
		// The typed forms, for a claim that no pod names yet.
		for _, p := range []string{"claim/", "pod/"} {
			if strings.HasPrefix(p, toComplete) {
				out = append(out, p)
			}
		}
	}
	directive := cobra.ShellCompDirectiveNoFileComp
	if len(out) == 1 && strings.HasSuffix(out[0], "/") {
		directive |= cobra.ShellCompDirectiveNoSpace // "claim/" is to be continued, not ended
	}
	return out, directive
}

// completeKinds offers generate-template's and submit's first argument, then nothing (the
// second is a new object's name).
func completeKinds(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, k := range []string{"claim-template", "workload"} {
		if strings.HasPrefix(k, toComplete) {
			out = append(out, k)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// registerFlagCompletion completes the connection flags from the kubeconfig and the cluster
// (as kubectl does for -n, --context, --cluster and --user) and -o from its values.
func (o *Options) registerFlagCompletion(root *cobra.Command) error {
	fixed := func(values ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
	}
	fromKubeconfig := func(pick func(names map[string][]string) []string) cobra.CompletionFunc {
		return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			raw, err := o.Flags.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				cobra.CompErrorln(err.Error())
				return nil, cobra.ShellCompDirectiveError
			}
			all := map[string][]string{}
			for name := range raw.Contexts {
				all["contexts"] = append(all["contexts"], name)
			}
			for name := range raw.Clusters {
				all["clusters"] = append(all["clusters"], name)
			}
			for name := range raw.AuthInfos {
				all["users"] = append(all["users"], name)
			}
			var out []cobra.Completion
			for _, n := range pick(all) {
				if strings.HasPrefix(n, toComplete) {
					out = append(out, n)
				}
			}
			slices.Sort(out)
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
	for flag, fn := range map[string]cobra.CompletionFunc{
		"namespace": o.completeNames(namespaces, false),
		"context":   fromKubeconfig(func(m map[string][]string) []string { return m["contexts"] }),
		"cluster":   fromKubeconfig(func(m map[string][]string) []string { return m["clusters"] }),
		"user":      fromKubeconfig(func(m map[string][]string) []string { return m["users"] }),
		"output":    fixed("wide", "json", "yaml", "name", "jsonpath=", "custom-columns="),
	} {
		if err := root.RegisterFlagCompletionFunc(flag, fn); err != nil {
			return fmt.Errorf("completion for --%s: %w", flag, err)
		}
	}
	return nil
}

// registerSkeletonCompletion completes the flags of generate-template and submit.
func (o *Options) registerSkeletonCompletion(cmd *cobra.Command) error {
	for flag, fn := range map[string]cobra.CompletionFunc{
		"topology":       cobra.FixedCompletions([]string{string(apiv1.TopologyRequired), string(apiv1.TopologyPreferred), string(apiv1.TopologyIgnore)}, cobra.ShellCompDirectiveNoFileComp),
		"exclusivity":    cobra.FixedCompletions([]string{string(apiv1.Exclusive), string(apiv1.Shared)}, cobra.ShellCompDirectiveNoFileComp),
		"claim-template": o.completeNames(claimTemplates, true),
	} {
		if err := cmd.RegisterFlagCompletionFunc(flag, fn); err != nil {
			return fmt.Errorf("completion for --%s of %s: %w", flag, cmd.Name(), err)
		}
	}
	return nil
}
