// Package profile takes CPU profiles of the simulator's processes while a workload runs (the
// kube-apiserver's and the schedulers' /debug/pprof/profile, and gpu-sim's own, which hosts
// the agent fleet) and splits each process's CPU time by cause: admission, writes by kind,
// watches, the scheduler's Filter and Score, and so on. When the workload ends it also takes
// one heap profile of each (heap-<process>.pprof), which says what the memory the run's
// peak RSS counts is made of. The CPU time itself comes from
// /proc; a profile only says how it divides, which keeps the figures honest when profiles miss
// the last seconds of a run.
package profile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Target is a process serving /debug/pprof/ over HTTPS.
type Target struct {
	// Process is the process's name, as the run's CPU figures name it.
	Process string
	// URL is its base URL (https://127.0.0.1:port).
	URL string
}

// Collection is a running profile collection; Stop ends it.
type Collection struct {
	dir     string
	client  *http.Client
	targets []Target
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	self    *os.File

	mu    sync.Mutex
	files map[string][]string
	errs  []error
}

// Chunk is how long one remote profile lasts. The chunk running when the collection stops is
// lost, so it is kept short; a process's CPU split is the sum of its chunks.
const Chunk = 10 * time.Second

// SelfProcess names this process (gpu-sim) in the collection's files.
const SelfProcess = "gpu-sim"

// Start profiles the targets, one chunk after the other, and this process for the whole
// collection (unless it is already being profiled, e.g. by gpu-sim run --cpuprofile), writing
// <process>-<n>.pprof files into dir. auth is a client configuration whose credentials the
// targets accept (the cluster admin's); their serving certificates are not checked, as they
// are self-signed by the processes themselves.
func Start(ctx context.Context, dir string, auth *rest.Config, targets []Target) (*Collection, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating profile directory %s: %w", dir, err)
	}
	client, err := insecureClient(auth)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Collection{dir: dir, client: client, targets: targets, cancel: cancel, files: map[string][]string{}}
	for _, t := range targets {
		c.wg.Go(func() { c.loop(ctx, client, t) })
	}
	path := filepath.Join(dir, SelfProcess+"-0.pprof")
	if f, err := os.Create(path); err == nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			_ = os.Remove(path)
			klog.FromContext(ctx).Info("Not profiling gpu-sim itself", "err", err)
		} else {
			c.self = f
			c.files[SelfProcess] = []string{path}
		}
	}
	return c, nil
}

// Stop ends the collection and returns the CPU profile files by process, with the errors of
// chunks that failed (a chunk cut short by Stop is not one). Before that it writes one heap
// profile of each target and of gpu-sim (HeapFile), taken while the workload's objects still
// exist; a target that refuses is an error, not a lost run.
func (c *Collection) Stop() (map[string][]string, error) {
	c.heaps()
	c.cancel()
	c.wg.Wait()
	if c.self != nil {
		pprof.StopCPUProfile()
		_ = c.self.Close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.files {
		sort.Strings(f)
	}
	return c.files, errors.Join(c.errs...)
}

// HeapFile names the heap profile Stop writes for a process.
func HeapFile(process string) string { return "heap-" + process + ".pprof" }

// heaps writes the heap profiles, the targets' in parallel (each is a short request).
func (c *Collection) heaps() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, t := range c.targets {
		wg.Go(func() {
			if err := fetch(ctx, c.client, t.URL+"/debug/pprof/heap", filepath.Join(c.dir, HeapFile(t.Process))); err != nil {
				c.mu.Lock()
				c.errs = append(c.errs, fmt.Errorf("heap profile of %s: %w", t.Process, err))
				c.mu.Unlock()
			}
		})
	}
	if err := writeHeap(filepath.Join(c.dir, HeapFile(SelfProcess))); err != nil {
		c.mu.Lock()
		c.errs = append(c.errs, err)
		c.mu.Unlock()
	}
	wg.Wait()
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile of %s: %w", SelfProcess, err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile of %s: %w", SelfProcess, err)
	}
	return f.Close()
}

func (c *Collection) loop(ctx context.Context, client *http.Client, t Target) {
	for n := 0; ctx.Err() == nil; n++ {
		path := filepath.Join(c.dir, fmt.Sprintf("%s-%03d.pprof", t.Process, n))
		err := fetch(ctx, client, t.URL+"/debug/pprof/profile?seconds="+strconv.Itoa(int(Chunk/time.Second)), path)
		c.mu.Lock()
		switch {
		case err == nil:
			c.files[t.Process] = append(c.files[t.Process], path)
		case ctx.Err() == nil:
			c.errs = append(c.errs, fmt.Errorf("profile of %s: %w", t.Process, err))
		}
		c.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			// A process that refuses (profiling off, restarted) is asked again a chunk later,
			// not in a tight loop.
			select {
			case <-ctx.Done():
			case <-time.After(Chunk):
			}
		}
	}
}

func fetch(ctx context.Context, client *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return f.Close()
}

// insecureClient is an HTTP client with auth's client credentials that does not verify the
// server's certificate.
func insecureClient(auth *rest.Config) (*http.Client, error) {
	cfg := rest.CopyConfig(auth)
	cfg.TLSClientConfig.Insecure = true
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, ""
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client credentials for profiling: %w", err)
	}
	if tc == nil {
		tc = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback, self-signed
	}
	// A chunk takes Chunk plus the time to encode it.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: Chunk + time.Minute}, nil
}
