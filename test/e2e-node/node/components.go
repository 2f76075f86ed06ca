package node

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// Component names (logs are <StateDir>/cp/logs/<name>.log).
const (
	ComponentContainerd = "containerd"
	ComponentKubelet    = "kubelet"
	ComponentKubeProxy  = "kube-proxy"
)

const stopGrace = 20 * time.Second

// serviceCIDR is sim/cluster's Service range, which the pods reach through the bridge's address.
const serviceCIDR = "10.96.0.0/16"

func mknodChar(path string, major, minor uint32) error {
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		return err
	}
	return os.Chmod(path, 0o666)
}

// Images are the OCI archives of ImagesDir and the image names they hold.
type image struct {
	archive string
	names   []string
}

func images(dir string) ([]image, error) {
	archives, err := filepath.Glob(filepath.Join(dir, "*.oci.tar"))
	if err != nil {
		return nil, err
	}
	sort.Strings(archives)
	var out []image
	for _, a := range archives {
		names, err := archiveNames(a)
		if err != nil {
			return nil, err
		}
		out = append(out, image{archive: a, names: names})
	}
	return out, nil
}

// archiveNames reads the image names of an OCI layout tarball from its index.json.
func archiveNames(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no index.json (not an OCI layout archive)", path)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return nil, fmt.Errorf("%s: index.json: %w", path, err)
		}
		var names []string
		for _, m := range idx.Manifests {
			if n := m.Annotations["io.containerd.image.name"]; n != "" {
				names = append(names, n)
			}
		}
		return names, nil
	}
}

// pauseImage is the name of the sandbox image among the archives of dir.
func pauseImage(dir string) (string, error) {
	imgs, err := images(dir)
	if err != nil {
		return "", err
	}
	for _, im := range imgs {
		for _, n := range im.names {
			if strings.Contains(n, "/pause:") {
				return n, nil
			}
		}
	}
	return "", fmt.Errorf("no pause image in %s (run: make images)", dir)
}

