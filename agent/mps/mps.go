// Package mps runs CUDA's Multi-Process Service for the node's shared GPUs: one MPS control
// daemon (nvidia-cuda-mps-control) per GPU that Shared pods hold, so that the limits a shared
// container is told (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) bind.
//
// Each daemon sees only its GPU (CUDA_VISIBLE_DEVICES=<uuid>) and has its own pipe and log
// directories under Config.Root (<root>/<uuid>/pipe, <root>/<uuid>/log); the device plugin
// mounts the pipe directory into the GPU's shared containers and points CUDA_MPS_PIPE_DIRECTORY
// at it. The daemon runs in the foreground (-f), as the agent's child, so that the agent sees it
// die and starts it again, rather than daemonised (-d), which would leave nothing to wait on.
// While a daemon runs its GPU is set to the EXCLUSIVE_PROCESS compute mode where NVML allows:
// only the MPS server may then open a context, so a process that bypasses MPS cannot use the
// GPU beside the sharers. A daemon is stopped ("quit" on its control pipe, as
// `echo quit | nvidia-cuda-mps-control` does) when its GPU has no sharer left, and on shutdown.
package mps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// DefaultControl is the MPS control binary, looked up in $PATH unless a path is given.
const DefaultControl = "nvidia-cuda-mps-control"

// DefaultRoot is where the daemons' pipe and log directories are kept, on the host: the
// device plugin mounts a GPU's pipe directory into its shared containers at the same path.
const DefaultRoot = "/run/gpu-scheduler/mps"

// Config configures a Manager.
type Config struct {
	// Control is the nvidia-cuda-mps-control binary: a path, or a name looked up in $PATH.
	// Default DefaultControl.
	Control string
	// Root holds <uuid>/pipe and <uuid>/log of each daemon, and shm, the directory the
	// daemons and their clients share as /dev/shm. Default DefaultRoot.
	Root string
	// SetComputeMode, when set, switches a GPU (by UUID) to EXCLUSIVE_PROCESS (exclusive) or
	// back to DEFAULT. nil: the compute mode is left as it is.
	SetComputeMode func(ctx context.Context, uuid string, exclusive bool) error
	// Event, when set, is told what happens to the daemons (for the node's Events): warning
	// or not, a reason and a message.
	Event func(warning bool, reason, message string)
	// OnRunning, when set, is told the number of daemons running after every change (a metric).
	OnRunning func(n int)
	// OnRestart, when set, is called each time a daemon that died is started again.
	OnRestart func(uuid string)
	// StartTimeout is how long Ensure waits for a new daemon's control pipe. Default 10s.
	StartTimeout time.Duration
	// StopGrace is how long a daemon Ensure asked for is kept even if Sync finds no sharer of
	// its GPU: the lease of a pod being admitted can reach the agent after the kubelet asked
	// for its devices. Default 2m.
	StopGrace time.Duration
	// QuitTimeout is how long a daemon told to quit may take before it is killed. Default 30s.
	QuitTimeout time.Duration
	// RestartBackoff and MaxRestartBackoff bound the wait before a daemon that died is started
	// again (doubling). Defaults 1s and 1m.
	RestartBackoff, MaxRestartBackoff time.Duration
}

// Client is what a shared container needs to reach its GPU's daemon.
type Client struct {
	// PipeDir is the daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY), on the host and in the
	// container alike.
	PipeDir string
	// ShmDir is the host directory the daemon uses as /dev/shm; the container mounts it there too.
	ShmDir string
}

// Manager starts, supervises and stops the node's MPS control daemons.
type Manager struct {
	cfg Config
	// control is the resolved binary; empty when it is missing (missing says why).
	control string
	missing string

	mu      sync.Mutex
	ctx     context.Context
	daemons map[string]*daemon
	n       int // daemons running
	wg      sync.WaitGroup
}

type daemon struct {
	uuid string
	// ready is closed once the daemon's control pipe exists or it gave up; err says which.
	ready chan struct{}
	err   error
	// stop is closed to tell the supervisor to quit the daemon; done once it has.
	stop, done chan struct{}
	// ensured is when Ensure last asked for the daemon.
	ensured time.Time
}

