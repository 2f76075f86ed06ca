package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"sigs.k8s.io/yaml"
)

func (c *Cluster) url(scheme string, port int) string {
	return scheme + "://" + loopback + ":" + strconv.Itoa(port)
}

func (c *Cluster) etcdArgs() []string {
	peer := c.url("http", c.ports.etcdPeer)
	client := c.url("http", c.ports.etcdClient)
	return []string{
		"--name=" + c.cfg.Name,
		"--data-dir=" + filepath.Join(c.workDir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.cfg.Name + "=" + peer,
		"--initial-cluster-state=new",
		// The data dies with the cluster: fsync buys nothing and costs the apiserver write rate.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=" + strconv.FormatInt(8<<30, 10),
		"--log-level=warn",
	}
}

func (c *Cluster) apiServerArgs() []string {
	p := c.pki
	args := []string{
		"--bind-address=" + loopback,
		"--advertise-address=" + loopback,
		"--secure-port=" + strconv.Itoa(c.ports.apiServer),
		"--etcd-servers=" + c.url("http", c.ports.etcdClient),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.serviceAcctKy,
		"--service-account-signing-key-file=" + p.serviceAcctKy,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// No kubelets and one apiserver: the "kubernetes" endpoints need no reconciling.
		"--endpoint-reconciler-type=none",
		// Thousands of fake nodes and a scheduler binding at full speed from one machine: the
		// default in-flight limits (400/200) throttle that long before the CPU does.
		"--max-requests-inflight=3000",
		"--max-mutating-requests-inflight=1500",
		"--enable-priority-and-fairness=false",
		// A DeleteCollection (the simulator's teardown, a namespace or CRD going away) deletes
		// its items on this many workers inside the apiserver instead of one after another: the
		// default of 1 made one call for 10,000 pods outlast the request timeout. As many as
		// the 64 client workers that deleted pods by name before, which were no slower.
		"--delete-collection-workers=64",
		"--profiling=" + strconv.FormatBool(c.cfg.Profiling),
		"--cert-dir=" + filepath.Join(c.workDir, "pki", "apiserver-generated"),
	}
	if n := c.cfg.RealNode; n != nil {
		// Later flags win: these replace the loopback-only settings above.
		args = append(args,
			// Pods reach the apiserver through the "kubernetes" Service, whose endpoint is the
			// advertised address; host clients keep using 127.0.0.1.
			"--bind-address=0.0.0.0",
			"--advertise-address="+n.Address,
			"--endpoint-reconciler-type=lease",
			"--kubelet-client-certificate="+filepath.Join(p.dir, idKubeletClient.pair+".crt"),
			"--kubelet-client-key="+filepath.Join(p.dir, idKubeletClient.pair+".key"),
			// The node's Hostname (its name) resolves nowhere; its InternalIP is the address.
			"--kubelet-preferred-address-types=InternalIP,Hostname",
		)
	}
	return append(args, c.cfg.APIServerExtraArgs...)
}

func (c *Cluster) controllerManagerArgs() []string {
	qps := c.cfg.ControllerManagerQPS
	return []string{
		"--kubeconfig=" + c.pki.kubeconfig(idControllerManager),
		"--authentication-kubeconfig=" + c.pki.kubeconfig(idControllerManager),
		"--authorization-kubeconfig=" + c.pki.kubeconfig(idControllerManager),
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(c.ports.controllerManager),
		"--cert-dir=" + filepath.Join(c.workDir, "pki", "kcm-generated"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki.serviceAcctKy,
		"--root-ca-file=" + c.pki.caCert,
		"--controllers=*",
		"--kube-api-qps=" + strconv.Itoa(qps),
		"--kube-api-burst=" + strconv.Itoa(2*qps),
		// Matched to kwok's node lease (Config.NodeLeaseDuration): a node is NotReady only when
		// its lease has not been renewed for a minute past its duration.
		"--node-monitor-grace-period=" + c.cfg.nodeMonitorGracePeriod().String(),
		"--profiling=" + strconv.FormatBool(c.cfg.Profiling),
	}
}

func (c *Cluster) kwokArgs() ([]string, error) {
	files, err := writeKwokConfig(filepath.Join(c.workDir, "kwok"), uint(c.cfg.NodeLeaseDuration.Seconds()),
		loopback+":"+strconv.Itoa(c.ports.kwok))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.cfg.Name, err)
	}
	// kwok logs every lease renewal at INFO: at 5,000 nodes that is a stream of JSON lines for nothing.
	args := []string{"--kubeconfig=" + c.pki.kubeconfig(idKwok), "--v=WARN"}
	for _, f := range files {
		args = append(args, "--config="+f)
	}
	return args, nil
}

// schedulerConfig is the slice of KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1)
// the stock scheduler needs here.
type schedulerConfig struct {
	APIVersion       string `json:"apiVersion"`
	Kind             string `json:"kind"`
	ClientConnection struct {
		Kubeconfig string  `json:"kubeconfig"`
		QPS        float32 `json:"qps"`
		Burst      int32   `json:"burst"`
	} `json:"clientConnection"`
	LeaderElection struct {
		LeaderElect bool `json:"leaderElect"`
	} `json:"leaderElection"`
}

func (c *Cluster) schedulerArgs() ([]string, error) {
	var sc schedulerConfig
	sc.APIVersion = "kubescheduler.config.k8s.io/v1"
	sc.Kind = "KubeSchedulerConfiguration"
	sc.ClientConnection.Kubeconfig = c.pki.kubeconfig(idScheduler)
	sc.ClientConnection.QPS = float32(c.cfg.SchedulerQPS)
	sc.ClientConnection.Burst = int32(2 * c.cfg.SchedulerQPS)
	b, err := yaml.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: encoding scheduler configuration: %w", c.cfg.Name, err)
	}
	path := filepath.Join(c.workDir, "kube-scheduler.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("cluster %s: writing %s: %w", c.cfg.Name, path, err)
	}
	return []string{
		"--config=" + path,
		"--authentication-kubeconfig=" + c.pki.kubeconfig(idScheduler),
		"--authorization-kubeconfig=" + c.pki.kubeconfig(idScheduler),
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(c.ports.scheduler),
		"--cert-dir=" + filepath.Join(c.workDir, "pki", "scheduler-generated"),
		"--profiling=" + strconv.FormatBool(c.cfg.Profiling),
	}, nil
}
