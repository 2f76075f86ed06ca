package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := &State{Name: "x", OwnerPID: 42, WorkDir: dir, Ready: true,
		Processes: []ProcessRecord{{Name: ComponentEtcd, PID: 7, StartTime: 9, Log: "l"}}}
	if err := writeState(in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if out.Name != "x" || out.OwnerPID != 42 || !out.Ready || len(out.Processes) != 1 || out.Processes[0].StartTime != 9 {
		t.Errorf("round trip: %+v", out)
	}
}

// A cluster whose owner died: Teardown stops the process it left by PID and removes the dir,
// and sweepStale does so for dirs under the temp base.
func TestSweepStaleStopsLeftoversOfDeadOwner(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, tempDirPrefix+"dead-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	leftover := exec.Command(sleepBinary(t), "300")
	leftover.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = leftover.Wait(); close(exited) }()
	defer func() { _ = leftover.Process.Kill(); <-exited }()
	st, _ := procStartTime(leftover.Process.Pid)

	// A dead owner: a process that has exited.
	owner := exec.Command("true")
	if err := owner.Run(); err != nil {
		t.Fatal(err)
	}
	if err := writeState(&State{Name: "dead", OwnerPID: owner.Process.Pid, OwnerStartTime: 1, WorkDir: dir,
		Processes: []ProcessRecord{{Name: ComponentEtcd, PID: leftover.Process.Pid, StartTime: st}}}); err != nil {
		t.Fatal(err)
	}
	// A live owner's cluster must be left alone.
	liveDir := filepath.Join(base, tempDirPrefix+"live-1")
	if err := os.MkdirAll(liveDir, 0o700); err != nil {
		t.Fatal(err)
	}
	self, _ := procStartTime(os.Getpid())
	if err := writeState(&State{Name: "live", OwnerPID: os.Getpid(), OwnerStartTime: self, WorkDir: liveDir}); err != nil {
		t.Fatal(err)
	}

	sweepStale(t.Context(), base)

	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("leftover process of the dead cluster still runs")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dead cluster's dir still there: %v", err)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("live cluster's dir removed: %v", err)
	}
}