// New makes a Manager; ctx bounds the daemons' lives: when it ends they are stopped (Wait).
// A missing control binary is not an error: the manager then runs nothing, says so once
// (Config.Event) and Ensure hands out no pipe, so shares are accounted only.
func New(ctx context.Context, cfg Config) *Manager {
	if cfg.Control == "" {
		cfg.Control = DefaultControl
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.StartTimeout, 10*time.Second)
	def(&cfg.StopGrace, 2*time.Minute)
	def(&cfg.QuitTimeout, 30*time.Second)
	def(&cfg.RestartBackoff, time.Second)
	def(&cfg.MaxRestartBackoff, time.Minute)
	m := &Manager{cfg: cfg, ctx: ctx, daemons: map[string]*daemon{}}
	path, err := exec.LookPath(cfg.Control)
	if err != nil {
		m.missing = fmt.Sprintf("the MPS control binary %q was not found (%v): shared GPUs run no MPS, and the memory and compute shares their pods are told are accounted only", cfg.Control, err)
		klog.FromContext(ctx).Info("Not running MPS", "reason", m.missing)
		m.event(true, "MPSUnavailable", m.missing)
	} else {
		m.control = path
	}
	go func() {
		<-ctx.Done()
		m.stopAll()
	}()
	return m
}

// Available says whether the manager runs daemons (the control binary was found).
func (m *Manager) Available() bool { return m.control != "" }

// Ensure starts the daemon of GPU uuid unless it runs, waits until it serves, and returns
// what the GPU's clients need. Without the control binary it returns a zero Client and no
// error: the GPU is shared without MPS.
func (m *Manager) Ensure(ctx context.Context, uuid string) (Client, error) {
	if m.control == "" {
		return Client{}, nil
	}
	if uuid == "" || strings.ContainsAny(uuid, "/\x00") || uuid == "." || uuid == ".." {
		return Client{}, fmt.Errorf("GPU UUID %q cannot name an MPS pipe directory", uuid)
	}
	m.mu.Lock()
	if m.ctx.Err() != nil {
		m.mu.Unlock()
		return Client{}, fmt.Errorf("MPS for GPU %s: the agent is stopping", uuid)
	}
	d := m.daemons[uuid]
	if d == nil || isClosed(d.done) { // none, or one that failed: try again
		d = &daemon{uuid: uuid, ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
		m.daemons[uuid] = d
		m.wg.Add(1)
		go m.supervise(d)
	}
	d.ensured = time.Now()
	m.mu.Unlock()
	select {
	case <-d.ready:
	case <-ctx.Done():
		return Client{}, fmt.Errorf("waiting for the MPS control daemon of GPU %s: %w", uuid, ctx.Err())
	}
	if d.err != nil {
		return Client{}, d.err
	}
	return Client{PipeDir: m.pipeDir(uuid), ShmDir: m.shmDir()}, nil
}

// Sync stops the daemons of GPUs not in shared (the GPUs that Shared pods hold) that Ensure
// has not asked for within StopGrace. Daemons are started by Ensure, when the kubelet asks for
// a shared GPU, so that a daemon runs before the container starts.
func (m *Manager) Sync(ctx context.Context, shared map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uuid, d := range m.daemons {
		if shared[uuid] || time.Since(d.ensured) < m.cfg.StopGrace {
			continue
		}
		klog.FromContext(ctx).Info("Stopping the MPS control daemon of a GPU no Shared pod holds", "gpu", uuid)
		delete(m.daemons, uuid)
		close(d.stop)
	}
}

// Running lists the GPUs whose daemon runs or is being started.
func (m *Manager) Running() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.daemons))
	for uuid := range m.daemons {
		out = append(out, uuid)
	}
	return out
}

// Wait returns once every daemon has stopped (after the context given to New ended).
func (m *Manager) Wait() { m.wg.Wait() }

