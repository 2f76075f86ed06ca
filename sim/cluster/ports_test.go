package cluster

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
)

func TestFreePortsAreDistinctAndBindable(t *testing.T) {
	ports, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || p > 65535 || seen[p] {
			t.Fatalf("bad or repeated port %d in %v", p, ports)
		}
		seen[p] = true
		if err := checkPortFree(p, "test"); err != nil {
			t.Errorf("port %d handed out but not free: %v", p, err)
		}
	}
}

func TestCheckPortFreeNamesTheConflict(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	err = checkPortFree(port, "kube-apiserver")
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("got %v, want ErrPortInUse", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(port)) || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("error %q should name the port and the component", err)
	}
}

func TestLogSaysPortInUse(t *testing.T) {
	if !logSaysPortInUse("listen tcp 127.0.0.1:6443: bind: address already in use") {
		t.Error("bind failure not recognised")
	}
	if logSaysPortInUse("Serving securely on 127.0.0.1:6443") {
		t.Error("normal log taken for a bind failure")
	}
}

func TestCheckFreeDisk(t *testing.T) {
	dir := t.TempDir()
	if err := checkFreeDisk(dir, 1); err != nil {
		t.Fatalf("1 byte should be free: %v", err)
	}
	err := checkFreeDisk(dir, 1<<62)
	if !errors.Is(err, ErrLowDisk) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("got %v, want ErrLowDisk naming %s", err, dir)
	}
}
