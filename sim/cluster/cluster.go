package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Component names, used for logs (<WorkDir>/logs/<name>.log) and in the state file.
const (
	ComponentEtcd              = "etcd"
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentKwok              = "kwok"
	ComponentScheduler         = "kube-scheduler"
)

// serviceClusterIP is the first address of the service range, the "kubernetes" service's IP.
const (
	serviceCIDR      = "10.96.0.0/16"
	serviceClusterIP = "10.96.0.1"
)

// stopGrace is how long a component has to exit after SIGTERM before it gets SIGKILL.
const stopGrace = 10 * time.Second

// ports of one cluster, all on 127.0.0.1.
type ports struct {
	etcdClient, etcdPeer, apiServer, controllerManager, scheduler, kwok int
}

// Cluster is a running control plane. Its methods are safe for concurrent use.
type Cluster struct {
	cfg     Config
	binDir  string
	workDir string
	ownDir  bool // workDir was created by Start
	ports   ports
	pki     pki
	restCfg *rest.Config
	spawner *spawner

	mu        sync.Mutex
	processes []*process
	state     State
	stopOnce  sync.Once
	stopErr   error
}

// Start brings up etcd, kube-apiserver, kube-controller-manager, kwok and, if asked, the stock
// kube-scheduler, and returns once all of them answer their health checks and the default
// service account exists (pods can be created). On failure everything already started is
// stopped again. ctx bounds the start only; the cluster runs until Stop or until the calling
// process dies.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	binDir, err := resolveBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	need := []string{binEtcd, binAPIServer, binControllerManager, binKwok}
	if cfg.StockScheduler {
		need = append(need, binScheduler)
	}
	if err := checkBinaries(binDir, need...); err != nil {
		return nil, err
	}
	if cfg.APIServerPort != 0 {
		if err := checkPortFree(cfg.APIServerPort, "kube-apiserver"); err != nil {
			return nil, err
		}
	}
	if cfg.WorkDir == "" {
		sweepStale(ctx, tempBase())
	}
	// A free port can be taken by someone else between our probe and the component's bind;
	// that race is retried with fresh ports, any other failure is returned.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg, binDir)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errPortRace) || attempt == attempts || cfg.APIServerPort != 0 {
			return nil, err
		}
		klog.FromContext(ctx).Info("A port was taken while the cluster started; retrying with new ports", "attempt", attempt, "err", err)
	}
}

// errPortRace marks a start that failed because a component could not bind its port.
var errPortRace = fmt.Errorf("%w (taken after it was chosen)", ErrPortInUse)

