// Package cluster brings up a real Kubernetes control plane on loopback for the simulator, the
// acceptance scenarios and the integration tests: etcd, kube-apiserver (real TLS, RBAC),
// kube-controller-manager, kwok playing the kubelets of fake GPU nodes, and optionally the stock
// kube-scheduler. The binaries are built from the Go module proxy by `make tools` into
// _output/bin.
//
// Usage:
//
//	c, err := cluster.Start(ctx, cluster.Config{StockScheduler: true})
//	defer c.Stop()
//	err = c.CreateNodePool(ctx, cluster.NodePool{Name: "a100", Count: 200, GPUsPerNode: 8, Topology: "dgx-a100"})
//	err = c.WaitNodesReady(ctx, cluster.PoolSelector("a100"), 200, time.Minute)
//	cs, err := kubernetes.NewForConfig(c.RESTConfig())
//
// # Why the processes are driven here and not through kwokctl
//
// kwokctl's binary runtime could start the same processes, but this package runs them itself
// because it needs things kwokctl does not give a library caller: every child is started with a
// parent-death signal from one locked OS thread and in its own process group, so a crashed test
// binary leaves no orphans; ports are chosen per cluster so two test packages run side by side;
// the stages are ours (per-pod durations from an annotation, long node leases) and are passed to
// kwok as files without kwokctl's kustomize layer; readiness failures come back as Go errors
// carrying the tail of the failing component's log; and kwokctl would add a second state
// directory (~/.kwok) and a second process tree to keep consistent with ours.
package cluster
