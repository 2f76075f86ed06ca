// Package node brings up a real single-node Kubernetes cluster on this machine: the project's
// control plane (sim/cluster) plus containerd 2.x with CDI, runc, a real kubelet, the bridge CNI
// plugin on a bridge of our own and kube-proxy in iptables mode; kwok nodes may join beside it.
// It tears all of it down again leaving nothing behind, and Leftovers says what would be.
//
// Everything runs as children of the calling process (make node-up runs one that waits for a
// signal; the e2e-node test runs the node in the test process), killed with it. What outlives a
// killed caller (containerd's shims, the pods' processes and cgroups, mounts, the bridge, the
// iptables chains, the kubelet's sysctls) is found again and removed by Cleanup, from the
// record of the host written before anything changed.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// Defaults of Config.
const (
	DefaultName   = "gpu-node"
	DefaultBridge = "gpunode0"
	// DefaultSubnet is the pods' subnet on the bridge; its first address is the bridge's and the
	// node's. Private and routed nowhere: pods reach this machine and each other, nothing else
	// (no masquerade).
	DefaultSubnet = "10.203.0.0/24"
	DefaultGPUs   = 8
)

// nvidiaMajor is the NVIDIA driver's character-device major number (/dev/nvidia<minor>,
// /dev/nvidiactl is minor 255).
const nvidiaMajor = 195

// Config says how to bring the node up. The zero value is valid.
type Config struct {
	// Name is the node's name and the cluster's.
	Name string
	// BinDir holds the control-plane and node binaries (hack/build-tools.sh --node).
	BinDir string
	// StateDir holds the control plane's work dir (cp/), the node's configuration files and
	// host-before.json. Default: <repo>/_output/node.
	StateDir string
	// Bridge and Subnet are the pod network.
	Bridge string
	Subnet string
	// ImagesDir holds the OCI archives to load into containerd (make images): the pause image
	// is the one whose name contains "/pause".
	ImagesDir string
	// GPUs is how many fake /dev/nvidia<minor> character devices to create when the machine has
	// no NVIDIA driver (no /dev/nvidiactl); 0 creates none.
	GPUs int
	// Labels are put on the node by the kubelet (--node-labels).
	Labels map[string]string
	// ReadyTimeout bounds each wait of the start.
	ReadyTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if c.Subnet == "" {
		c.Subnet = DefaultSubnet
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 3 * time.Minute
	}
	root, err := repoRoot()
	if c.BinDir == "" {
		if err != nil {
			return c, err
		}
		c.BinDir = filepath.Join(root, "_output", "bin")
	}
	if c.StateDir == "" {
		if err != nil {
			return c, err
		}
		c.StateDir = filepath.Join(root, "_output", "node")
	}
	if c.ImagesDir == "" && err == nil {
		c.ImagesDir = filepath.Join(root, "_output", "images")
	}
	return c, nil
}

// repoRoot is the nearest directory above the working directory with go.mod and charts/.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "charts", "gpu-scheduler")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no gpu-scheduler repository above %s", wd)
		}
	}
}

// gateway is the subnet's first address: the bridge's, the node's InternalIP.
func (c Config) gateway() (net.IP, *net.IPNet, error) {
	ip, n, err := net.ParseCIDR(c.Subnet)
	if err != nil || ip.To4() == nil {
		return nil, nil, fmt.Errorf("subnet %q: not an IPv4 CIDR", c.Subnet)
	}
	gw := make(net.IP, 4)
	copy(gw, n.IP.To4())
	gw[3]++
	return gw, n, nil
}

// ErrCannotHost says this machine cannot run a real node at all (not root, no cgroups): the
// e2e test skips on it, where every other failure fails.
var ErrCannotHost = errors.New("this machine cannot host a real node")

// CanHost reports why this machine cannot host a node (ErrCannotHost), or nil.
func CanHost() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet, containerd and the bridge need it)")
	}
	if !hasCgroups() {
		missing = append(missing, "cgroups (no cpu, memory and devices controllers under /sys/fs/cgroup)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: needs %s", ErrCannotHost, strings.Join(missing, " and "))
	}
	return nil
}