func start(ctx context.Context, cfg Config, binDir string) (_ *Cluster, err error) {
	logger := klog.FromContext(ctx).WithValues("cluster", cfg.Name)
	ctx = klog.NewContext(ctx, logger)
	began := time.Now()

	c := &Cluster{cfg: cfg, binDir: binDir}
	if err := c.makeWorkDir(); err != nil {
		return nil, err
	}
	c.spawner = newSpawner()
	defer func() {
		if err != nil {
			if stopErr := c.Stop(); stopErr != nil {
				logger.Error(stopErr, "Stopping the cluster after a failed start")
			}
		}
	}()
	ownerStart, _ := procStartTime(os.Getpid())
	c.state = State{Name: cfg.Name, OwnerPID: os.Getpid(), OwnerStartTime: ownerStart, WorkDir: c.workDir}
	if err := writeState(&c.state); err != nil {
		return nil, err
	}
	if err := checkFreeDisk(c.workDir, cfg.MinFreeDiskBytes); err != nil {
		return nil, err
	}

	pp, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	c.ports = ports{etcdClient: pp[0], etcdPeer: pp[1], apiServer: pp[2], controllerManager: pp[3], scheduler: pp[4], kwok: pp[5]}
	if cfg.APIServerPort != 0 {
		c.ports.apiServer = cfg.APIServerPort
	}
	server := "https://" + loopback + ":" + strconv.Itoa(c.ports.apiServer)
	ids := []identity{idAdmin, idControllerManager, idScheduler, idKwok}
	var extraIPs []net.IP
	if n := cfg.RealNode; n != nil {
		ids = append(ids, idKubelet(n.Name), idKubeProxy, idKubeletClient)
		extraIPs = append(extraIPs, net.ParseIP(n.Address))
	}
	c.pki, err = writePKI(filepath.Join(c.workDir, "pki"), server, extraIPs, ids...)
	if err != nil {
		return nil, err
	}
	c.restCfg, err = clientcmd.BuildConfigFromFlags("", c.pki.kubeconfig(idAdmin))
	if err != nil {
		return nil, fmt.Errorf("loading admin kubeconfig of cluster %s: %w", cfg.Name, err)
	}
	c.restCfg.QPS, c.restCfg.Burst = 1000, 2000
	c.state.Kubeconfig = c.Kubeconfig()
	c.state.Server = server

	etcd, err := c.startComponent(ComponentEtcd, binEtcd, c.etcdArgs())
	if err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx, etcd, "http://"+loopback+":"+strconv.Itoa(c.ports.etcdClient)+"/health"); err != nil {
		return nil, err
	}
	apiserver, err := c.startComponent(ComponentAPIServer, binAPIServer, c.apiServerArgs())
	if err != nil {
		return nil, err
	}
	if err := c.waitAPIServer(ctx, apiserver); err != nil {
		return nil, err
	}
	logger.V(1).Info("kube-apiserver ready", "after", time.Since(began))

	kcm, err := c.startComponent(ComponentControllerManager, binControllerManager, c.controllerManagerArgs())
	if err != nil {
		return nil, err
	}
	kwokArgs, err := c.kwokArgs()
	if err != nil {
		return nil, err
	}
	kwok, err := c.startComponent(ComponentKwok, binKwok, kwokArgs)
	if err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx, kcm, "https://"+loopback+":"+strconv.Itoa(c.ports.controllerManager)+"/healthz"); err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx, kwok, "http://"+loopback+":"+strconv.Itoa(c.ports.kwok)+"/healthz"); err != nil {
		return nil, err
	}
	if cfg.StockScheduler {
		if err := c.StartStockScheduler(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.waitDefaultServiceAccount(ctx, kcm); err != nil {
		return nil, err
	}

	c.mu.Lock()
	c.state.Ready = true
	err = writeState(&c.state)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	logger.Info("Cluster ready", "server", server, "kubeconfig", c.Kubeconfig(), "after", time.Since(began).Round(time.Millisecond))
	return c, nil
}

func (c *Cluster) makeWorkDir() error {
	if c.cfg.WorkDir == "" {
		dir, err := os.MkdirTemp(tempBase(), tempDirPrefix+c.cfg.Name+"-")
		if err != nil {
			return fmt.Errorf("creating work dir for cluster %s: %w", c.cfg.Name, err)
		}
		c.workDir, c.ownDir = dir, true
	} else {
		if err := os.MkdirAll(c.cfg.WorkDir, 0o700); err != nil {
			return fmt.Errorf("creating work dir %s for cluster %s: %w", c.cfg.WorkDir, c.cfg.Name, err)
		}
		c.workDir = c.cfg.WorkDir
	}
	return os.MkdirAll(filepath.Join(c.workDir, "logs"), 0o700)
}

// startComponent starts one binary from BinDir (see launch).
func (c *Cluster) startComponent(name, binary string, args []string) (*process, error) {
	return c.launch(name, filepath.Join(c.binDir, binary), args, nil)
}

// launch starts a process under the cluster's management and records it in the state file at
// once, so that even a start interrupted half-way can be cleaned up by PID. HOME points at the
// work dir, which keeps tools from reading or writing the user's ~/.kube or ~/.kwok.
func (c *Cluster) launch(name, path string, args, env []string) (*process, error) {
	env = append([]string{"HOME=" + c.workDir}, env...)
	p, err := startProcess(c.spawner, name, path, args, env, c.workDir,
		filepath.Join(c.workDir, "logs", name+".log"))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.cfg.Name, err)
	}
	klog.Background().V(2).Info("Started process", "cluster", c.cfg.Name, "name", name, "pid", p.pid)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.processes = append(c.processes, p)
	c.state.Processes = append(c.state.Processes, ProcessRecord{Name: name, PID: p.pid, StartTime: p.startTime, Log: p.logPath})
	if err := writeState(&c.state); err != nil {
		return p, err
	}
	return p, nil
}

// failed turns a component that exited during start into an error with its log tail. A failure
// to bind is errPortRace so Start can retry with other ports.
func (c *Cluster) failed(p *process) error {
	err := p.exitError()
	if logSaysPortInUse(tailFile(p.logPath, 200)) {
		return fmt.Errorf("cluster %s: %w: %w", c.cfg.Name, errPortRace, err)
	}
	return fmt.Errorf("cluster %s: %w", c.cfg.Name, err)
}

// poll calls cond until it is true, the component exits, or ReadyTimeout passes.
func (c *Cluster) poll(ctx context.Context, p *process, what string, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, c.cfg.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if p != nil && !p.running() {
			return false, errExited
		}
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err == nil {
		return nil
	}
	if p != nil && !p.running() {
		return c.failed(p)
	}
	msg := fmt.Sprintf("cluster %s: %s not ready after %s (last error: %v)", c.cfg.Name, what, c.cfg.ReadyTimeout, last)
	if p != nil {
		msg += fmt.Sprintf("; last lines of %s:\n%s", p.logPath, tailFile(p.logPath, 30))
	}
	return fmt.Errorf("%s: %w", msg, err)
}

