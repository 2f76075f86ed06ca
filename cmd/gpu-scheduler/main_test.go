package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/pkg/features"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/config"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim"
)

// --scheduler-name parses among kube-scheduler's own flags, and renameConfig points --config at
// a copy whose GpuClaimPlugin profile carries the name.
func TestSchedulerNameRenamesConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, config.DefaultYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand(gpuclaim.NewProcess())
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

	if err := renameConfig(newCommand(gpuclaim.NewProcess()), "canary"); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("without --config: %v, want an error naming --config", err)
	}
}

// NominatedNodeNameForExpectation is off by default (one pod status write per GPU pod less) and
// the command line can turn it on again.
func TestNominatedNodeNameForExpectationDefaultsOff(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--feature-gates=NominatedNodeNameForExpectation=true"}, true},
	} {
		cmd := newCommand(gpuclaim.NewProcess())
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := compatibility.DefaultComponentGlobalsRegistry.Set(); err != nil {
			t.Fatal(err)
		}
		if got := utilfeature.DefaultFeatureGate.Enabled(features.NominatedNodeNameForExpectation); got != tc.want {
			t.Errorf("args %v: NominatedNodeNameForExpectation %v, want %v", tc.args, got, tc.want)
		}
	}
}

// leaderElect reads --leader-elect when given, else the --config file (on when it says
// nothing): without leader election the plugin joins its peers at start.
func TestLeaderElectFromFlagsAndConfig(t *testing.T) {
	off, err := config.Render(config.Options{LeaderElect: false})
	if err != nil {
		t.Fatal(err)
	}
	offFile := filepath.Join(t.TempDir(), "off.yaml")
	onFile := filepath.Join(t.TempDir(), "on.yaml")
	if err := os.WriteFile(offFile, off, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(onFile, config.DefaultYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--config", onFile}, true},
		{[]string{"--config", offFile}, false},
		{[]string{"--config", onFile, "--leader-elect=false"}, false},
		{[]string{"--config", offFile, "--leader-elect=true"}, true},
	} {
		cmd := newCommand(gpuclaim.NewProcess())
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := leaderElect(cmd)
		if err != nil || got != tc.want {
			t.Errorf("%v: leader election %v, %v; want %v", tc.args, got, err, tc.want)
		}
	}
	cmd := newCommand(gpuclaim.NewProcess())
	if err := cmd.ParseFlags([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaderElect(cmd); err == nil {
		t.Error("a missing --config read without error")
	}
}
