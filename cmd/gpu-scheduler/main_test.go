package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/config"
)

// --scheduler-name parses among kube-scheduler's own flags, and renameConfig points --config at
// a copy whose GpuClaimPlugin profile carries the name.
func TestSchedulerNameRenamesConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, config.DefaultYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--config", file, "--scheduler-name", "canary"}); err != nil {
		t.Fatal(err)
	}
	if !cmd.Flags().Changed("scheduler-name") {
		t.Fatal("--scheduler-name not parsed")
	}
	if err := renameConfig(cmd, "canary"); err != nil {
		t.Fatal(err)
	}
	renamed := cmd.Flags().Lookup("config").Value.String()
	if renamed == file {
		t.Fatal("--config still points at the original file")
	}
	data, err := os.ReadFile(renamed)
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if got := *cfg.Profiles[0].SchedulerName; got != "canary" {
		t.Fatalf("profile %q, want canary", got)
	}

	if err := renameConfig(newCommand(), "canary"); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("without --config: %v, want an error naming --config", err)
	}
}