var errExited = errors.New("component exited")

// healthClient probes loopback health endpoints. Certificate checks are skipped: kcm, the
// scheduler and kwok serve self-signed certificates they generate, and /healthz carries nothing
// secret; the apiserver itself is always reached with its verified CA.
var healthClient = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe only
}

func (c *Cluster) waitHealthy(ctx context.Context, p *process, url string) error {
	return c.poll(ctx, p, p.name+" ("+url+")", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := healthClient.Do(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", url, resp.Status)
		}
		return true, nil
	})
}

func (c *Cluster) waitAPIServer(ctx context.Context, p *process) error {
	cs, err := kubernetes.NewForConfig(c.restCfg)
	if err != nil {
		return fmt.Errorf("cluster %s: creating client: %w", c.cfg.Name, err)
	}
	return c.poll(ctx, p, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Timeout(2 * time.Second).DoRaw(ctx)
		return err == nil, err
	})
}

// waitDefaultServiceAccount waits until kube-controller-manager has created the "default"
// service account in "default": until then the ServiceAccount admission plugin rejects pods.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, kcm *process) error {
	cs, err := kubernetes.NewForConfig(c.restCfg)
	if err != nil {
		return fmt.Errorf("cluster %s: creating client: %w", c.cfg.Name, err)
	}
	return c.poll(ctx, kcm, "service account default/default", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// StartStockScheduler starts the unmodified kube-scheduler (it serves pods whose schedulerName
// is default-scheduler) if it is not running yet. Start calls it when Config.StockScheduler is set.
func (c *Cluster) StartStockScheduler(ctx context.Context) error {
	c.mu.Lock()
	for _, p := range c.processes {
		if p.name == ComponentScheduler && p.running() {
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Unlock()
	if err := checkBinaries(c.binDir, binScheduler); err != nil {
		return err
	}
	args, err := c.schedulerArgs()
	if err != nil {
		return err
	}
	p, err := c.startComponent(ComponentScheduler, binScheduler, args)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, p, "https://"+loopback+":"+strconv.Itoa(c.ports.scheduler)+"/healthz")
}

// SchedulerURL is the stock kube-scheduler's secure serving address (https://127.0.0.1:port),
// empty when the cluster runs none.
func (c *Cluster) SchedulerURL() string {
	if c.ports.scheduler == 0 {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.processes {
		if p.name == ComponentScheduler && p.running() {
			return c.url("https", c.ports.scheduler)
		}
	}
	return ""
}

// RestartEtcdAndAPIServer stops kube-apiserver and etcd and starts them again with the same
// arguments, ports and data directory, waiting for each as Start does; kube-controller-manager
// and kwok stay and reconnect. The simulator does this between two runs on one control plane,
// so that the second run's peak memory is that of processes that served it alone: a Go heap
// hands freed memory back to the kernel only gradually, and the first run's apiserver kept
// hundreds of MiB more resident than a fresh one. Not for an attached cluster.
func (c *Cluster) RestartEtcdAndAPIServer(ctx context.Context) error {
	if c.Attached() {
		return fmt.Errorf("cluster %s: attached, its components are not ours to restart", c.cfg.Name)
	}
	slot := func(name string) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, p := range c.processes {
			if p.name == name {
				return i
			}
		}
		return -1
	}
	etcdAt, apiAt := slot(ComponentEtcd), slot(ComponentAPIServer)
	if etcdAt < 0 || apiAt < 0 {
		return fmt.Errorf("cluster %s: no etcd or kube-apiserver to restart", c.cfg.Name)
	}
	// Killed, not asked to stop: a terminated apiserver drains its watches for 10 s and more,
	// and neither keeps anything in memory that the restart should save (etcd's writes are
	// in the page cache, --unsafe-no-fsync or not).
	for _, i := range []int{apiAt, etcdAt} {
		c.mu.Lock()
		p := c.processes[i]
		c.mu.Unlock()
		if err := p.kill(); err != nil {
			return fmt.Errorf("cluster %s: %w", c.cfg.Name, err)
		}
	}
	etcd, err := c.relaunch(etcdAt, binEtcd, c.etcdArgs())
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, etcd, "http://"+loopback+":"+strconv.Itoa(c.ports.etcdClient)+"/health"); err != nil {
		return err
	}
	apiserver, err := c.relaunch(apiAt, binAPIServer, c.apiServerArgs())
	if err != nil {
		return err
	}
	return c.waitAPIServer(ctx, apiserver)
}

// relaunch starts the component of slot i again in the same slot (so that Stop keeps the
// start order), appending to its log.
func (c *Cluster) relaunch(i int, binary string, args []string) (*process, error) {
	c.mu.Lock()
	name := c.processes[i].name
	c.mu.Unlock()
	p, err := startProcess(c.spawner, name, filepath.Join(c.binDir, binary), args, []string{"HOME=" + c.workDir}, c.workDir,
		filepath.Join(c.workDir, "logs", name+".log"))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.cfg.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.processes[i] = p
	c.state.Processes[i] = ProcessRecord{Name: name, PID: p.pid, StartTime: p.startTime, Log: p.logPath}
	return p, writeState(&c.state)
}

// ProcessMark is how many processes have been started under the cluster so far (components and
// StartProcess's): StopSince(mark) ends the ones started after it.
func (c *Cluster) ProcessMark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.processes)
}

