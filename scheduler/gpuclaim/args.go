package gpuclaim

import (
	"bytes"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Args configures the plugin (pluginConfig[].args of the KubeSchedulerConfiguration, with
// kind GpuClaimPluginArgs).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// LeaseNamespace holds every GPU Lease; a lock split across namespaces is no lock.
	// Default "gpu-scheduler".
	LeaseNamespace *string `json:"leaseNamespace,omitempty"`
	// NodeStrategy ranks nodes: binpack (default), spread, least-utilized, round-robin, random,
	// cost-aware or fragmentation. A pod's gpu.scheduling/node-strategy annotation overrides it for that pod.
	NodeStrategy *string `json:"nodeStrategy,omitempty"`
	// StatusFreshnessSeconds is how old a GpuNodeStatus heartbeat may be before the node is
	// no longer trusted. Default 600.
	StatusFreshnessSeconds *int32 `json:"statusFreshnessSeconds,omitempty"`
	// OrphanLeaseGraceSeconds is how long a lease whose pod this scheduler cannot see is kept
	// before it is collected, so that a lease another scheduler just created for a pod not yet
	// in this scheduler's cache is never taken away. Default 120.
	OrphanLeaseGraceSeconds *int32 `json:"orphanLeaseGraceSeconds,omitempty"`
	// RecordReservedPhase writes the claim's Reserved phase once its leases are held, before
	// binding. Off by default: the phase lasts milliseconds and costs one API write per pod
	// (about a sixth of what a 2-GPU pod costs), and Bound follows as soon as the Binding lands.
	RecordReservedPhase *bool `json:"recordReservedPhase,omitempty"`
	// GangWaitSeconds is how long a placed gang member waits in Permit for the rest of its
	// gang before the whole gang's reservations are released and it is retried. Default 60.
	GangWaitSeconds *int32 `json:"gangWaitSeconds,omitempty"`
	// MaxCandidateNodes caps how many nodes PreFilter offers a pod: the best-placed ones for
	// the binpack and spread strategies (the fullest, or emptiest, that still fit), best fit
	// tier first. When all of them fail another plugin's filter, the pod's next attempt is
	// offered every node. 0: no cap. Default 100 (DefaultMaxCandidateNodes).
	MaxCandidateNodes *int32 `json:"maxCandidateNodes,omitempty"`
	// DeviceResourceName is the extended resource the agents' device plugin serves (the chart's
	// devicePlugin.resourceName). When set, pods asking for the same number of it are bound to
	// a node one at a time, each once the kubelet has admitted the one before (admitgate.go).
	// Empty: the device plugin is not in use.
	DeviceResourceName *string `json:"deviceResourceName,omitempty"`
	// TopologyLevels are the node labels that name topology domains above the node, narrowest
	// first: for example nvidia.com/gpu.clique (a multi-node NVLink domain, such as one GB200
	// NVL72 rack), then a rack label, then a block or spine label. A gang's claims name one in
	// spec.gangTopology.level; a Preferred gang that fits no domain of its level tries the next
	// broader one. Default: [nvidia.com/gpu.clique].
	TopologyLevels []string `json:"topologyLevels,omitempty"`
	// MaxSharersPerGPU bounds the Shared pods one GPU serves at once, whatever their shares
	// (a share-less Shared pod reserves no memory or compute and counts only here). Default
	// 16 (ledger.DefaultMaxSharersPerGPU).
	MaxSharersPerGPU *int32 `json:"maxSharersPerGPU,omitempty"`
}

// ArgsKind is the kind of the plugin's args.
const ArgsKind = "GpuClaimPluginArgs"

// SetDefaultsArgs fills unset fields. Each default is a fresh value, never a shared pointer.
func SetDefaultsArgs(a *Args) {
	if a.LeaseNamespace == nil {
		a.LeaseNamespace = ptr.To("gpu-scheduler")
	}
	if a.NodeStrategy == nil {
		a.NodeStrategy = ptr.To(string(allocator.Binpack))
	}
	if a.StatusFreshnessSeconds == nil {
		a.StatusFreshnessSeconds = ptr.To(int32(ledger.DefaultFreshness.Seconds()))
	}
	if a.OrphanLeaseGraceSeconds == nil {
		a.OrphanLeaseGraceSeconds = ptr.To[int32](120)
	}
	if a.RecordReservedPhase == nil {
		a.RecordReservedPhase = ptr.To(false)
	}
	if a.GangWaitSeconds == nil {
		a.GangWaitSeconds = ptr.To[int32](60)
	}
	if a.MaxCandidateNodes == nil {
		a.MaxCandidateNodes = ptr.To[int32](DefaultMaxCandidateNodes)
	}
	if a.TopologyLevels == nil {
		a.TopologyLevels = []string{apiv1.LabelGPUClique}
	}
	if a.MaxSharersPerGPU == nil {
		a.MaxSharersPerGPU = ptr.To[int32](ledger.DefaultMaxSharersPerGPU)
	}
}

// ValidateArgs checks defaulted args.
func ValidateArgs(path *field.Path, a *Args) error {
	var errs field.ErrorList
	if a.LeaseNamespace == nil || *a.LeaseNamespace == "" {
		errs = append(errs, field.Required(path.Child("leaseNamespace"), "GPU leases need a namespace"))
	} else if msgs := validation.IsDNS1123Label(*a.LeaseNamespace); len(msgs) > 0 {
		for _, m := range msgs {
			errs = append(errs, field.Invalid(path.Child("leaseNamespace"), *a.LeaseNamespace, m))
		}
	}
	if a.NodeStrategy == nil {
		errs = append(errs, field.Required(path.Child("nodeStrategy"), ""))
	} else if _, err := allocator.ParseStrategy(*a.NodeStrategy); err != nil {
		supported := make([]string, len(allocator.Strategies))
		for i, s := range allocator.Strategies {
			supported[i] = string(s)
		}
		errs = append(errs, field.NotSupported(path.Child("nodeStrategy"), *a.NodeStrategy, supported))
	}
	if a.StatusFreshnessSeconds == nil || *a.StatusFreshnessSeconds < 1 {
		errs = append(errs, field.Invalid(path.Child("statusFreshnessSeconds"), ptr.Deref(a.StatusFreshnessSeconds, 0), "must be at least 1"))
	}
	if a.OrphanLeaseGraceSeconds == nil || *a.OrphanLeaseGraceSeconds < 0 {
		errs = append(errs, field.Invalid(path.Child("orphanLeaseGraceSeconds"), ptr.Deref(a.OrphanLeaseGraceSeconds, -1), "must not be negative"))
	}
	// The framework caps a Permit wait at 15 minutes.
	if a.GangWaitSeconds == nil || *a.GangWaitSeconds < 1 || *a.GangWaitSeconds > 900 {
		errs = append(errs, field.Invalid(path.Child("gangWaitSeconds"), ptr.Deref(a.GangWaitSeconds, 0), "must be between 1 and 900"))
	}
	if r := ptr.Deref(a.DeviceResourceName, ""); r != "" {
		for _, m := range validation.IsQualifiedName(r) {
			errs = append(errs, field.Invalid(path.Child("deviceResourceName"), r, m))
		}
	}
	if a.MaxCandidateNodes == nil || *a.MaxCandidateNodes < 0 {
		errs = append(errs, field.Invalid(path.Child("maxCandidateNodes"), ptr.Deref(a.MaxCandidateNodes, -1), "must not be negative (0: no cap)"))
	}
	if a.MaxSharersPerGPU == nil || *a.MaxSharersPerGPU < 1 {
		errs = append(errs, field.Invalid(path.Child("maxSharersPerGPU"), ptr.Deref(a.MaxSharersPerGPU, 0), "must be at least 1"))
	}
	seen := map[string]bool{}
	for i, l := range a.TopologyLevels {
		for _, m := range validation.IsQualifiedName(l) {
			errs = append(errs, field.Invalid(path.Child("topologyLevels").Index(i), l, "must be a node label key: "+m))
		}
		if seen[l] {
			errs = append(errs, field.Duplicate(path.Child("topologyLevels").Index(i), l))
		}
		seen[l] = true
	}
	return errs.ToAggregate()
}

// decodeArgs reads the plugin's args: nil (all defaults), our own type, or the raw
// runtime.Unknown the scheduler hands to out-of-tree plugins. Unknown fields are an error, so a
// typo in the configuration is reported instead of silently ignored.
func decodeArgs(obj runtime.Object) (*Args, error) {
	a := &Args{}
	switch o := obj.(type) {
	case nil:
	case *Args:
		a = o.DeepCopy()
	case *runtime.Unknown:
		if len(bytes.TrimSpace(o.Raw)) > 0 {
			if err := yaml.UnmarshalStrict(o.Raw, a); err != nil {
				return nil, fmt.Errorf("decoding %s args: %w", Name, err)
			}
		}
	default:
		return nil, fmt.Errorf("%s args: want %s, got %T", Name, ArgsKind, obj)
	}
	if a.Kind != "" && a.Kind != ArgsKind {
		return nil, fmt.Errorf("%s args: kind %q, want %q", Name, a.Kind, ArgsKind)
	}
	SetDefaultsArgs(a)
	if err := ValidateArgs(field.NewPath("pluginConfig").Key(Name).Child("args"), a); err != nil {
		return nil, fmt.Errorf("invalid %s args: %w", Name, err)
	}
	return a, nil
}

// DeepCopy copies the args.
func (a *Args) DeepCopy() *Args {
	out := &Args{TypeMeta: a.TypeMeta}
	if a.LeaseNamespace != nil {
		out.LeaseNamespace = ptr.To(*a.LeaseNamespace)
	}
	if a.NodeStrategy != nil {
		out.NodeStrategy = ptr.To(*a.NodeStrategy)
	}
	if a.StatusFreshnessSeconds != nil {
		out.StatusFreshnessSeconds = ptr.To(*a.StatusFreshnessSeconds)
	}
	if a.OrphanLeaseGraceSeconds != nil {
		out.OrphanLeaseGraceSeconds = ptr.To(*a.OrphanLeaseGraceSeconds)
	}
	if a.RecordReservedPhase != nil {
		out.RecordReservedPhase = ptr.To(*a.RecordReservedPhase)
	}
	if a.GangWaitSeconds != nil {
		out.GangWaitSeconds = ptr.To(*a.GangWaitSeconds)
	}
	if a.MaxCandidateNodes != nil {
		out.MaxCandidateNodes = ptr.To(*a.MaxCandidateNodes)
	}
	if a.DeviceResourceName != nil {
		out.DeviceResourceName = ptr.To(*a.DeviceResourceName)
	}
	if a.MaxSharersPerGPU != nil {
		out.MaxSharersPerGPU = ptr.To(*a.MaxSharersPerGPU)
	}
	out.TopologyLevels = slices.Clone(a.TopologyLevels)
	return out
}

// DeepCopyObject implements runtime.Object.
func (a *Args) DeepCopyObject() runtime.Object { return a.DeepCopy() }
