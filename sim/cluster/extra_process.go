package cluster

import (
	"fmt"
	"path/filepath"
	"time"
)

// Process is a program the caller started beside the control plane (the gpu-scheduler, the
// agent, the webhook), under the same rules as the cluster's own components: its own process
// group, killed when the caller dies, recorded in the state file, and stopped by Stop.
type Process struct {
	p *process
}

// StartProcess starts path (any binary, not only one from BinDir) with args and extra env,
// logging to <workdir>/logs/<name>.log.
func (c *Cluster) StartProcess(name, path string, args, env []string) (*Process, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: resolving %s: %w", c.cfg.Name, path, err)
	}
	p, err := c.launch(name, abs, args, env)
	if p == nil {
		return nil, err
	}
	return &Process{p: p}, err
}

// PID is the process ID.
func (p *Process) PID() int { return p.p.pid }

// LogPath is the file holding the process's output.
func (p *Process) LogPath() string { return p.p.logPath }

// Running reports whether the process has not exited.
func (p *Process) Running() bool { return p.p.running() }

// Exited is closed when the process exits.
func (p *Process) Exited() <-chan struct{} { return p.p.exited }

// LogTail returns the last lines of the process's log.
func (p *Process) LogTail(lines int) string { return tailFile(p.p.logPath, lines) }

// Stop asks the process to exit (SIGTERM) and kills it after grace.
func (p *Process) Stop(grace time.Duration) error { return p.p.stop(grace) }

// Kill kills the process group at once (SIGKILL), as a crash would, and waits for the exit.
func (p *Process) Kill() error {
	return p.p.kill()
}

// FreePort returns a loopback port that was free a moment ago, for a process the caller starts.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
