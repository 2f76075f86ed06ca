package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// StateFileName is the file in a cluster's work directory that records who owns the cluster and
// which processes it runs, so another process (gpu-sim cluster down, or the next Start after a
// crash) can find and stop them by PID.
const StateFileName = "cluster.json"

// tempDirPrefix names the work directories Start creates under os.TempDir().
const tempDirPrefix = "gpu-sim-cluster-"

// State is the content of the state file.
type State struct {
	Name string `json:"name"`
	// OwnerPID and OwnerStartTime identify the process that called Start; the cluster lives as
	// long as it does (the children have it as their parent-death signal source).
	OwnerPID       int    `json:"ownerPID"`
	OwnerStartTime uint64 `json:"ownerStartTime"`
	WorkDir        string `json:"workDir"`
	Kubeconfig     string `json:"kubeconfig"`
	Server         string `json:"server"`
	// Ready is set once every component answered its health check.
	Ready     bool            `json:"ready"`
	Processes []ProcessRecord `json:"processes"`
}

// ProcessRecord is one component process in the state file.
type ProcessRecord struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Log       string `json:"log"`
}

// OwnerAlive reports whether the process that started the cluster still runs.
func (s *State) OwnerAlive() bool { return alive(s.OwnerPID, s.OwnerStartTime) }

// ReadState reads the state file in workDir.
func ReadState(workDir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(workDir, StateFileName))
	if err != nil {
		return nil, fmt.Errorf("reading cluster state in %s: %w", workDir, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decoding cluster state %s: %w", filepath.Join(workDir, StateFileName), err)
	}
	return &s, nil
}

// writeState replaces the state file atomically, so a reader never sees half of it.
func writeState(s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding cluster state: %w", err)
	}
	path := filepath.Join(s.WorkDir, StateFileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing cluster state %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing cluster state %s: %w", path, err)
	}
	return nil
}

// Teardown stops every process recorded in workDir's state file by PID (processes whose PID now
// belongs to something else are left alone) and removes workDir. It is what "gpu-sim cluster
// down" does when the owner is gone, and what Start does with the leftovers of a crashed run.
func Teardown(ctx context.Context, workDir string) error {
	s, err := ReadState(workDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	logger := klog.FromContext(ctx)
	var errs []error
	// Reverse start order: clients before the apiserver, the apiserver before etcd.
	for i := len(s.Processes) - 1; i >= 0; i-- {
		p := s.Processes[i]
		if !alive(p.PID, p.StartTime) {
			continue
		}
		logger.Info("Stopping leftover process", "cluster", s.Name, "component", p.Name, "pid", p.PID)
		if err := killRecorded(p.PID, p.StartTime, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s of cluster %s: %w", p.Name, s.Name, err))
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(workDir); err != nil {
			errs = append(errs, fmt.Errorf("removing work dir %s of cluster %s: %w", workDir, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// sweepStale tears down clusters under base whose owner died without stopping them (a test
// binary killed by a timeout, say). Their processes died with the owner through the
// parent-death signal; what is left is etcd data and logs, and rarely a process that survived.
func sweepStale(ctx context.Context, base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), tempDirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		s, err := ReadState(dir)
		if err != nil || s.OwnerAlive() {
			continue
		}
		klog.FromContext(ctx).Info("Cleaning up cluster left by a dead process", "dir", dir, "ownerPID", s.OwnerPID)
		if err := Teardown(ctx, dir); err != nil {
			klog.FromContext(ctx).Error(err, "Cleaning up stale cluster", "dir", dir)
		}
	}
}

// ProcessAlive reports whether the recorded process still runs (and is the same process).
func ProcessAlive(p ProcessRecord) bool { return alive(p.PID, p.StartTime) }
