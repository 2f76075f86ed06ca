package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
)

// serveMockFaults serves POST /fault?gpu=ID&fault=KIND for the simulated server of
// --mock-topology, and pokes the agent after each fault so that it looks at once: a test node
// (make e2e-node) makes a GPU unhealthy and healthy again through it, as the simulator does for
// its fleet.
func serveMockFaults(ctx context.Context, addr string, srv *mock.Server, poke func()) (net.Addr, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		gpu, err := strconv.Atoi(r.FormValue("gpu"))
		if err != nil {
			http.Error(w, fmt.Sprintf("gpu %q: want a GPU index", r.FormValue("gpu")), http.StatusBadRequest)
			return
		}
		fault, err := mock.ParseFault(r.FormValue("fault"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := srv.Inject(gpu, fault); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		poke()
		klog.FromContext(ctx).Info("Injected a fault into a simulated GPU", "gpu", gpu, "fault", fault.String())
		fmt.Fprintf(w, "injected %s into GPU %d\n", fault, gpu)
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--mock-fault-address %s: %w", addr, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving mock faults")
		}
	}()
	return lis.Addr(), nil
}
