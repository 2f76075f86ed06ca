package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

func TestRunFlags(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &scenario.Scenario{}
	for _, tc := range []struct {
		args    []string
		wantErr string
		check   func(t *testing.T, o *runOptions)
	}{
		{args: []string{"--kubeconfig=" + kc}, check: func(t *testing.T, o *runOptions) {
			ro, err := o.runnerOptions(s)
			if err != nil || ro.Kubeconfig != kc || ro.BaselineKubeconfig != "" || !ro.Baseline {
				t.Errorf("runnerOptions = %+v, %v", ro, err)
			}
		}},
		{args: []string{"--kubeconfig=" + kc, "--baseline-kubeconfig=" + kc}},
		{args: []string{"--baseline-kubeconfig=" + kc}, wantErr: "needs --kubeconfig"},
		{args: []string{"--kubeconfig=" + kc, "--baseline-kubeconfig=" + kc, "--no-baseline"}, wantErr: "baseline is off"},
		{args: []string{"--kubeconfig=" + filepath.Join(dir, "missing")}, wantErr: "no such file"},
		{args: []string{"--kubeconfig=" + kc, "--dra"}, wantErr: "only on the simulator's own clusters"},
		{args: []string{"--dra"}, check: func(t *testing.T, o *runOptions) {
			if o.dra == nil || !*o.dra {
				t.Errorf("--dra did not turn the DRA baseline on: %+v", o)
			}
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newRunCommand()
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			// The flags land in the command's runOptions; rebuild them the way RunE sees them.
			o := &runOptions{}
			o.kubeconfig, _ = cmd.Flags().GetString("kubeconfig")
			o.baselineKubeconfig, _ = cmd.Flags().GetString("baseline-kubeconfig")
			o.noBaseline, _ = cmd.Flags().GetBool("no-baseline")
			if cmd.Flags().Changed("dra") {
				v, _ := cmd.Flags().GetBool("dra")
				o.dra = &v
			}
			_, err := o.runnerOptions(s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}
