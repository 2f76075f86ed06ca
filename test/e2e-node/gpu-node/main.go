// Command gpu-node brings up and tears down a real single-node cluster on this machine (package
// test/e2e-node/node): make node-up, make node-down.
//
//	gpu-node up      start the node in a background process of its own; prints the KUBECONFIG
//	gpu-node down    stop it, remove everything it left and check that nothing is left
//	gpu-node check   only the check (exit 1 when something of a node is still here)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/test/e2e-node/node"
)

func main() {
	klog.InitFlags(nil)
	var cfg node.Config
	flag.StringVar(&cfg.StateDir, "state-dir", "", "Where the node keeps its configuration, logs and the control plane (default _output/node).")
	flag.StringVar(&cfg.ImagesDir, "images-dir", "", "OCI archives to load into containerd (default _output/images, make images).")
	flag.IntVar(&cfg.GPUs, "gpus", node.DefaultGPUs, "Fake /dev/nvidia<minor> devices to create when there is no NVIDIA driver.")
	timeout := flag.Duration("timeout", 5*time.Minute, "How long up waits for the node.")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: gpu-node [flags] up|down|check\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	cfg.Labels = DefaultLabels
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch flag.Arg(0) {
	case "up":
		err = up(ctx, cfg, *timeout)
	case "serve":
		err = serve(ctx, cfg)
	case "down":
		err = down(ctx, cfg)
	case "check":
		err = check(cfg)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-node:", err)
		os.Exit(1)
	}
}

// DefaultLabels mark the node as a GPU node the chart's agent runs on (docs/install.md): the
// label NVIDIA's feature discovery would set, and the one that gives its GPUs to our device plugin.
var DefaultLabels = map[string]string{
	"nvidia.com/gpu.present": "true",
	"gpu.scheduling/managed": "true",
}

func stateDir(cfg node.Config) (string, error) {
	if cfg.StateDir != "" {
		return filepath.Abs(cfg.StateDir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "charts", "gpu-scheduler")); err == nil {
			return filepath.Join(d, "_output", "node"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no gpu-scheduler repository above %s: pass -state-dir", wd)
		}
	}
}

// up starts `gpu-node serve` as a session of its own, so that the node outlives this command
// and the terminal, and waits until it says the node is Ready (or dies).
func up(ctx context.Context, cfg node.Config, timeout time.Duration) error {
	if err := node.CanHost(); err != nil {
		return err
	}
	dir, err := stateDir(cfg)
	if err != nil {
		return err
	}
	if pid, ok := ownerAlive(dir); ok {
		return fmt.Errorf("a node is already up (pid %d): run make node-down first", pid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ready := filepath.Join(dir, "ready")
	_ = os.Remove(ready)
	logPath := filepath.Join(dir, "gpu-node.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"-state-dir", dir, "-gpus", strconv.Itoa(cfg.GPUs)}
	if cfg.ImagesDir != "" {
		args = append(args, "-images-dir", cfg.ImagesDir)
	}
	child := exec.Command(self, append(args, "serve")...)
	child.Stdout, child.Stderr = logFile, logFile
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	began := time.Now()
	if err := child.Start(); err != nil {
		return fmt.Errorf("starting the node process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the node did not come up (%w); its log %s ends:\n%s", err, logPath, tail(logPath))
		case <-deadline:
			_ = child.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("the node is not up after %s; its log %s ends:\n%s", timeout, logPath, tail(logPath))
		case <-ctx.Done():
			_ = child.Process.Signal(syscall.SIGTERM)
			return ctx.Err()
		case <-tick.C:
			b, err := os.ReadFile(ready)
			if err != nil {
				continue
			}
			fmt.Printf("node up in %s (pid %d); stop it with make node-down\nexport KUBECONFIG=%s\n", time.Since(began).Round(time.Second), child.Process.Pid, strings.TrimSpace(string(b)))
			return nil
		}
	}
}

func ownerAlive(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

// serve runs the node until SIGTERM or SIGINT, then tears it down.
func serve(ctx context.Context, cfg node.Config) error {
	dir, err := stateDir(cfg)
	if err != nil {
		return err
	}
	cfg.StateDir = dir
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return err
	}
	n, err := node.Up(ctx, cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(n.Kubeconfig()), 0o600); err != nil {
		_ = n.Down(context.WithoutCancel(ctx))
		return err
	}
	<-ctx.Done()
	klog.Background().Info("Tearing the node down")
	return n.Down(context.WithoutCancel(ctx))
}

// down stops the serving process (it tears its node down), then cleans whatever is left (a
// killed owner leaves everything) and checks.
func down(ctx context.Context, cfg node.Config) error {
	dir, err := stateDir(cfg)
	if err != nil {
		return err
	}
	cfg.StateDir = dir
	if pid, ok := ownerAlive(dir); ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if syscall.Kill(pid, 0) != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	left, err := node.CleanupAndCheck(ctx, cfg)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind after tear-down:\n  %s", strings.Join(left, "\n  "))
	}
	for _, f := range []string{"owner.pid", "ready"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	fmt.Println("node down; nothing left behind")
	return nil
}

func check(cfg node.Config) error {
	dir, err := stateDir(cfg)
	if err != nil {
		return err
	}
	cfg.StateDir = dir
	if left := node.Leftovers(cfg, nil); len(left) > 0 {
		return errors.New("left behind:\n  " + strings.Join(left, "\n  "))
	}
	fmt.Println("nothing of a node is left on this machine")
	return nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