func (m *Manager) stopAll() {
	m.mu.Lock()
	for uuid, d := range m.daemons {
		delete(m.daemons, uuid)
		close(d.stop)
	}
	m.mu.Unlock()
}

func (m *Manager) pipeDir(uuid string) string { return filepath.Join(m.cfg.Root, uuid, "pipe") }
func (m *Manager) logDir(uuid string) string  { return filepath.Join(m.cfg.Root, uuid, "log") }
func (m *Manager) shmDir() string             { return filepath.Join(m.cfg.Root, "shm") }

func (m *Manager) event(warning bool, reason, msg string) {
	if m.cfg.Event != nil {
		m.cfg.Event(warning, reason, msg)
	}
}

func (m *Manager) running(delta int) {
	m.mu.Lock()
	m.n += delta
	v := m.n
	m.mu.Unlock()
	if m.cfg.OnRunning != nil {
		m.cfg.OnRunning(v)
	}
}

// env is the environment of the daemon of uuid and of the control client talking to it.
func (m *Manager) env(uuid string) []string {
	return append(os.Environ(),
		"CUDA_VISIBLE_DEVICES="+uuid,
		"CUDA_MPS_PIPE_DIRECTORY="+m.pipeDir(uuid),
		"CUDA_MPS_LOG_DIRECTORY="+m.logDir(uuid))
}

// supervise runs d's daemon until told to stop, starting it again whenever it dies.
func (m *Manager) supervise(d *daemon) {
	defer m.wg.Done()
	defer close(d.done)
	logger := klog.FromContext(m.ctx).WithValues("gpu", d.uuid)
	readyOnce := sync.OnceFunc(func() { close(d.ready) })
	defer readyOnce()
	for _, dir := range []string{m.pipeDir(d.uuid), m.logDir(d.uuid), m.shmDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			d.err = fmt.Errorf("MPS for GPU %s: %w", d.uuid, err)
			m.event(true, "MPSDaemonFailed", d.err.Error())
			return
		}
	}
	// A control pipe left by a daemon of an earlier agent would pass for this one's.
	_ = os.Remove(filepath.Join(m.pipeDir(d.uuid), "control"))
	exclusive := false
	if m.cfg.SetComputeMode != nil {
		if err := m.cfg.SetComputeMode(m.ctx, d.uuid, true); err != nil {
			logger.Error(err, "Setting the GPU's compute mode to EXCLUSIVE_PROCESS failed: processes that bypass MPS can still use it")
			m.event(true, "MPSComputeModeNotSet", fmt.Sprintf("GPU %s stays in its compute mode (%v): MPS limits bind only the processes that go through MPS", d.uuid, err))
		} else {
			exclusive = true
		}
	}
	defer func() {
		if exclusive {
			// A fresh context: the agent's may have ended, and the GPU must not stay exclusive.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 10*time.Second)
			defer cancel()
			if err := m.cfg.SetComputeMode(ctx, d.uuid, false); err != nil {
				logger.Error(err, "Setting the GPU's compute mode back to DEFAULT failed")
			}
		}
	}()
	backoff := m.cfg.RestartBackoff
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(m.control, "-f")
		cmd.Env = m.env(d.uuid)
		cmd.Stdout, cmd.Stderr = nil, nil
		started := time.Now()
		if err := cmd.Start(); err != nil {
			d.err = fmt.Errorf("starting the MPS control daemon of GPU %s: %w", d.uuid, err)
			m.event(true, "MPSDaemonFailed", d.err.Error())
			return
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		m.running(1)
		logger.Info("Started the MPS control daemon", "pid", cmd.Process.Pid, "attempt", attempt)
		if attempt == 0 {
			m.event(false, "MPSDaemonStarted", fmt.Sprintf("MPS control daemon for GPU %s started (pipe %s)", d.uuid, m.pipeDir(d.uuid)))
		}
		err, stopped := m.watch(d, cmd, exited, readyOnce)
		m.running(-1)
		if stopped {
			logger.Info("Stopped the MPS control daemon")
			m.event(false, "MPSDaemonStopped", fmt.Sprintf("MPS control daemon for GPU %s stopped", d.uuid))
			return
		}
		if d.err != nil {
			return // it never served (watch said why)
		}
		if attempt == 0 && !isClosed(d.ready) {
			d.err = fmt.Errorf("the MPS control daemon of GPU %s exited before it served: %w", d.uuid, err)
			m.event(true, "MPSDaemonFailed", d.err.Error())
			return
		}
		logger.Error(err, "The MPS control daemon died; starting it again", "after", backoff)
		m.event(true, "MPSDaemonRestarted", fmt.Sprintf("MPS control daemon for GPU %s died (%v); starting it again", d.uuid, err))
		if m.cfg.OnRestart != nil {
			m.cfg.OnRestart(d.uuid)
		}
		if time.Since(started) > 10*m.cfg.MaxRestartBackoff {
			backoff = m.cfg.RestartBackoff
		}
		select {
		case <-d.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, m.cfg.MaxRestartBackoff)
	}
}