func hasCgroups() bool {
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		f := " " + string(b) + " "
		return strings.Contains(f, " cpu ") && strings.Contains(f, " memory ")
	}
	for _, c := range []string{"cpu", "memory", "devices", "pids"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, "cgroup.procs")); err != nil {
			return false
		}
	}
	return true
}

// cniBinDirs are where distributions put the CNI plugins.
var cniBinDirs = []string{"/opt/cni/bin", "/usr/lib/cni", "/usr/libexec/cni"}

func cniBinDir() string {
	for _, d := range cniBinDirs {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "host-local")); err == nil {
				return d
			}
		}
	}
	return ""
}

// Preflight checks everything the node needs besides CanHost, naming what is missing and how
// to get it.
func Preflight(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	var errs []error
	var bins []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl", "kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr"} {
		if st, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil || st.Mode()&0o111 == 0 {
			bins = append(bins, b)
		}
	}
	if len(bins) > 0 {
		errs = append(errs, fmt.Errorf("%s missing from %s (run: bash hack/build-tools.sh --node)", strings.Join(bins, ", "), cfg.BinDir))
	}
	var pkgs []string
	for cmd, pkg := range map[string]string{"runc": "runc", "iptables": "iptables", "ip": "iproute2", "mount": "mount"} {
		if _, err := exec.LookPath(cmd); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	if cniBinDir() == "" {
		pkgs = append(pkgs, "containernetworking-plugins")
	}
	if len(pkgs) > 0 {
		errs = append(errs, fmt.Errorf("system packages missing: %s (apt-get install -y %s)", strings.Join(pkgs, " "), strings.Join(pkgs, " ")))
	}
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		errs = append(errs, errors.New("the br_netfilter kernel module is not loaded (modprobe br_netfilter): Services would not reach pods on the bridge"))
	}
	if _, err := pauseImage(cfg.ImagesDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Node is a running real node and its control plane.
type Node struct {
	cfg     Config
	Cluster *cluster.Cluster
	Client  kubernetes.Interface
	// Address is the node's InternalIP (the bridge's address).
	Address string

	record     *hostRecord
	containerd *cluster.Process
	kubelet    *cluster.Process
	kubeProxy  *cluster.Process
	files      files
}

// files are the node's configuration files under StateDir/conf.
type files struct {
	containerdConfig, kubeletConfig, kubeProxyConfig string
}

func (n *Node) recordPath() string { return filepath.Join(n.cfg.StateDir, "host-before.json") }

// Up brings the node up: it first cleans whatever an earlier node left (Cleanup), records the
// host, then starts the control plane, containerd (loading the images), the kubelet (until the
// node is Ready) and kube-proxy. On failure it tears down what it started.
func Up(ctx context.Context, cfg Config) (_ *Node, err error) {
	logger := klog.FromContext(ctx)
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := CanHost(); err != nil {
		return nil, err
	}
	if err := Preflight(cfg); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	if st, err := cluster.ReadState(filepath.Join(cfg.StateDir, "cp")); err == nil && st.OwnerAlive() {
		return nil, fmt.Errorf("node %s is already up (pid %d): run make node-down first", cfg.Name, st.OwnerPID)
	}
	if err := checkNoOtherKubelet(); err != nil {
		return nil, err
	}
	if err := Cleanup(ctx, cfg); err != nil {
		return nil, fmt.Errorf("node %s: cleaning up after an earlier node: %w", cfg.Name, err)
	}
	began := time.Now()
	n := &Node{cfg: cfg}
	n.record, err = recordHost()
	if err != nil {
		return nil, err
	}
	if err := n.record.write(n.recordPath()); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if derr := n.Down(context.WithoutCancel(ctx)); derr != nil {
				logger.Error(derr, "Tearing down the node after a failed start")
			}
		}
	}()
	gw, subnet, err := cfg.gateway()
	if err != nil {
		return nil, err
	}
	n.Address = gw.String()
	if err := n.setUpNetwork(gw, subnet); err != nil {
		return nil, err
	}
	if err := n.makeDevNodes(); err != nil {
		return nil, err
	}
	if err := n.writeConfigs(ctx); err != nil {
		return nil, err
	}
	n.Cluster, err = cluster.Start(ctx, cluster.Config{
		Name: cfg.Name, BinDir: cfg.BinDir, WorkDir: filepath.Join(cfg.StateDir, "cp"),
		RealNode:     &cluster.RealNode{Name: cfg.Name, Address: n.Address},
		ReadyTimeout: cfg.ReadyTimeout,
		// A real cluster's kube-scheduler: it places the chart's own pods and every pod that
		// does not name gpu-scheduler.
		StockScheduler: true,
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: starting the control plane: %w", cfg.Name, err)
	}
	n.Client, err = kubernetes.NewForConfig(n.Cluster.RESTConfig())
	if err != nil {
		return nil, fmt.Errorf("node %s: client: %w", cfg.Name, err)
	}
	logger.Info("Control plane up", "after", time.Since(began).Round(time.Millisecond))
	if err := n.StartContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.loadImages(ctx); err != nil {
		return nil, err
	}
	logger.Info("containerd up, images loaded", "after", time.Since(began).Round(time.Millisecond))
	if err := n.StartKubelet(ctx); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(ctx); err != nil {
		return nil, err
	}
	logger.Info("Node ready", "node", cfg.Name, "address", n.Address, "kubeconfig", n.Cluster.Kubeconfig(), "after", time.Since(began).Round(time.Millisecond))
	return n, nil
}

