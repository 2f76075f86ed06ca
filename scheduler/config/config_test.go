package config

import (
	"encoding/json"
	"testing"

	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

func TestRender(t *testing.T) {
	out, err := Render(Options{Kubeconfig: "/tmp/kc", QPS: 300, LeaseNamespace: "locks", NodeStrategy: "spread", PluginArgs: map[string]any{"orphanLeaseGraceSeconds": 5}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(out, &cfg); err != nil {
		t.Fatalf("rendered config does not decode: %v\n%s", err, out)
	}
	if cfg.ClientConnection.Kubeconfig != "/tmp/kc" || cfg.ClientConnection.QPS != 300 || cfg.ClientConnection.Burst != 600 {
		t.Fatalf("client connection %+v", cfg.ClientConnection)
	}
	if cfg.LeaderElection.LeaderElect == nil || *cfg.LeaderElection.LeaderElect {
		t.Fatal("leader election should be off unless asked for")
	}
	args := map[string]any{}
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if pc.Name == "GpuClaimPlugin" {
				if err := json.Unmarshal(pc.Args.Raw, &args); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if args["leaseNamespace"] != "locks" || args["nodeStrategy"] != "spread" || args["orphanLeaseGraceSeconds"] != float64(5) || args["kind"] != "GpuClaimPluginArgs" || args["statusFreshnessSeconds"] != float64(600) {
		t.Fatalf("plugin args %v", args)
	}
}

func TestSetSchedulerName(t *testing.T) {
	out, err := SetSchedulerName(DefaultYAML, "canary")
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(out, &cfg); err != nil {
		t.Fatalf("renamed config does not decode: %v\n%s", err, out)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName == nil || *cfg.Profiles[0].SchedulerName != "canary" {
		t.Fatalf("profiles %+v, want one named canary", cfg.Profiles)
	}
	if cfg.LeaderElection.ResourceName != "canary" {
		t.Fatalf("leader election lock %q: two releases would share it", cfg.LeaderElection.ResourceName)
	}
	if len(cfg.Profiles[0].PluginConfig) == 0 || cfg.Profiles[0].PluginConfig[0].Name != PluginName {
		t.Fatalf("plugin config lost: %+v", cfg.Profiles[0].PluginConfig)
	}
	if _, err := SetSchedulerName([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"), "x"); err == nil {
		t.Fatal("a configuration without our plugin was accepted")
	}
	// Render takes the name too.
	r, err := Render(Options{SchedulerName: "team-b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(r, &cfg); err != nil || *cfg.Profiles[0].SchedulerName != "team-b" {
		t.Fatalf("Render with SchedulerName: %v %+v", err, cfg.Profiles)
	}
}

func TestLeaderElect(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want bool
	}{
		{"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n", true},
		{"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\n", false},
		{"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: true\n", true},
	} {
		got, err := LeaderElect([]byte(tc.yaml))
		if err != nil || got != tc.want {
			t.Errorf("LeaderElect(%q) = %v, %v; want %v", tc.yaml, got, err, tc.want)
		}
	}
	if got, err := LeaderElect(DefaultYAML); err != nil || !got {
		t.Errorf("the shipped configuration: leader election %v, %v; want on", got, err)
	}
	off, err := Render(Options{LeaderElect: false})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := LeaderElect(off); err != nil || got {
		t.Errorf("a rendered configuration without leader election reads %v, %v", got, err)
	}
	if _, err := LeaderElect([]byte("leaderElection: [")); err == nil {
		t.Error("a broken file read without error")
	}
}
