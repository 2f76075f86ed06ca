// Package config ships the gpu-scheduler's KubeSchedulerConfiguration: one file,
// scheduler-config.yaml, used as is by the chart and adapted by the simulator and tests.
package config

import (
	_ "embed"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// DefaultYAML is scheduler-config.yaml.
//
//go:embed scheduler-config.yaml
var DefaultYAML []byte

// LeaderElect reads whether a KubeSchedulerConfiguration turns leader election on: its
// leaderElection.leaderElect, true when unset (kube-scheduler's default).
func LeaderElect(data []byte) (bool, error) {
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return false, fmt.Errorf("decoding the scheduler configuration: %w", err)
	}
	if cfg.LeaderElection.LeaderElect == nil {
		return true, nil
	}
	return *cfg.LeaderElection.LeaderElect, nil
}

// Options adapt the shipped configuration for one scheduler process.
type Options struct {
	Kubeconfig     string
	LeaderElect    bool
	QPS            float32
	LeaseNamespace string
	NodeStrategy   string
	// SchedulerName, when set, renames the profile (SetSchedulerName).
	SchedulerName string
	// PluginArgs overrides, merged over the shipped args (JSON field names).
	PluginArgs map[string]any
}

// Render returns the shipped configuration with opts applied.
func Render(opts Options) ([]byte, error) {
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(DefaultYAML, &cfg); err != nil {
		return nil, fmt.Errorf("decoding the shipped scheduler configuration: %w", err)
	}
	cfg.ClientConnection.Kubeconfig = opts.Kubeconfig
	cfg.LeaderElection.LeaderElect = &opts.LeaderElect
	if opts.QPS > 0 {
		cfg.ClientConnection.QPS = opts.QPS
		cfg.ClientConnection.Burst = int32(2 * opts.QPS)
	}
	for i := range cfg.Profiles {
		for j := range cfg.Profiles[i].PluginConfig {
			pc := &cfg.Profiles[i].PluginConfig[j]
			if pc.Name != "GpuClaimPlugin" {
				continue
			}
			args := map[string]any{}
			if err := yaml.Unmarshal(pc.Args.Raw, &args); err != nil {
				return nil, fmt.Errorf("decoding the shipped GpuClaimPlugin args: %w", err)
			}
			if opts.LeaseNamespace != "" {
				args["leaseNamespace"] = opts.LeaseNamespace
			}
			if opts.NodeStrategy != "" {
				args["nodeStrategy"] = opts.NodeStrategy
			}
			for k, v := range opts.PluginArgs {
				args[k] = v
			}
			raw, err := yaml.Marshal(args)
			if err != nil {
				return nil, err
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				return nil, err
			}
			pc.Args = runtime.RawExtension{Raw: js}
		}
	}
	out, err := yaml.Marshal(&cfg)
	if err != nil || opts.SchedulerName == "" {
		return out, err
	}
	return SetSchedulerName(out, opts.SchedulerName)
}
