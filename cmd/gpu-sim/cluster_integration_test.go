//go:build integration

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// runMainEnv makes the test binary behave as gpu-sim itself, so the CLI is tested as a separate
// process (and `up` can detach a copy of itself) without a separate build.
const runMainEnv = "GPU_SIM_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func gpuSim(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("gpu-sim %s:\n%s", strings.Join(args, " "), out.String())
	return out.String(), err
}

func TestClusterUpStatusDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	flags := []string{"--name", "cli", "--state-dir", dir}

	out, err := gpuSim(t, append([]string{"cluster", "up", "--nodes", "20", "--stock-scheduler=false"}, flags...)...)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if !strings.Contains(out, "export KUBECONFIG="+filepath.Join(dir, "pki")) {
		t.Errorf("up did not print the kubeconfig")
	}
	st, err := cluster.ReadState(dir)
	if err != nil || !st.OwnerAlive() {
		t.Fatalf("state after up: %+v, %v", st, err)
	}

	out, err = gpuSim(t, append([]string{"cluster", "status"}, flags...)...)
	if err != nil || !strings.Contains(out, "nodes: 20, 20 Ready") {
		t.Errorf("status: %v", err)
	}

	if out, err := gpuSim(t, append([]string{"cluster", "up"}, flags...)...); err == nil || !strings.Contains(out, "already running") {
		t.Errorf("second up over a live cluster: %v, want an 'already running' error", err)
	}

	// The owner dies uncleanly: its components die with it, and the next up starts afresh.
	if err := syscall.Kill(st.OwnerPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGoneAll(t, st)
	if _, err := gpuSim(t, append([]string{"cluster", "status"}, flags...)...); err == nil {
		t.Error("status of a dead cluster succeeded")
	}
	if _, err := gpuSim(t, append([]string{"cluster", "up", "--stock-scheduler=false"}, flags...)...); err != nil {
		t.Fatalf("up after an unclean exit: %v", err)
	}
	st, err = cluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := gpuSim(t, append([]string{"cluster", "down"}, flags...)...); err != nil {
		t.Fatalf("down: %v", err)
	}
	waitGoneAll(t, st)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s left after down: %v", dir, err)
	}
	if out, err := gpuSim(t, append([]string{"cluster", "down"}, flags...)...); err != nil || !strings.Contains(out, "no cluster") {
		t.Errorf("down with no cluster: %v", err)
	}
}

// waitGoneAll waits until the owner and every component in st have exited.
func waitGoneAll(t *testing.T, st *cluster.State) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if st.OwnerAlive() {
			return false, nil
		}
		for _, p := range st.Processes {
			if cluster.ProcessAlive(p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("processes of cluster %s still running: %v", st.Name, err)
	}
}
