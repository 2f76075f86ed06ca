package cluster

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sleepBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	return p
}

func TestProcessStartAndStopByPID(t *testing.T) {
	sp := newSpawner()
	log := filepath.Join(t.TempDir(), "sleep.log")
	p, err := startProcess(sp, "sleeper", sleepBinary(t), []string{"300"}, nil, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	if !alive(p.pid, p.startTime) || p.startTime == 0 {
		t.Fatalf("started process %d not alive (start time %d)", p.pid, p.startTime)
	}
	if pgid, err := syscall.Getpgid(p.pid); err != nil || pgid != p.pid {
		t.Errorf("process group %d, %v: want its own group %d", pgid, err, p.pid)
	}
	if err := p.stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(p.pid, p.startTime) || p.running() {
		t.Fatalf("process %d still alive after stop", p.pid)
	}
	sp.close()
}

func TestProcessExitErrorCarriesLogTail(t *testing.T) {
	sp := newSpawner()
	defer sp.close()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	log := filepath.Join(t.TempDir(), "fail.log")
	p, err := startProcess(sp, "failing", sh, []string{"-c", "echo first; echo bind: address already in use; exit 3"}, nil, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("process did not exit")
	}
	msg := p.exitError().Error()
	for _, want := range []string{"failing", "exit status 3", "address already in use", log} {
		if !strings.Contains(msg, want) {
			t.Errorf("exit error %q lacks %q", msg, want)
		}
	}
	c := &Cluster{cfg: Config{Name: "t"}}
	if err := c.failed(p); !strings.Contains(err.Error(), "port in use") {
		t.Errorf("bind failure not classified as a port race: %v", err)
	}
}

func TestKillRecordedLeavesReusedPIDAlone(t *testing.T) {
	cmd := exec.Command(sleepBinary(t), "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	st, err := procStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// A record with another start time stands for an earlier process that had this PID.
	if err := killRecorded(cmd.Process.Pid, st+1, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("killRecorded killed a process whose start time did not match")
	case <-time.After(200 * time.Millisecond):
	}
	if err := killRecorded(cmd.Process.Pid, st, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("killRecorded did not stop the recorded process")
	}
}

func TestRSSAndTail(t *testing.T) {
	rss, err := rssBytes(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("rss of self: %d, %v", rss, err)
	}
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := tailFile(path, 2); got != "c\nd" {
		t.Errorf("tail: %q", got)
	}
	if got := tailFile(filepath.Join(t.TempDir(), "missing"), 2); !strings.Contains(got, "cannot read") {
		t.Errorf("tail of missing file: %q", got)
	}
}

// cpuSeconds grows while this process burns CPU, and agrees with the runtime's own account
// within a tick or two.
func TestCPUSeconds(t *testing.T) {
	before, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ru1, ru2 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru2)
	after, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tv := func(a, b syscall.Timeval) float64 { return float64(b.Sec-a.Sec) + float64(b.Usec-a.Usec)/1e6 }
	want := tv(ru1.Utime, ru2.Utime) + tv(ru1.Stime, ru2.Stime)
	if got := after - before; got < want-0.05 || got > want+0.05 || got <= 0 {
		t.Errorf("cpuSeconds grew by %.2fs over a busy loop; getrusage says %.2fs (%d)", got, want, x)
	}
	if _, err := cpuSeconds(1 << 30); err == nil {
		t.Error("cpuSeconds of a pid that cannot exist: no error")
	}
}

// A control plane reused by the next simulated run: StopSince ends only the processes started
// after the mark (one run's scheduler and webhook), Stop the rest.
func TestStopSinceLeavesEarlierProcessesRunning(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{cfg: Config{Name: "t"}, workDir: dir, spawner: newSpawner(), state: State{Name: "t", WorkDir: dir}}
	defer func() { _ = c.Stop() }()
	start := func(name string) *Process {
		t.Helper()
		p, err := c.StartProcess(name, sleepBinary(t), []string{"300"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	etcd := start("etcd")
	mark := c.ProcessMark()
	if mark != 1 {
		t.Fatalf("ProcessMark = %d after one process, want 1", mark)
	}
	sched, webhook := start("gpu-scheduler"), start("gpu-webhook")
	if err := c.StopSince(mark); err != nil {
		t.Fatal(err)
	}
	if !etcd.Running() {
		t.Error("the process started before the mark was stopped")
	}
	if sched.Running() || webhook.Running() {
		t.Errorf("processes started after the mark still run: gpu-scheduler %v, gpu-webhook %v", sched.Running(), webhook.Running())
	}
	running := map[string]bool{}
	for _, p := range c.Processes() {
		running[p.Name] = p.Running
	}
	if want := map[string]bool{"etcd": true, "gpu-scheduler": false, "gpu-webhook": false}; !maps.Equal(running, want) {
		t.Errorf("Processes() running = %v, want %v", running, want)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if etcd.Running() {
		t.Error("Stop left the earlier process running")
	}
}
