// Package launch starts the project's production binaries (gpu-scheduler, and the agent and
// webhook where their packages offer it) beside a harness control plane, for the simulator,
// the integration tests and the acceptance suite. It never reimplements them: it writes their
// configuration and runs the same binaries a cluster runs.
package launch

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	schedconfig "github.com/gpu-scheduler/gpu-scheduler/scheduler/config"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/peers"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// RepoRoot finds the repository root (the directory with go.mod) above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Binary returns the path of one of the project's commands in <repo>/bin, building it first
// when GPU_SIM_BUILD is not "0" (go build is quick when nothing changed, and a stale binary
// would test old code).
func Binary(ctx context.Context, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "bin", name)
	if os.Getenv("GPU_SIM_BUILD") == "0" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("%s not built: run \"make build\": %w", path, err)
		}
		return path, nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, out)
	}
	return path, nil
}

// SchedulerOptions configure one gpu-scheduler process.
type SchedulerOptions struct {
	// Name tells processes apart in logs; default "gpu-scheduler".
	Name string
	// LeaderElect turns on leader election (off by default so two processes race).
	LeaderElect bool
	// LeaseNamespace holds the GPU leases; default "gpu-scheduler".
	LeaseNamespace string
	// SchedulerName renames the profile (--scheduler-name), as a second release's scheduler
	// does; default the shipped gpu-scheduler.
	SchedulerName string
	// NodeStrategy is one of api/v1 NodeStrategies; default from the shipped config.
	NodeStrategy string
	// PluginArgs override further plugin args.
	PluginArgs map[string]any
	// QPS for the scheduler's client; default 1000.
	QPS float32
	// Verbosity is the klog -v level; default 2.
	Verbosity int
	// Profiling serves /debug/pprof on the scheduler's secure port (to the cluster admin).
	Profiling bool
	// Identity names the process among the gpu-scheduler processes serving its profile
	// (peers.IdentityEnv); default Name. Processes on one host share a host name, the
	// default identity, so each gets its own; a restart of the same scheduler keeps it, as a
	// restarted container keeps its pod's name.
	Identity string
}

// Scheduler is a running gpu-scheduler.
type Scheduler struct {
	*cluster.Process
	Port int
}

// StartScheduler runs bin/gpu-scheduler against the cluster and waits until it is healthy.
func StartScheduler(ctx context.Context, c *cluster.Cluster, opts SchedulerOptions) (*Scheduler, error) {
	if opts.Name == "" {
		opts.Name = "gpu-scheduler"
	}
	if opts.QPS == 0 {
		opts.QPS = 1000
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 2
	}
	if opts.Identity == "" {
		opts.Identity = opts.Name
	}
	bin, err := Binary(ctx, "gpu-scheduler")
	if err != nil {
		return nil, err
	}
	cfg, err := schedconfig.Render(schedconfig.Options{
		Kubeconfig:     c.Kubeconfig(),
		LeaderElect:    opts.LeaderElect,
		QPS:            opts.QPS,
		LeaseNamespace: opts.LeaseNamespace,
		SchedulerName:  opts.SchedulerName,
		NodeStrategy:   opts.NodeStrategy,
		PluginArgs:     opts.PluginArgs,
	})
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(c.WorkDir(), opts.Name+".yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", cfgPath, err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	p, err := c.StartProcess(opts.Name, bin, []string{
		"--config=" + cfgPath,
		"--authentication-kubeconfig=" + c.Kubeconfig(),
		"--authorization-kubeconfig=" + c.Kubeconfig(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.WorkDir(), opts.Name+"-certs"),
		"--profiling=" + strconv.FormatBool(opts.Profiling),
		"-v=" + strconv.Itoa(opts.Verbosity),
	}, []string{peers.IdentityEnv + "=" + opts.Identity})
	if err != nil {
		return nil, err
	}
	s := &Scheduler{Process: p, Port: port}
	if err := waitHealthy(ctx, p, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", 2*time.Minute); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return s, nil
}

// waitHealthy polls url until it answers 200, the process exits, or timeout passes.
func waitHealthy(ctx context.Context, p *cluster.Process, url string, timeout time.Duration) error {
	// The serving certificate is self-signed by the process itself; only liveness matters here.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("exited during start")
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s (pid %d) not healthy at %s: %w; last lines of %s:\n%s", filepath.Base(p.LogPath()), p.PID(), url, err, p.LogPath(), p.LogTail(30))
	}
	return nil
}
