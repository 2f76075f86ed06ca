package gpuclaim

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestShippedConfigDecodes strict-decodes the shipped KubeSchedulerConfiguration with the
// scheduler's own scheme and then the plugin's args from it, as kube-scheduler does at start.
func TestShippedConfigDecodes(t *testing.T) {
	data, err := os.ReadFile("../config/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decoding scheduler config: %v", err)
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %v into %T", gvk, obj)
	}
	var found *config.KubeSchedulerProfile
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == "gpu-scheduler" {
			found = &cfg.Profiles[i]
		}
	}
	if found == nil {
		t.Fatal("no gpu-scheduler profile")
	}
	var args runtime.Object
	for _, pc := range found.PluginConfig {
		if pc.Name == Name {
			args = pc.Args
		}
	}
	if _, ok := args.(*runtime.Unknown); !ok {
		t.Fatalf("plugin args arrive as %T, want *runtime.Unknown", args)
	}
	a, err := decodeArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if *a.LeaseNamespace != "gpu-scheduler" || *a.NodeStrategy != "binpack" || *a.StatusFreshnessSeconds != 600 || *a.OrphanLeaseGraceSeconds != 120 || *a.RecordReservedPhase || *a.GangWaitSeconds != 60 {
		t.Fatalf("decoded args %+v", a)
	}
	if bind := found.Plugins.Bind.Enabled; len(bind) < 2 || bind[0].Name != Name {
		t.Fatalf("GpuClaimPlugin must bind before DefaultBinder, got %+v", bind)
	}
}

func TestDecodeArgs(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{name: "empty means defaults", raw: ""},
		{name: "strategy spread", raw: `{"nodeStrategy":"spread"}`},
		{name: "unknown field", raw: `{"nodeStrategi":"spread"}`, wantErr: `unknown field "nodeStrategi"`},
		{name: "bad strategy", raw: `{"nodeStrategy":"fastest"}`, wantErr: `pluginConfig[GpuClaimPlugin].args.nodeStrategy: Unsupported value: "fastest"`},
		{name: "bad namespace", raw: `{"leaseNamespace":"Not_OK"}`, wantErr: `args.leaseNamespace: Invalid value: "Not_OK"`},
		{name: "zero freshness", raw: `{"statusFreshnessSeconds":0}`, wantErr: "statusFreshnessSeconds: Invalid value: 0: must be at least 1"},
		{name: "negative grace", raw: `{"orphanLeaseGraceSeconds":-1}`, wantErr: "orphanLeaseGraceSeconds: Invalid value: -1: must not be negative"},
		{name: "no gang wait", raw: `{"gangWaitSeconds":0}`, wantErr: "gangWaitSeconds: Invalid value: 0: must be between 1 and 900"},
		{name: "gang wait beyond the framework's cap", raw: `{"gangWaitSeconds":901}`, wantErr: "gangWaitSeconds: Invalid value: 901: must be between 1 and 900"},
		{name: "topology levels", raw: `{"topologyLevels":["nvidia.com/gpu.clique","example.com/rack"]}`},
		{name: "topology level not a label key", raw: `{"topologyLevels":["rack name"]}`, wantErr: `args.topologyLevels[0]: Invalid value: "rack name": must be a node label key`},
		{name: "topology level twice", raw: `{"topologyLevels":["example.com/rack","example.com/rack"]}`, wantErr: `args.topologyLevels[1]: Duplicate value: "example.com/rack"`},
		{name: "wrong kind", raw: `{"kind":"NodeResourcesFitArgs"}`, wantErr: `kind "NodeResourcesFitArgs", want "GpuClaimPluginArgs"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := decodeArgs(&runtime.Unknown{Raw: []byte(tt.raw)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.LeaseNamespace == nil || a.NodeStrategy == nil {
				t.Fatalf("defaults not applied: %+v", a)
			}
		})
	}
	// Defaults are fresh values: changing one decoded config never changes another.
	a, _ := decodeArgs(nil)
	b, _ := decodeArgs(nil)
	*a.LeaseNamespace = "changed"
	if *b.LeaseNamespace != "gpu-scheduler" {
		t.Fatal("defaults share a pointer")
	}
	c, err := decodeArgs(&Args{NodeStrategy: ptr.To("least-utilized"), DeviceResourceName: ptr.To("gpu.scheduling/gpu"), TopologyLevels: []string{"example.com/rack"}})
	if err != nil || *c.NodeStrategy != "least-utilized" || ptr.Deref(c.DeviceResourceName, "") != "gpu.scheduling/gpu" || len(c.TopologyLevels) != 1 {
		t.Fatalf("typed args lost on the copy: %+v, %v", c, err)
	}
	if a.TopologyLevels[0] != apiv1.LabelGPUClique {
		t.Fatalf("default topologyLevels %v", a.TopologyLevels)
	}
}