// watch waits for the daemon's control pipe (then readies d), for the daemon to exit, or for
// d.stop (then quits it); stopped says the daemon was told to stop.
func (m *Manager) watch(d *daemon, cmd *exec.Cmd, exited chan error, ready func()) (error, bool) {
	control := filepath.Join(m.pipeDir(d.uuid), "control")
	deadline := time.After(m.cfg.StartTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exited")
			}
			return err, false
		case <-d.stop:
			m.quit(d, cmd, exited)
			return nil, true
		case <-deadline:
			if !isClosed(d.ready) {
				// A daemon that does not serve is given up rather than left running: the next
				// Ensure of the GPU starts a new one.
				d.err = fmt.Errorf("the MPS control daemon of GPU %s made no control pipe %s within %s", d.uuid, control, m.cfg.StartTimeout)
				m.event(true, "MPSDaemonFailed", d.err.Error())
				_ = cmd.Process.Kill()
				killed := <-exited
				klog.FromContext(m.ctx).V(4).Info("Killed the MPS control daemon that did not serve", "gpu", d.uuid, "exit", killed)
				return d.err, false
			}
		case <-tick.C:
			if !isClosed(d.ready) {
				if _, err := os.Stat(control); err == nil {
					ready()
				}
			}
		}
	}
}

// quit asks the daemon to quit through its control pipe, as `echo quit |
// nvidia-cuda-mps-control` does, and kills it if it has not within QuitTimeout.
func (m *Manager) quit(d *daemon, cmd *exec.Cmd, exited chan error) {
	logger := klog.FromContext(m.ctx).WithValues("gpu", d.uuid)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), m.cfg.QuitTimeout)
	defer cancel()
	q := exec.CommandContext(ctx, m.control)
	q.Env = m.env(d.uuid)
	q.Stdin = strings.NewReader("quit\n")
	if out, err := q.CombinedOutput(); err != nil {
		logger.Error(err, "Telling the MPS control daemon to quit failed", "output", string(out))
	}
	select {
	case err := <-exited:
		if err != nil {
			logger.Info("The MPS control daemon quit with an error", "err", err)
		}
	case <-ctx.Done():
		logger.Info("The MPS control daemon did not quit in time; killing it", "timeout", m.cfg.QuitTimeout)
		_ = cmd.Process.Kill()
		killed := <-exited
		logger.V(4).Info("Killed the MPS control daemon", "exit", killed)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Plugin is m as the device plugin asks for a GPU's daemon (deviceplugin.MPS).
func Plugin(m *Manager) PluginMPS { return PluginMPS{m: m} }

// PluginMPS adapts a Manager to the device plugin.
type PluginMPS struct{ m *Manager }

// Ensure is Manager.Ensure, the client's directories apart.
func (p PluginMPS) Ensure(ctx context.Context, uuid string) (pipeDir, shmDir string, err error) {
	c, err := p.m.Ensure(ctx, uuid)
	return c.PipeDir, c.ShmDir, err
}
