package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// removeSandboxes stops and removes every pod sandbox through the CRI, so that containerd runs
// the CNI plugin's DEL (addresses and veths released) and unmounts what it mounted.
func removeSandboxes(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+containerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to containerd: %w", err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	list, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox of %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
			continue
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox of %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes everything a node of cfg may have left on this machine, whether it was torn
// down or its owner was killed: processes, the control plane, the pods' cgroups, mounts, the
// bridge and its veths, the iptables chains of kube-proxy and the CNI plugins, the fake device
// nodes and CDI specs, the directories the node created, and the sysctls it changed (written
// back from host-before.json). It is a no-op on a clean machine.
func Cleanup(ctx context.Context, cfg Config) error {
	_, err := cleanup(ctx, cfg)
	return err
}

// CleanupAndCheck is Cleanup followed by Leftovers against the same record of the host: what
// make node-down runs.
func CleanupAndCheck(ctx context.Context, cfg Config) ([]string, error) {
	rec, err := cleanup(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg, _ = cfg.withDefaults()
	return Leftovers(cfg, rec), nil
}

func cleanup(ctx context.Context, cfg Config) (*hostRecord, error) {
	logger := klog.FromContext(ctx)
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	recPath := filepath.Join(cfg.StateDir, "host-before.json")
	rec, err := readRecord(recPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var errs []error
	// The control plane's processes by PID from its state file, then the node's that outlive
	// their parent (the shims are daemons of their own).
	if err := cluster.Teardown(ctx, filepath.Join(cfg.StateDir, "cp")); err != nil {
		errs = append(errs, err)
	}
	if pids := ourProcesses(cfg.BinDir); len(pids) > 0 {
		logger.Info("Killing leftover node processes", "pids", pids)
		killAll(pids)
	}
	if err := removeCgroups(cgroupRoots()); err != nil {
		errs = append(errs, err)
	}
	if err := unmountAll(); err != nil {
		errs = append(errs, err)
	}
	if err := removeNetwork(cfg.Bridge); err != nil {
		errs = append(errs, err)
	}
	if err := removeChains(cfg, rec); err != nil {
		errs = append(errs, err)
	}
	if rec != nil {
		for name, v := range rec.Sysctls {
			if cur, ok := readSysctl(name); ok && cur != v {
				if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
					errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", name, v, err))
				}
			}
		}
		for _, d := range rec.DevNodes {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing fake device %s: %w", d, err))
			}
		}
		for _, f := range cdiSpecs() {
			if !slices.Contains(rec.CDISpecs, f) {
				if err := os.RemoveAll(f); err != nil {
					errs = append(errs, fmt.Errorf("removing CDI spec %s: %w", f, err))
				}
			}
		}
	}
	for _, d := range hostDirs {
		ours := d == libDir || d == runDir || (rec != nil && !rec.Dirs[d])
		if !ours {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return rec, err
	}
	// Only once everything is back: a failed tear-down keeps the record for the next try.
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, "conf")); err != nil {
		return rec, err
	}
	if err := os.Remove(recPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("removing %s: %w", recPath, err)
	}
	return rec, nil
}

// removeNetwork deletes the bridge and the veths still attached to it.
func removeNetwork(bridge string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err != nil {
		return nil
	}
	var errs []error
	ports, _ := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif"))
	for _, p := range ports {
		// A veth goes away by itself once its pod's network namespace is gone.
		if err := run("ip", "link", "del", p.Name()); err != nil && fileExists(filepath.Join("/sys/class/net", p.Name())) {
			errs = append(errs, err)
		}
	}
	if err := run("ip", "link", "del", bridge); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ourChain tells kube-proxy's, the kubelet's and the CNI plugins' chains.
func ourChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-")
}

