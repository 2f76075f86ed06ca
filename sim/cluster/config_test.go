package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaultsAreValid(t *testing.T) {
	c := Config{}.withDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaulted zero config is invalid: %v", err)
	}
	if c.NodeLeaseDuration != DefaultNodeLeaseDuration || c.nodeMonitorGracePeriod() != DefaultNodeLeaseDuration+time.Minute {
		t.Errorf("lease %s, grace %s: want %s and a minute more", c.NodeLeaseDuration, c.nodeMonitorGracePeriod(), DefaultNodeLeaseDuration)
	}
}

func TestConfigWithDefaultsDoesNotShareArgs(t *testing.T) {
	in := Config{APIServerExtraArgs: []string{"--v=2"}}
	out := in.withDefaults()
	out.APIServerExtraArgs[0] = "changed"
	if in.APIServerExtraArgs[0] != "--v=2" {
		t.Errorf("withDefaults aliases the caller's slice")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "valid", mutate: func(*Config) {}},
		{name: "bad name", mutate: func(c *Config) { c.Name = "Not_A_Label" }, wantErr: `name "Not_A_Label"`},
		{name: "port too high", mutate: func(c *Config) { c.APIServerPort = 70000 }, wantErr: "apiServerPort 70000"},
		{name: "negative port", mutate: func(c *Config) { c.APIServerPort = -1 }, wantErr: "apiServerPort -1"},
		{name: "real node", mutate: func(c *Config) { c.RealNode = &RealNode{Name: "gpu-node", Address: "10.203.0.1"} }},
		{name: "real node on loopback", mutate: func(c *Config) { c.RealNode = &RealNode{Name: "gpu-node", Address: "127.0.0.1"} }, wantErr: `realNode.address "127.0.0.1"`},
		{name: "real node without address", mutate: func(c *Config) { c.RealNode = &RealNode{Name: "gpu-node"} }, wantErr: `realNode.address ""`},
		{name: "real node bad name", mutate: func(c *Config) { c.RealNode = &RealNode{Name: "GPU_node", Address: "10.203.0.1"} }, wantErr: `realNode.name "GPU_node"`},
		{name: "short lease", mutate: func(c *Config) { c.NodeLeaseDuration = 5 * time.Second }, wantErr: "at least 10s"},
		{name: "fractional lease", mutate: func(c *Config) { c.NodeLeaseDuration = 30*time.Second + time.Millisecond }, wantErr: "whole seconds"},
		{name: "negative timeout", mutate: func(c *Config) { c.ReadyTimeout = -time.Second }, wantErr: "readyTimeout"},
		{name: "negative kcm qps", mutate: func(c *Config) { c.ControllerManagerQPS = -1 }, wantErr: "controllerManagerQPS"},
		{name: "negative scheduler qps", mutate: func(c *Config) { c.SchedulerQPS = -1 }, wantErr: "schedulerQPS"},
		{name: "relative work dir", mutate: func(c *Config) { c.WorkDir = "rel/dir" }, wantErr: "absolute path"},
		{name: "negative disk", mutate: func(c *Config) { c.MinFreeDiskBytes = -1 }, wantErr: "minFreeDiskBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{}.withDefaults()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigValidateReportsAllProblems(t *testing.T) {
	c := Config{}.withDefaults()
	c.Name, c.APIServerPort = "UPPER", -3
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "UPPER") || !strings.Contains(err.Error(), "-3") {
		t.Fatalf("want both problems reported, got %v", err)
	}
}

func TestCheckBinariesSaysMakeTools(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, binEtcd), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, binKwok), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkBinaries(dir, binEtcd); err != nil {
		t.Fatalf("present binary reported missing: %v", err)
	}
	err := checkBinaries(dir, binEtcd, binAPIServer, binKwok)
	if !errors.Is(err, ErrBinaryMissing) {
		t.Fatalf("error %v, want ErrBinaryMissing", err)
	}
	for _, want := range []string{binAPIServer, binKwok, "make tools", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), binEtcd+",") {
		t.Errorf("error %q names etcd, which is present", err)
	}
}

func TestResolveBinDir(t *testing.T) {
	dir := t.TempDir()
	got, err := resolveBinDir(dir)
	if err != nil || got != dir {
		t.Fatalf("configured dir: got %q, %v", got, err)
	}
	t.Setenv(BinDirEnv, dir)
	got, err = resolveBinDir("")
	if err != nil || got != dir {
		t.Fatalf("from $%s: got %q, %v", BinDirEnv, got, err)
	}
}

func TestStartRejectsInvalidConfigAndMissingBinaries(t *testing.T) {
	ctx := t.Context()
	if _, err := Start(ctx, Config{Name: "Bad Name"}); err == nil || !strings.Contains(err.Error(), "invalid cluster config") {
		t.Fatalf("invalid config: got %v", err)
	}
	_, err := Start(ctx, Config{BinDir: t.TempDir()})
	if !errors.Is(err, ErrBinaryMissing) || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("empty bin dir: got %v, want ErrBinaryMissing saying to run make tools", err)
	}
}

// A real node's pods reach the apiserver only at the advertised address, through the lease
// reconciler's endpoints, and the apiserver reaches the kubelet at its InternalIP with a client
// certificate: later flags win, so these must come after the loopback defaults.
func TestAPIServerArgsForARealNode(t *testing.T) {
	c := &Cluster{cfg: Config{RealNode: &RealNode{Name: "gpu-node", Address: "10.203.0.1"}}.withDefaults(), pki: pki{dir: "/pki"}}
	last := map[string]string{}
	for _, a := range c.apiServerArgs() {
		k, v, _ := strings.Cut(a, "=")
		last[k] = v
	}
	want := map[string]string{
		"--bind-address":                    "0.0.0.0",
		"--advertise-address":               "10.203.0.1",
		"--endpoint-reconciler-type":        "lease",
		"--kubelet-client-certificate":      "/pki/apiserver-kubelet-client.crt",
		"--kubelet-preferred-address-types": "InternalIP,Hostname",
	}
	for k, v := range want {
		if last[k] != v {
			t.Errorf("%s=%q, want %q", k, last[k], v)
		}
	}
	plain := &Cluster{cfg: Config{}.withDefaults()}
	for _, a := range plain.apiServerArgs() {
		if strings.HasPrefix(a, "--bind-address=") && a != "--bind-address=127.0.0.1" {
			t.Errorf("a cluster without a real node listens beyond loopback: %s", a)
		}
	}
}
