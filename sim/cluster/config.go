package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults for Config. The lease and grace period follow CONTROL-PLANE.md: with 40 s leases the
// heartbeats of 5,000 kwok nodes alone eat a core; 240 s leases bring that to about a third.
const (
	DefaultName                       = "gpu-sim"
	DefaultNodeLeaseDuration          = 240 * time.Second
	DefaultReadyTimeout               = 90 * time.Second
	DefaultControllerManagerQPS       = 500
	DefaultSchedulerQPS               = 1000
	DefaultMinFreeDiskBytes     int64 = 1 << 30

	// BinDirEnv overrides where the control-plane binaries are looked up.
	BinDirEnv = "GPU_SIM_BIN_DIR"
)

// Config says how to start a cluster. The zero value is valid: a cluster in a fresh temporary
// directory on free loopback ports, without the stock scheduler.
type Config struct {
	// Name identifies the cluster in logs, process names and the temporary directory. A DNS label.
	Name string
	// BinDir holds kube-apiserver, etcd, kwok and the rest. Default: $GPU_SIM_BIN_DIR, else
	// _output/bin of the module this process runs in (found from the working directory).
	BinDir string
	// WorkDir receives certificates, kubeconfigs, etcd data, logs and the state file. Default: a
	// new directory under os.TempDir(). Stop removes it unless KeepWorkDir is set.
	WorkDir string
	// KeepWorkDir keeps WorkDir (logs, etcd data) after Stop, for debugging.
	KeepWorkDir bool
	// StockScheduler also starts the unmodified kube-scheduler (schedulerName default-scheduler),
	// the baseline the simulator compares gpu-scheduler against.
	StockScheduler bool
	// APIServerPort pins the apiserver's port; 0 picks a free one.
	APIServerPort int
	// NodeLeaseDuration is the node lease kwok holds for each fake node; kwok renews it every
	// quarter of that and kube-controller-manager's node-monitor-grace-period is set a minute longer.
	NodeLeaseDuration time.Duration
	// ReadyTimeout bounds the wait for each component to become ready.
	ReadyTimeout time.Duration
	// ControllerManagerQPS is kube-controller-manager's --kube-api-qps (burst is twice that). At
	// the default 50, untainting 1,000 new nodes takes 45 s.
	ControllerManagerQPS int
	// SchedulerQPS is the stock scheduler's clientConnection.qps (burst is twice that). At the
	// default 50 binding caps at about 50 pods/s.
	SchedulerQPS int
	// MinFreeDiskBytes is the free space WorkDir's file system must have at start.
	MinFreeDiskBytes int64
	// Profiling serves /debug/pprof on kube-apiserver, kube-controller-manager and the stock
	// kube-scheduler (to the cluster admin), for the simulator's CPU breakdown.
	Profiling bool
	// APIServerExtraArgs are appended to kube-apiserver's command line (feature gates, say).
	APIServerExtraArgs []string
	// RealNode, when set, readies the control plane for one real kubelet and kube-proxy on this
	// machine and the pods they run (make node-up): see RealNode. Nil for kwok-only clusters.
	RealNode *RealNode
}

// RealNode describes the one real node of a cluster. Pods cannot reach 127.0.0.1 of the host,
// so the apiserver listens on every address and advertises Address, which the "kubernetes"
// Service then points at (kept by the lease endpoint reconciler); the kubelet and kube-proxy
// get client certificates of their own (system:node:<Name>, system:kube-proxy) so that the Node
// authorizer and the default RBAC bindings apply to them as in a real cluster; the apiserver
// gets a client certificate for the kubelet's API (logs, exec), which it reaches at the node's
// InternalIP.
type RealNode struct {
	// Name is the node's name (the kubelet's --hostname-override).
	Name string
	// Address is a non-loopback IPv4 address of this machine that the node's pods can reach:
	// the gateway of their bridge.
	Address string
}

