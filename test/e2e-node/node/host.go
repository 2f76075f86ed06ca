package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Paths on the host. The kubelet's own are fixed by the kubelet: the device-plugin registration
// socket is /var/lib/kubelet/device-plugins/kubelet.sock whatever --root-dir says, so one real
// kubelet runs per machine and it might as well use the standard root. Everything else of ours
// lives under libDir and runDir, so that tear-down knows what to remove.
const (
	libDir         = "/var/lib/gpu-node"
	runDir         = "/run/gpu-node"
	kubeletRoot    = "/var/lib/kubelet"
	podLogsDir     = "/var/log/pods"
	containerLogs  = "/var/log/containers"
	cniStateDir    = "/var/lib/cni"
	containerdRoot = libDir + "/containerd"
	containerdRun  = runDir + "/containerd"
	containerdSock = containerdRun + "/containerd.sock"
	cniConfDir     = runDir + "/cni/net.d"
	cniIPAMDir     = runDir + "/cni/ipam"
	kubeletCertDir = libDir + "/kubelet-pki"
	cdiRunDir      = "/var/run/cdi"
	cdiEtcDir      = "/etc/cdi"
)

// hostDirs are created by the node (the kubelet, containerd, the CNI plugins, the agent) and
// removed by tear-down when they did not exist before.
var hostDirs = []string{kubeletRoot, podLogsDir, containerLogs, cniStateDir, libDir, runDir, cdiRunDir, cdiEtcDir}

// sysctls the node's parts write: the kubelet's kernel tunables (protectKernelDefaults off),
// the bridge plugin's forwarding (isGateway), kube-proxy's localnet and the bridge netfilter
// hooks. Recorded before and written back after.
var sysctls = []string{
	"vm.overcommit_memory",
	"vm.panic_on_oom",
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
	"net.ipv4.ip_forward",
	"net.ipv4.conf.all.forwarding",
	"net.ipv6.conf.all.forwarding",
	"net.ipv4.conf.all.route_localnet",
	"net.bridge.bridge-nf-call-iptables",
	"net.bridge.bridge-nf-call-ip6tables",
	"net.netfilter.nf_conntrack_max",
	"net.netfilter.nf_conntrack_tcp_timeout_established",
	"net.netfilter.nf_conntrack_tcp_timeout_close_wait",
}

// hostRecord is what the host looked like before the node came up: what tear-down puts back
// and what the leftover check compares with. It is written to <StateDir>/host-before.json
// before anything is changed, so a tear-down after a crash still finds it.
type hostRecord struct {
	Sysctls map[string]string `json:"sysctls"`
	// Dirs that existed before (they are left in place, only emptied of what we made).
	Dirs map[string]bool `json:"dirs"`
	// Links are the network interfaces that existed before.
	Links []string `json:"links"`
	// Chains are the iptables and ip6tables chains (table/chain) that existed before.
	Chains []string `json:"chains"`
	// DevNodes are the fake /dev/nvidia* character devices the node created.
	DevNodes []string `json:"devNodes,omitempty"`
	// CDISpecs are the files in the CDI spec directories before.
	CDISpecs []string `json:"cdiSpecs"`
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func readSysctl(name string) (string, bool) {
	b, err := os.ReadFile(sysctlPath(name))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func recordHost() (*hostRecord, error) {
	r := &hostRecord{Sysctls: map[string]string{}, Dirs: map[string]bool{}}
	for _, s := range sysctls {
		if v, ok := readSysctl(s); ok {
			r.Sysctls[s] = v
		}
	}
	for _, d := range hostDirs {
		if _, err := os.Stat(d); err == nil {
			r.Dirs[d] = true
		}
	}
	var err error
	if r.Links, err = links(); err != nil {
		return nil, err
	}
	r.Chains = chains()
	r.CDISpecs = cdiSpecs()
	return r, nil
}

func readRecord(path string) (*hostRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r hostRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &r, nil
}

func (r *hostRecord) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding host record: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func links() ([]string, error) {
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// chains lists table/chain of every iptables and ip6tables chain (iptables-save's ':' lines).
func chains() []string {
	var out []string
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		b, err := exec.Command(save).Output()
		if err != nil {
			continue // no ip6tables, say: nothing of ours there either
		}
		table := ""
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "*"):
				table = l[1:]
			case strings.HasPrefix(l, ":"):
				name, _, _ := strings.Cut(l[1:], " ")
				out = append(out, save[:len(save)-5]+"/"+table+"/"+name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func cdiSpecs() []string {
	var out []string
	for _, d := range []string{cdiRunDir, cdiEtcDir} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

// ourMountRoots are the trees whose mounts are ours to undo: the kubelet's volumes, containerd's
// root file systems and sandbox shm, and the network namespaces (netns_mounts_under_state_dir).
var ourMountRoots = []string{kubeletRoot, libDir, runDir}

// ourMounts lists the mount points under ourMountRoots, deepest first.
func ourMounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, root := range ourMountRoots {
			if mp == root || strings.HasPrefix(mp, root+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountAll() error {
	var errs []error
	// A mount can hide another under it; a few rounds catch the stacked ones.
	for round := 0; round < 5; round++ {
		ms := ourMounts()
		if len(ms) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range ms {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	if ms := ourMounts(); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %s", strings.Join(ms, ", ")))
	}
	return errors.Join(errs...)
}

// cgroupRoots are the cgroup directories the kubelet creates with the cgroupfs driver (the QoS
// tree) in every v1 hierarchy, or in the v2 unified one.
func cgroupRoots() []string {
	var out []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/kubepods*", "/sys/fs/cgroup/kubepods*"} {
		m, _ := filepath.Glob(pattern)
		for _, p := range m {
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				out = append(out, p)
			}
		}
	}
	return out
}

// cgroupProcs lists the PIDs in the cgroup trees under roots.
func cgroupProcs(roots []string) []int {
	var pids []int
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	sort.Ints(pids)
	return slicesCompact(pids)
}

func slicesCompact(s []int) []int {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// removeCgroups kills what runs in the trees and removes their directories, deepest first.
func removeCgroups(roots []string) error {
	for i := 0; i < 50; i++ {
		pids := cgroupProcs(roots)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for try := 0; try < 20; try++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(50 * time.Millisecond) // a killed process leaves its cgroup a moment later
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ourProcesses are the processes of a node that outlive their parent: containerd's shims
// (daemons of their own) and anything still running a binary from binDir or runc.
func ourProcesses(binDir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		exe := args[0]
		switch {
		case strings.Contains(string(cmdline), containerdRun), strings.Contains(string(cmdline), runDir+"/"):
			out = append(out, pid)
		case binDir != "" && strings.HasPrefix(exe, binDir+"/") && nodeBinary(filepath.Base(exe)):
			out = append(out, pid)
		}
	}
	return out
}

func nodeBinary(name string) bool {
	switch name {
	case "kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2":
		return true
	}
	return false
}

func killAll(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if err := syscall.Kill(pid, 0); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// run runs a host command and returns its combined output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