// removeChains asks kube-proxy to remove its rules, then removes whatever chain of ours is
// still there (the kubelet's canaries, a CNI plugin's) with every rule that jumps to it.
func removeChains(cfg Config, rec *hostRecord) error {
	if kp := filepath.Join(cfg.BinDir, "kube-proxy"); fileExists(kp) {
		var left bool
		for _, c := range chains() {
			left = left || ourChain(c[strings.LastIndex(c, "/")+1:])
		}
		if left {
			// Its errors are those of proxy modes that never ran (ipvs, nftables).
			_ = exec.Command(kp, "--cleanup", "--v=0").Run()
		}
	}
	var errs []error
	for _, family := range []string{"iptables", "ip6tables"} {
		if err := removeFamilyChains(family, rec); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// removeFamilyChains rewrites the tables that hold chains of ours without them: iptables-save,
// drop the chains and the rules in or into them, iptables-restore of those tables only.
func removeFamilyChains(family string, rec *hostRecord) error {
	out, err := exec.Command(family + "-save").Output()
	if err != nil {
		// No such family here (no ip6tables, say): nothing of ours in it either.
		return nil //nolint:nilerr
	}
	var recorded []string
	if rec != nil {
		recorded = rec.Chains
	}
	rules := withoutOurChains(string(out), family, recorded)
	if rules == "" {
		return nil
	}
	cmd := exec.Command(family + "-restore")
	cmd.Stdin = strings.NewReader(rules)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s-restore without the node's chains: %w: %s", family, err, strings.TrimSpace(string(o)))
	}
	return nil
}

// withoutOurChains returns the tables of save (iptables-save output) that hold chains of ours
// not in recorded (family/table/chain), without those chains and without every rule in them
// or jumping to them; empty when no table does.
func withoutOurChains(save, family string, recorded []string) string {
	keep := func(table, chain string) bool {
		return !ourChain(chain) || slices.Contains(recorded, family+"/"+table+"/"+chain)
	}
	var b strings.Builder
	table, dirty, tableText := "", false, []string{}
	sc := bufio.NewScanner(strings.NewReader(save))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "*"):
			table, dirty, tableText = l[1:], false, []string{l}
			continue
		case l == "COMMIT":
			if dirty {
				b.WriteString(strings.Join(append(tableText, l), "\n") + "\n")
			}
			continue
		case strings.HasPrefix(l, ":"):
			name, _, _ := strings.Cut(l[1:], " ")
			if !keep(table, name) {
				dirty = true
				continue
			}
		case strings.HasPrefix(l, "-A "):
			f := strings.Fields(l)
			drop := !keep(table, f[1])
			for _, flag := range []string{"-j", "-g"} {
				if i := slices.Index(f, flag); i >= 0 && i+1 < len(f) && !keep(table, f[i+1]) {
					drop = true
				}
			}
			if drop {
				dirty = true
				continue
			}
		}
		tableText = append(tableText, l)
	}
	return b.String()
}

// Leftovers lists what of this node is still on the machine, against the host as it was
// before Up: what the e2e test checks after Down.
func (n *Node) Leftovers() []string { return Leftovers(n.cfg, n.record) }

// Leftovers lists what of a node is still on this machine, against rec (the host before the
// node; nil judges by name only): processes, mounts, cgroups, the bridge and new veths,
// iptables chains, changed sysctls, fake device nodes, CDI specs and directories. Empty means
// nothing is left.
func Leftovers(cfg Config, rec *hostRecord) []string {
	cfg, _ = cfg.withDefaults()
	var out []string
	for _, pid := range ourProcesses(cfg.BinDir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
	}
	if st, err := cluster.ReadState(filepath.Join(cfg.StateDir, "cp")); err == nil {
		for _, p := range st.Processes {
			if cluster.ProcessAlive(p) {
				out = append(out, fmt.Sprintf("process %d: %s of the control plane", p.PID, p.Name))
			}
		}
	}
	for _, m := range ourMounts() {
		out = append(out, "mount "+m)
	}
	for _, c := range cgroupRoots() {
		out = append(out, "cgroup "+c)
	}
	if ls, err := links(); err == nil {
		for _, l := range ls {
			if l == cfg.Bridge || (rec != nil && strings.HasPrefix(l, "veth") && !slices.Contains(rec.Links, l)) {
				out = append(out, "network interface "+l)
			}
		}
	}
	for _, c := range chains() {
		name := c[strings.LastIndex(c, "/")+1:]
		if ourChain(name) && (rec == nil || !slices.Contains(rec.Chains, c)) {
			out = append(out, "iptables chain "+c)
		}
	}
	if rec != nil {
		for name, v := range rec.Sysctls {
			if cur, ok := readSysctl(name); ok && cur != v {
				out = append(out, fmt.Sprintf("sysctl %s = %s (was %s)", name, cur, v))
			}
		}
		for _, d := range rec.DevNodes {
			if fileExists(d) {
				out = append(out, "device node "+d)
			}
		}
		for _, f := range cdiSpecs() {
			if !slices.Contains(rec.CDISpecs, f) {
				out = append(out, "CDI spec "+f)
			}
		}
	}
	for _, d := range hostDirs {
		if !fileExists(d) {
			continue
		}
		if d == libDir || d == runDir || (rec != nil && !rec.Dirs[d]) || (rec == nil && (d == kubeletRoot || d == containerLogs || d == podLogsDir)) {
			out = append(out, "directory "+d)
		}
	}
	if fileExists(filepath.Join(cfg.StateDir, "host-before.json")) {
		out = append(out, "record "+filepath.Join(cfg.StateDir, "host-before.json")+" (an unfinished tear-down)")
	}
	return out
}