// withDefaults returns a copy of c with every unset field defaulted.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.NodeLeaseDuration == 0 {
		c.NodeLeaseDuration = DefaultNodeLeaseDuration
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.ControllerManagerQPS == 0 {
		c.ControllerManagerQPS = DefaultControllerManagerQPS
	}
	if c.SchedulerQPS == 0 {
		c.SchedulerQPS = DefaultSchedulerQPS
	}
	if c.MinFreeDiskBytes == 0 {
		c.MinFreeDiskBytes = DefaultMinFreeDiskBytes
	}
	c.APIServerExtraArgs = append([]string(nil), c.APIServerExtraArgs...)
	if c.RealNode != nil {
		n := *c.RealNode
		c.RealNode = &n
	}
	return c
}

// Validate reports every problem with c at once. It expects defaults to have been applied.
func (c Config) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name %q: %s", c.Name, strings.Join(msgs, "; ")))
	}
	if c.APIServerPort < 0 || c.APIServerPort > 65535 {
		errs = append(errs, fmt.Errorf("apiServerPort %d: must be 0 (pick a free port) or 1-65535", c.APIServerPort))
	}
	if c.NodeLeaseDuration < 10*time.Second {
		errs = append(errs, fmt.Errorf("nodeLeaseDuration %s: must be at least 10s", c.NodeLeaseDuration))
	}
	if c.NodeLeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("nodeLeaseDuration %s: must be whole seconds", c.NodeLeaseDuration))
	}
	if c.ReadyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("readyTimeout %s: must be positive", c.ReadyTimeout))
	}
	if c.ControllerManagerQPS <= 0 {
		errs = append(errs, fmt.Errorf("controllerManagerQPS %d: must be positive", c.ControllerManagerQPS))
	}
	if c.SchedulerQPS <= 0 {
		errs = append(errs, fmt.Errorf("schedulerQPS %d: must be positive", c.SchedulerQPS))
	}
	if c.MinFreeDiskBytes < 0 {
		errs = append(errs, fmt.Errorf("minFreeDiskBytes %d: must not be negative", c.MinFreeDiskBytes))
	}
	if n := c.RealNode; n != nil {
		if msgs := validation.IsDNS1123Subdomain(n.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("realNode.name %q: %s", n.Name, strings.Join(msgs, "; ")))
		}
		if ip := net.ParseIP(n.Address); ip == nil || ip.To4() == nil || ip.IsLoopback() || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("realNode.address %q: must be a non-loopback IPv4 address of this machine", n.Address))
		}
	}
	if c.WorkDir != "" && !filepath.IsAbs(c.WorkDir) {
		errs = append(errs, fmt.Errorf("workDir %q: must be an absolute path", c.WorkDir))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid cluster config: %w", errors.Join(errs...))
	}
	return nil
}

// nodeMonitorGracePeriod is how long kube-controller-manager waits for a lease renewal before it
// marks a node NotReady: a minute past the lease, so a renewal that is a little late is no outage.
func (c Config) nodeMonitorGracePeriod() time.Duration {
	return c.NodeLeaseDuration + time.Minute
}

// Binaries the cluster runs, looked up in Config.BinDir.
const (
	binEtcd              = "etcd"
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	binKwok              = "kwok"
)

// ErrBinaryMissing is returned when a control-plane binary is not in the binary directory.
var ErrBinaryMissing = errors.New("control-plane binary missing")

// resolveBinDir finds the directory with the binaries: the configured one, $GPU_SIM_BIN_DIR, or
// _output/bin of the nearest enclosing directory that has one (tests run in their package dir).
func resolveBinDir(configured string) (string, error) {
	if configured != "" {
		return filepath.Abs(configured)
	}
	if env := os.Getenv(BinDirEnv); env != "" {
		return filepath.Abs(env)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			candidate := filepath.Join(dir, "_output", "bin")
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if st, err := os.Stat(candidate); err == nil && st.IsDir() {
					return candidate, nil
				}
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("%w: no _output/bin found above %v and %s is not set: run \"make tools\"", ErrBinaryMissing, starts, BinDirEnv)
}

// checkBinaries makes sure every binary the config needs is present and executable.
func checkBinaries(binDir string, names ...string) error {
	var missing []string
	for _, n := range names {
		st, err := os.Stat(filepath.Join(binDir, n))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s: run \"make tools\" to build them",
			ErrBinaryMissing, strings.Join(missing, ", "), binDir)
	}
	return nil
}
