package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
)

// A fault posted to --mock-fault-address reaches the simulated GPU and pokes the agent; bad
// input is refused with the reason and changes nothing.
func TestServeMockFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := mock.New("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	if ret := srv.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	var pokes atomic.Int32
	addr, err := serveMockFaults(ctx, "127.0.0.1:0", srv, func() { pokes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	post := func(gpu, fault string) (int, string) {
		t.Helper()
		resp, err := http.PostForm("http://"+addr.String()+"/fault", url.Values{"gpu": {gpu}, "fault": {fault}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	lost := func(i int) bool {
		d, ret := srv.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return true
		}
		_, ret = d.GetUUID()
		return ret != nvml.SUCCESS
	}
	for _, bad := range [][2]string{{"x", "lost"}, {"2", "melted"}, {"99", "lost"}} {
		if code, body := post(bad[0], bad[1]); code != http.StatusBadRequest || body == "" {
			t.Errorf("gpu=%s fault=%s: %d %q, want 400 with a reason", bad[0], bad[1], code, body)
		}
	}
	if pokes.Load() != 0 || lost(2) {
		t.Fatalf("bad requests changed something: %d pokes, GPU 2 lost %v", pokes.Load(), lost(2))
	}
	if code, body := post("2", "lost"); code != http.StatusOK || !strings.Contains(body, "GPU 2") {
		t.Fatalf("gpu=2 fault=lost: %d %q", code, body)
	}
	if !lost(2) || lost(3) || pokes.Load() != 1 {
		t.Fatalf("after lost: GPU 2 lost %v, GPU 3 lost %v, %d pokes; want true, false, 1", lost(2), lost(3), pokes.Load())
	}
	if code, _ := post("2", "recover"); code != http.StatusOK || lost(2) {
		t.Fatalf("after recover: %d, GPU 2 lost %v", code, lost(2))
	}
}
