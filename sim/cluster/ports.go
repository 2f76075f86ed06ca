package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrPortInUse is returned when a port the cluster needs on 127.0.0.1 is taken.
var ErrPortInUse = errors.New("port in use")

// ErrLowDisk is returned when the work directory's file system has too little free space.
var ErrLowDisk = errors.New("too little free disk")

// loopback is the only address the cluster binds: the harness must never listen on 0.0.0.0.
const loopback = "127.0.0.1"

// freePorts returns n distinct free TCP ports on 127.0.0.1. All listeners are held until every
// port is chosen so the kernel cannot hand out one port twice; between closing them and the
// components binding there is a short window in which another process may take one, which Start
// detects (the component logs "address already in use") and answers by retrying with new ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return nil, fmt.Errorf("finding a free port on %s: %w", loopback, err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// checkPortFree fails with ErrPortInUse when port cannot be bound on 127.0.0.1.
func checkPortFree(port int, what string) error {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%w: %s port %d on %s cannot be bound (%w): stop what holds it (another cluster? see \"gpu-sim cluster status\") or choose another port, 0 for a free one",
			ErrPortInUse, what, port, loopback, err)
	}
	return l.Close()
}

// logSaysPortInUse reports whether a component's log shows it failed to bind its port.
func logSaysPortInUse(log string) bool {
	return strings.Contains(log, "address already in use")
}

// checkFreeDisk fails with ErrLowDisk when dir's file system has less than minFree bytes free.
func checkFreeDisk(dir string, minFree int64) error {
	if minFree <= 0 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("checking free disk in %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < minFree {
		return fmt.Errorf("%w: %s has %d MiB free, the control plane needs at least %d MiB for etcd data and logs: free some disk, or point TMPDIR (or Config.WorkDir) at a larger file system",
			ErrLowDisk, dir, free>>20, minFree>>20)
	}
	return nil
}

// tempBase is where clusters without a WorkDir live, one directory each.
func tempBase() string { return os.TempDir() }
