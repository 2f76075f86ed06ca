package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawner starts child processes from one goroutine locked to one OS thread. Linux delivers a
// child's parent-death signal when the *thread* that forked it exits, not the process; Go may
// retire the thread an ordinary goroutine ran on at any time, which would kill the child at a
// random moment. A locked thread that lives as long as the children makes Pdeathsig mean "the
// caller died".
type spawner struct {
	reqs chan spawnReq
	done chan struct{}
	once sync.Once
}

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), done: make(chan struct{})}
	go func() {
		// Never unlocked: when this goroutine returns the thread exits with it, which is only
		// after close() — that is, after every child has been stopped.
		runtime.LockOSThread()
		defer close(s.done)
		for r := range s.reqs {
			r.res <- r.cmd.Start()
		}
	}()
	return s
}

// start starts cmd on the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error {
	res := make(chan error, 1)
	select {
	case s.reqs <- spawnReq{cmd: cmd, res: res}:
		return <-res
	case <-s.done:
		return errors.New("process spawner already closed")
	}
}

// close ends the spawner's thread. Call it only once every child has exited.
func (s *spawner) close() {
	s.once.Do(func() { close(s.reqs) })
	<-s.done
}

// process is one running component.
type process struct {
	name      string
	cmd       *exec.Cmd
	pid       int
	startTime uint64 // from /proc/<pid>/stat, tells this process from a later one with its PID
	logPath   string
	logFile   *os.File
	exited    chan struct{}
	waitErr   error
}

// startProcess starts path with args as a child in its own process group, with SIGKILL as its
// parent-death signal, output appended to logPath.
func startProcess(sp *spawner, name, path string, args []string, env []string, dir, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening log %s for %s: %w", logPath, name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own group: stopping the component also stops anything it forked, and a Ctrl-C meant for
		// the caller's terminal does not reach it behind the harness's back.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := sp.start(cmd); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, path, err)
	}
	p := &process{
		name:    name,
		cmd:     cmd,
		pid:     cmd.Process.Pid,
		logPath: logPath,
		logFile: logFile,
		exited:  make(chan struct{}),
	}
	p.startTime, _ = procStartTime(p.pid)
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitError describes how the process ended, with the tail of its log.
func (p *process) exitError() error {
	return fmt.Errorf("%s (pid %d) exited: %w; last lines of %s:\n%s", p.name, p.pid, p.waitErr, p.logPath, tailFile(p.logPath, 30))
}

// stop sends SIGTERM to the process group, and SIGKILL once grace has passed.
func (p *process) stop(grace time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	return p.kill()
}

// kill ends the process group at once (SIGKILL), as a crash would, and waits for the exit.
func (p *process) kill() error {
	if !p.running() {
		return nil
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid)
	}
}

// procStartTime reads a process's start time (clock ticks since boot, field 22 of
// /proc/<pid>/stat). Together with the PID it identifies one process across PID reuse.
func procStartTime(pid int) (uint64, error) {
	fields, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(fields) < 20 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	// fields[0] is field 3 (state), so field 22 is fields[19].
	return strconv.ParseUint(fields[19], 10, 64)
}

// procStatFields returns /proc/<pid>/stat from the state field on; the command name before it
// may hold spaces and parentheses, so the split starts after its last ')'.
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// alive reports whether pid is a live (non-zombie) process that started at startTime. A
// startTime of 0 skips that check.
func alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	fields, err := procStatFields(pid)
	if err != nil || len(fields) < 20 {
		return false
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return false
	}
	if startTime != 0 {
		st, err := strconv.ParseUint(fields[19], 10, 64)
		if err != nil || st != startTime {
			return false
		}
	}
	return true
}

// killRecorded stops a process this package started in another (possibly dead) process, found
// by the PID and start time in a state file: SIGTERM to its group, SIGKILL after grace. A PID
// that now belongs to some other process is left alone.
func killRecorded(pid int, startTime uint64, grace time.Duration) error {
	if !alive(pid, startTime) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(pid, startTime, grace) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(pid, startTime, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("pid %d did not exit after SIGKILL", pid)
}

func waitGone(pid int, startTime uint64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive(pid, startTime) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond) // polling /proc: there is no wait() for a non-child
	}
	return true
}

// rssBytes returns the resident set size of pid from /proc/<pid>/status.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("reading status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmRSS of pid %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// tailFile returns the last n lines of a file, or a note saying why it cannot.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RSS returns the resident set size of a process in bytes.
func RSS(pid int) (int64, error) { return rssBytes(pid) }

// CPUSeconds is the user plus system CPU time a process has used so far.
func CPUSeconds(pid int) (float64, error) { return cpuSeconds(pid) }

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux ABI Go runs on.
const clockTicks = 100

func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("reading stat of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: fields are counted from the
	// last ')'. After it come state (3), ... utime (14) and stime (15).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("parsing stat of pid %d: too few fields", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing stat of pid %d: %w", pid, err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}

// TailFile returns the last n lines of a log file.
func TailFile(path string, n int) string { return tailFile(path, n) }
