package profile

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/rest"
)

// Stop leaves one heap profile per target and one of gpu-sim itself; a target that refuses
// its heap profile is named in Stop's error.
func TestStopWritesHeapProfiles(t *testing.T) {
	serve := func(heap int) *httptest.Server {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // a chunk that Stop cuts short
		})
		mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(heap)
			_, _ = w.Write([]byte("heap of " + http.StatusText(heap)))
		})
		s := httptest.NewTLSServer(mux)
		t.Cleanup(s.Close)
		return s
	}
	good, bad := serve(http.StatusOK), serve(http.StatusForbidden)
	dir := t.TempDir()
	c, err := Start(context.Background(), dir, &rest.Config{Host: good.URL}, []Target{
		{Process: "kube-apiserver", URL: good.URL},
		{Process: "gpu-scheduler", URL: bad.URL},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stop()
	if err == nil || !strings.Contains(err.Error(), "heap profile of gpu-scheduler") {
		t.Errorf("Stop error = %v, want one naming the gpu-scheduler heap profile", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, HeapFile("kube-apiserver")))
	if err != nil || string(got) != "heap of OK" {
		t.Errorf("kube-apiserver heap file = %q, %v; want the target's heap profile", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, HeapFile("gpu-scheduler"))); err == nil {
		t.Error("a refused heap profile left a file")
	}
	f, err := os.Open(filepath.Join(dir, HeapFile(SelfProcess)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("gpu-sim's heap profile does not parse: %v", err)
	}
	if !slices.ContainsFunc(p.SampleType, func(v *profile.ValueType) bool { return v.Type == "inuse_space" }) {
		t.Errorf("gpu-sim's heap profile has no inuse_space samples: %v", p.SampleType)
	}
}
