package config

import (
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// PluginName is the name the GpuClaimPlugin is registered under (gpuclaim.Name; repeated here so
// that this package stays free of the plugin's dependencies).
const PluginName = "GpuClaimPlugin"

// SetSchedulerName returns the KubeSchedulerConfiguration configYAML with the profile that
// configures the GpuClaimPlugin serving name, so that one configuration file serves any release
// (--scheduler-name / $SCHEDULER_NAME). A leader-election lock named after the old profile is
// renamed too: two releases sharing a lock would take turns instead of running side by side.
// Everything else is kept as written (the file is edited as generic YAML, not re-encoded through
// the typed API, so that no field the scheduler knows and this package does not is lost).
func SetSchedulerName(configYAML []byte, name string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(configYAML, &cfg); err != nil {
		return nil, fmt.Errorf("decoding the scheduler configuration: %w", err)
	}
	profiles, _ := cfg["profiles"].([]any)
	var old string
	found := 0
	for i, p := range profiles {
		prof, ok := p.(map[string]any)
		if !ok || !configuresPlugin(prof) {
			continue
		}
		found++
		old, _ = prof["schedulerName"].(string)
		prof["schedulerName"] = name
		profiles[i] = prof
	}
	switch {
	case found == 0:
		return nil, errors.New("the scheduler configuration has no profile with a pluginConfig for " + PluginName + " to serve the scheduler name")
	case found > 1:
		return nil, fmt.Errorf("the scheduler configuration has %d profiles with a pluginConfig for %s; the scheduler name would be ambiguous", found, PluginName)
	}
	if le, ok := cfg["leaderElection"].(map[string]any); ok && old != "" && le["resourceName"] == old {
		le["resourceName"] = name
	}
	return yaml.Marshal(cfg)
}

func configuresPlugin(prof map[string]any) bool {
	pcs, _ := prof["pluginConfig"].([]any)
	for _, pc := range pcs {
		if m, ok := pc.(map[string]any); ok && m["name"] == PluginName {
			return true
		}
	}
	return false
}
