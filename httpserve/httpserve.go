// Package httpserve runs a binary's HTTP server for as long as its context lives: the node
// agent's probes and metrics, and the simulator's agent fleet's.
package httpserve

import (
	"context"
	"errors"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// shutdownGrace is how long requests in flight get once the context ends.
const shutdownGrace = 5 * time.Second

// Run serves srv (HTTPS when it has a TLS configuration) in the background until ctx ends,
// then shuts it down; a server that fails is logged.
func Run(ctx context.Context, srv *http.Server) {
	logger := klog.FromContext(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ListenAndServeTLS("", "")
		} else {
			err = srv.ListenAndServe()
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP server failed", "address", srv.Addr)
		}
	}()
}