func (n *Node) confDir() string { return filepath.Join(n.cfg.StateDir, "conf") }

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (n *Node) writeConfigs(ctx context.Context) error {
	_ = ctx
	pause, err := pauseImage(n.cfg.ImagesDir)
	if err != nil {
		return err
	}
	gw, subnet, err := n.cfg.gateway()
	if err != nil {
		return err
	}
	dir := n.confDir()
	n.files = files{
		containerdConfig: filepath.Join(dir, "containerd.toml"),
		kubeletConfig:    filepath.Join(dir, "kubelet.yaml"),
		kubeProxyConfig:  filepath.Join(dir, "kube-proxy.yaml"),
	}
	// containerd 2.x (config version 3). restrict_oom_score_adj: containers may not lower
	// their OOM score below containerd's own (sandboxes in unprivileged VMs cannot lower OOM
	// scores at all; without it every sandbox fails to start). CDI reads the specs the agent's
	// device plugin writes; it is how the plugin's devices reach a container. The network
	// namespaces are mounted under containerd's state dir, which tear-down removes.
	containerdTOML := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[4]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  cdi_spec_dirs = [%[5]q, %[6]q]
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
    use_internal_loopback = true

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
`, containerdRoot, containerdRun, containerdSock, pause, cdiEtcDir, cdiRunDir, cniBinDir(), cniConfDir)
	if err := writeFile(n.files.containerdConfig, []byte(containerdTOML)); err != nil {
		return err
	}
	// The bridge of our own; no ipMasq and no default route: pods reach this machine, each other
	// and the Services (kube-proxy's rules on this machine) only.
	ones, _ := subnet.Mask.Size()
	cni := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.cfg.Name,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.cfg.Bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": cniIPAMDir,
				"ranges": []any{[]any{map[string]any{
					"subnet": fmt.Sprintf("%s/%d", subnet.IP, ones), "gateway": gw.String(),
				}}},
				"routes": []any{map[string]any{"dst": serviceCIDR}},
			},
		}},
	}
	b, err := json.MarshalIndent(cni, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding CNI config: %w", err)
	}
	if err := writeFile(filepath.Join(cniConfDir, "10-"+n.cfg.Name+".conflist"), b); err != nil {
		return err
	}
	return nil
}

// nodeEnv is the environment of containerd, the kubelet and kube-proxy: the node binaries and
// the system's (runc, iptables, mount).
func (n *Node) nodeEnv() []string {
	return []string{"PATH=" + n.cfg.BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
}

// StartContainerd starts containerd and waits for its socket.
func (n *Node) StartContainerd(ctx context.Context) error {
	p, err := n.Cluster.StartProcess(ComponentContainerd, filepath.Join(n.cfg.BinDir, "containerd"),
		[]string{"--config", n.files.containerdConfig, "--log-level", "warn"}, n.nodeEnv())
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	n.containerd = p
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, n.cfg.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, errors.New("containerd exited")
		}
		c, err := net.DialTimeout("unix", containerdSock, time.Second)
		if err != nil {
			return false, nil
		}
		_ = c.Close()
		return n.ctr(ctx, "version") == nil, nil
	})
	if err != nil {
		return fmt.Errorf("node %s: containerd not ready: %w; its log ends:\n%s", n.cfg.Name, err, p.LogTail(30))
	}
	return nil
}

// ctr runs ctr against the node's containerd in the kubelet's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	_ = ctx
	return run(filepath.Join(n.cfg.BinDir, "ctr"), append([]string{"--address", containerdSock, "--namespace", "k8s.io"}, args...)...)
}

// loadImages imports every archive of ImagesDir for this machine's platform.
func (n *Node) loadImages(ctx context.Context) error {
	imgs, err := images(n.cfg.ImagesDir)
	if err != nil {
		return err
	}
	for _, im := range imgs {
		// --local: the archive holds the whole index; nothing is fetched. Not --all-platforms: a
		// node needs only its own platform's layers unpacked.
		if err := n.ctr(ctx, "images", "import", "--local", im.archive); err != nil {
			return fmt.Errorf("node %s: loading %s: %w", n.cfg.Name, im.archive, err)
		}
	}
	return nil
}

// LoadImage imports one more OCI archive (a test's own image).
func (n *Node) LoadImage(ctx context.Context, archive string) error {
	return n.ctr(ctx, "images", "import", "--local", archive)
}

// StartKubelet starts the kubelet and waits until the node is Ready.
func (n *Node) StartKubelet(ctx context.Context) error {
	if n.files.kubeletConfig == "" {
		return errors.New("node: configuration not written")
	}
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// This machine and CI's have cgroups v1, which a kubelet refuses by default now.
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		"failSwapOn":   false,
		"address":      n.Address,
		"readOnlyPort": 0,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": n.Cluster.CACert()},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": "unix://" + containerdSock,
		"healthzBindAddress":       "127.0.0.1",
		"clusterDomain":            "cluster.local",
		// The images exist only here (no registry to pull them back from): never collect them.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// A development disk is often fuller than a server's: evict only when it is really full.
		"evictionHard": map[string]string{
			"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%", "nodefs.inodesFree": "2%",
		},
		"maxPods":                   250,
		"serializeImagePulls":       false,
		"nodeStatusReportFrequency": "10s",
		"fileCheckFrequency":        "5s",
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding kubelet configuration: %w", err)
	}
	if err := writeFile(n.files.kubeletConfig, b); err != nil {
		return err
	}
	var labels []string
	for k, v := range n.cfg.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	args := []string{
		"--config=" + n.files.kubeletConfig,
		"--kubeconfig=" + n.Cluster.KubeletKubeconfig(),
		"--root-dir=" + kubeletRoot,
		"--cert-dir=" + kubeletCertDir,
		// The node's name: the machine's hostname may be anything, and a loopback node IP is
		// refused, so the node is named and addressed explicitly.
		"--hostname-override=" + n.cfg.Name,
		"--node-ip=" + n.Address,
		"--v=1",
	}
	if len(labels) > 0 {
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	p, err := n.Cluster.StartProcess(ComponentKubelet, filepath.Join(n.cfg.BinDir, "kubelet"), args, n.nodeEnv())
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	n.kubelet = p
	return n.waitNodeReady(ctx, p)
}

func (n *Node) startKubeProxy(ctx context.Context) error {
	_, subnet, err := n.cfg.gateway()
	if err != nil {
		return err
	}
	cfg := map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"mode":             "iptables",
		"clientConnection": map[string]any{"kubeconfig": n.Cluster.KubeProxyKubeconfig()},
		"hostnameOverride": n.cfg.Name,
		"clusterCIDR":      subnet.String(),
		// Leave the host's conntrack table sizes alone.
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0},
		// NodePorts on the node's own address only, and not on 127.0.0.1 (which would need
		// route_localnet).
		"nodePortAddresses":  []string{n.Address + "/32"},
		"iptables":           map[string]any{"localhostNodePorts": false},
		"metricsBindAddress": "127.0.0.1:10249",
		"healthzBindAddress": "127.0.0.1:10256",
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding kube-proxy configuration: %w", err)
	}
	if err := writeFile(n.files.kubeProxyConfig, b); err != nil {
		return err
	}
	p, err := n.Cluster.StartProcess(ComponentKubeProxy, filepath.Join(n.cfg.BinDir, "kube-proxy"),
		[]string{"--config=" + n.files.kubeProxyConfig, "--v=1"}, n.nodeEnv())
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	n.kubeProxy = p
	// Ready once it has written the rules of the "kubernetes" Service.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, n.cfg.ReadyTimeout, true, func(context.Context) (bool, error) {
		if !p.Running() {
			return false, errors.New("kube-proxy exited")
		}
		for _, c := range chains() {
			if strings.HasSuffix(c, "/nat/KUBE-SERVICES") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s: kube-proxy not ready: %w; its log ends:\n%s", n.cfg.Name, err, p.LogTail(30))
	}
	return nil
}

// StopKubelet stops the kubelet (its pods keep running, as on a real node).
func (n *Node) StopKubelet() error {
	if n.kubelet == nil {
		return nil
	}
	err := n.kubelet.Stop(stopGrace)
	n.kubelet = nil
	return err
}

// RestartKubelet stops the kubelet and starts it again, waiting for the node to be Ready.
func (n *Node) RestartKubelet(ctx context.Context) error {
	if err := n.StopKubelet(); err != nil {
		return err
	}
	return n.StartKubelet(ctx)
}

// RestartContainerd stops containerd (the containers keep running under their shims) and starts it
// again.
func (n *Node) RestartContainerd(ctx context.Context) error {
	if n.containerd != nil {
		if err := n.containerd.Stop(stopGrace); err != nil {
			return err
		}
	}
	return n.StartContainerd(ctx)
}

// Down tears the node down: the pods' sandboxes through containerd (so that the CNI plugin
// releases their addresses and veths), the kubelet, kube-proxy and containerd, the control
// plane, and then Cleanup.
func (n *Node) Down(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs []error
	if n.kubelet != nil {
		if err := n.StopKubelet(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.containerd != nil && n.containerd.Running() {
		if err := removeSandboxes(ctx); err != nil {
			logger.Error(err, "Removing the pod sandboxes through containerd; tear-down goes on by force")
		}
	}
	for _, p := range []*cluster.Process{n.kubeProxy, n.containerd} {
		if p != nil {
			if err := p.Stop(stopGrace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if n.Cluster != nil {
		if err := n.Cluster.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := Cleanup(ctx, n.cfg); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
