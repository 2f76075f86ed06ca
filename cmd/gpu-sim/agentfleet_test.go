package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentFleetInput: gpu-sim agent-fleet (what sim/launch, make dev and test/e2e-kind start)
// refuses bad input with an error naming what is wrong, before it starts anything.
func TestAgentFleetInput(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://127.0.0.1:1}\n" +
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n"
	if err := os.WriteFile(kc, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: nil, wantErr: "--kubeconfig is required"},
		{args: []string{"--kubeconfig=" + filepath.Join(dir, "missing")}, wantErr: "kubeconfig " + filepath.Join(dir, "missing")},
		{args: []string{"--kubeconfig=" + kc, "--scheduler-name=Not_A_Name"}, wantErr: `scheduler name "Not_A_Name" from --scheduler-name`},
		{args: []string{"--kubeconfig=" + kc, "--scheduler-name=" + strings.Repeat("a", 64)}, wantErr: "not a valid label value"},
		{args: []string{"--kubeconfig=" + kc, "--node-selector=pool in (a"}, wantErr: `node selector "pool in (a"`},
		{args: []string{"--fleet"}, wantErr: "unknown flag: --fleet"},
	} {
		t.Run(tc.wantErr, func(t *testing.T) {
			root := newRootCommand()
			root.SetArgs(append([]string{"agent-fleet"}, tc.args...))
			err := root.ExecuteContext(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("gpu-sim agent-fleet %v: %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
