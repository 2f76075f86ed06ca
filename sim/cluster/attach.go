package cluster

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Attach returns a Cluster for a control plane that runs already (a kwokctl or kind cluster, or
// one from "gpu-sim cluster up"), reached through the current context of kubeconfig. It starts
// no component: only the processes the caller starts with StartProcess run under it, and Stop
// ends those and removes the work directory, never touching the cluster itself.
// StartStockScheduler is not available: the attached cluster brings its own scheduler.
func Attach(ctx context.Context, name, kubeconfig string) (*Cluster, error) {
	cfg := Config{Name: name}.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	raw, err := (&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}).Load()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	// One self-contained context (certificates inlined), so processes started in the work dir
	// read the same credentials whatever relative paths the original used.
	if err := clientcmdapi.MinifyConfig(raw); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	c := &Cluster{cfg: cfg}
	if cfg.WorkDir == "" {
		sweepStale(ctx, tempBase())
	}
	if err := c.makeWorkDir(); err != nil {
		return nil, err
	}
	c.pki = pki{dir: c.workDir}
	if err := clientcmd.WriteToFile(*raw, c.Kubeconfig()); err != nil {
		_ = os.RemoveAll(c.workDir)
		return nil, fmt.Errorf("writing %s: %w", c.Kubeconfig(), err)
	}
	c.restCfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		_ = os.RemoveAll(c.workDir)
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	c.restCfg.QPS, c.restCfg.Burst = 1000, 2000
	c.spawner = newSpawner()
	ownerStart, _ := procStartTime(os.Getpid())
	c.state = State{Name: name, OwnerPID: os.Getpid(), OwnerStartTime: ownerStart, WorkDir: c.workDir,
		Kubeconfig: c.Kubeconfig(), Server: c.restCfg.Host, Ready: true}
	if err := writeState(&c.state); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// Attached reports whether the cluster was attached (Attach) rather than started here.
func (c *Cluster) Attached() bool { return c.binDir == "" }