// StopSince ends, newest first, the processes started after mark (ProcessMark) and leaves the
// rest running: one simulated run's scheduler, webhook and controller on a control plane that
// the next run reuses. They stay listed in Processes, no longer Running.
func (c *Cluster) StopSince(mark int) error {
	c.mu.Lock()
	procs := append([]*process(nil), c.processes[min(mark, len(c.processes)):]...)
	c.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(stopGrace); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Kubeconfig is the path of a kubeconfig with cluster-admin rights (group system:masters).
func (c *Cluster) Kubeconfig() string { return c.pki.kubeconfig(idAdmin) }

// KubeletKubeconfig is the kubeconfig of Config.RealNode's kubelet (system:node:<name>); empty
// without a real node.
func (c *Cluster) KubeletKubeconfig() string {
	if c.cfg.RealNode == nil {
		return ""
	}
	return c.pki.kubeconfig(idKubelet(c.cfg.RealNode.Name))
}

// KubeProxyKubeconfig is the kubeconfig of Config.RealNode's kube-proxy (system:kube-proxy);
// empty without a real node.
func (c *Cluster) KubeProxyKubeconfig() string {
	if c.cfg.RealNode == nil {
		return ""
	}
	return c.pki.kubeconfig(idKubeProxy)
}

// CACert is the path of the cluster CA's certificate (PEM): the one the kubelet checks client
// certificates against.
func (c *Cluster) CACert() string { return c.pki.caCert }

// RESTConfig returns a copy of the admin client configuration, with QPS 1000 and burst 2000.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restCfg) }

// Server is the apiserver's URL, https://127.0.0.1:<port>.
func (c *Cluster) Server() string { return c.state.Server }

// Name is the cluster's name from its Config.
func (c *Cluster) Name() string { return c.cfg.Name }

// WorkDir is where the cluster keeps its files; Stop removes it unless Config.KeepWorkDir.
func (c *Cluster) WorkDir() string { return c.workDir }

// LogPath is the log file of a component (ComponentAPIServer, ...).
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.workDir, "logs", component+".log")
}

// ProcessInfo describes one running component.
type ProcessInfo struct {
	Name     string
	PID      int
	Running  bool
	RSSBytes int64
	// CPUSeconds is the CPU time (user + system) the process has used since it started.
	CPUSeconds float64
	Log        string
}

// Processes lists the components in start order with their PIDs, current resident memory and
// CPU time used.
func (c *Cluster) Processes() []ProcessInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ProcessInfo, 0, len(c.processes))
	for _, p := range c.processes {
		info := ProcessInfo{Name: p.name, PID: p.pid, Running: p.running(), Log: p.logPath}
		if info.Running {
			info.RSSBytes, _ = rssBytes(p.pid)
			info.CPUSeconds, _ = cpuSeconds(p.pid)
		}
		out = append(out, info)
	}
	return out
}

// Stop ends every component by its PID, newest first (so kwok and the controllers go before the
// apiserver, and the apiserver before etcd), and removes the work directory unless
// Config.KeepWorkDir. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		procs := append([]*process(nil), c.processes...)
		c.mu.Unlock()
		var errs []error
		for i := len(procs) - 1; i >= 0; i-- {
			if err := procs[i].stop(stopGrace); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: %w", c.cfg.Name, err))
			}
		}
		if c.spawner != nil && len(errs) == 0 {
			// Only once every child is gone: ending the thread fires their parent-death signal.
			c.spawner.close()
		}
		if len(errs) == 0 && !c.cfg.KeepWorkDir && c.workDir != "" {
			if err := os.RemoveAll(c.workDir); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: removing work dir %s: %w", c.cfg.Name, c.workDir, err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}