// checkNoOtherKubelet refuses a machine where a kubelet that is not ours runs: its device
// plugins and ours would share /var/lib/kubelet/device-plugins.
func checkNoOtherKubelet() error {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(exe) != "kubelet" {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmdline), libDir) {
			return fmt.Errorf("%w: another kubelet runs here (pid %s, %s)", ErrCannotHost, e.Name(), exe)
		}
	}
	return nil
}

func (n *Node) setUpNetwork(gw net.IP, subnet *net.IPNet) error {
	ones, _ := subnet.Mask.Size()
	br := n.cfg.Bridge
	if err := run("ip", "link", "add", br, "type", "bridge"); err != nil {
		return fmt.Errorf("node %s: creating bridge: %w", n.cfg.Name, err)
	}
	if err := run("ip", "addr", "add", fmt.Sprintf("%s/%d", gw, ones), "dev", br); err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	if err := run("ip", "link", "set", br, "up"); err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	return nil
}

// makeDevNodes creates fake GPU device nodes (the NVIDIA driver's major number) when the
// machine has no driver: what is checked is which of them a container gets, not that they work.
func (n *Node) makeDevNodes() error {
	if n.cfg.GPUs == 0 {
		return nil
	}
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		return nil // a real driver: its device nodes are the ones to hand out
	}
	type dev struct {
		name         string
		major, minor uint32
	}
	devs := []dev{{"nvidiactl", nvidiaMajor, 255}, {"nvidia-uvm", 510, 0}, {"nvidia-uvm-tools", 510, 1}}
	for i := 0; i < n.cfg.GPUs; i++ {
		devs = append(devs, dev{fmt.Sprintf("nvidia%d", i), nvidiaMajor, uint32(i)})
	}
	for _, d := range devs {
		p := filepath.Join("/dev", d.name)
		if err := mknodChar(p, d.major, d.minor); err != nil {
			return fmt.Errorf("node %s: creating fake GPU device %s: %w", n.cfg.Name, p, err)
		}
		n.record.DevNodes = append(n.record.DevNodes, p)
		if err := n.record.write(n.recordPath()); err != nil {
			return err
		}
	}
	return nil
}

// Kubeconfig is the cluster administrator's kubeconfig.
func (n *Node) Kubeconfig() string { return n.Cluster.Kubeconfig() }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Config is the node's configuration with defaults applied.
func (n *Node) Config() Config { return n.cfg }

// waitNodeReady waits until the kubelet has registered the node and reports it Ready.
func (n *Node) waitNodeReady(ctx context.Context, p *cluster.Process) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, n.cfg.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if p != nil && !p.Running() {
			return false, fmt.Errorf("kubelet exited")
		}
		node, err := n.Client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		tail := ""
		if p != nil {
			tail = p.LogTail(40)
		}
		return fmt.Errorf("node %s not Ready (%s): %w; kubelet log ends:\n%s", n.cfg.Name, last, err, tail)
	}
	return nil
}
