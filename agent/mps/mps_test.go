package mps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeControl writes a stand-in for nvidia-cuda-mps-control: with -f it is the daemon (it
// records its arguments and environment, makes its control pipe and runs until a client says
// quit); without arguments it is the client (it reads one command on stdin and records it).
func fakeControl(t *testing.T) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls.log")
	bin = filepath.Join(dir, "nvidia-cuda-mps-control")
	script := `#!/bin/sh
log=` + log + `
if [ "$1" = "-f" ]; then
  echo "daemon $* CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY=$CUDA_MPS_LOG_DIRECTORY" >> "$log"
  echo $$ > "$CUDA_MPS_PIPE_DIRECTORY/pid"
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  while [ ! -e "$CUDA_MPS_PIPE_DIRECTORY/quit" ]; do sleep 0.02; done
  rm -f "$CUDA_MPS_PIPE_DIRECTORY/quit" "$CUDA_MPS_PIPE_DIRECTORY/control"
  exit 0
fi
read cmd
echo "client $* $cmd CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY" >> "$log"
if [ "$cmd" = quit ]; then touch "$CUDA_MPS_PIPE_DIRECTORY/quit"; fi
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// gaveUp says whether the daemon of uuid ended on its own (it failed).
func (m *Manager) gaveUp(uuid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.daemons[uuid]
	return d != nil && isClosed(d.done)
}

func readLog(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder records the compute-mode changes and events a Manager makes.
type recorder struct {
	mu     sync.Mutex
	modes  []string
	events []string
}

func (r *recorder) setMode(_ context.Context, uuid string, exclusive bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.modes = append(r.modes, fmt.Sprintf("%s=%v", uuid, exclusive))
	return nil
}

func (r *recorder) event(warning bool, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, reason+": "+msg)
}

func (r *recorder) got() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.modes), slices.Clone(r.events)
}

func newManager(t *testing.T, ctx context.Context, bin string, r *recorder) (*Manager, string) {
	root := filepath.Join(t.TempDir(), "mps")
	m := New(ctx, Config{Control: bin, Root: root, SetComputeMode: r.setMode, Event: r.event,
		StopGrace: time.Nanosecond, RestartBackoff: 10 * time.Millisecond, QuitTimeout: 5 * time.Second})
	return m, root
}

func TestEnsureRunsOneDaemonPerGPUAndSyncStopsIt(t *testing.T) {
	bin, log := fakeControl(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{}
	m, root := newManager(t, ctx, bin, r)

	c, err := m.Ensure(ctx, "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	want := Client{PipeDir: filepath.Join(root, "GPU-a", "pipe"), ShmDir: filepath.Join(root, "shm")}
	if c != want {
		t.Fatalf("Ensure = %+v, want %+v", c, want)
	}
	// A second Ensure of the same GPU starts nothing new.
	if _, err := m.Ensure(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(ctx, "GPU-b"); err != nil {
		t.Fatal(err)
	}
	lines := readLog(t, log)
	wantA := fmt.Sprintf("daemon -f CUDA_VISIBLE_DEVICES=GPU-a CUDA_MPS_PIPE_DIRECTORY=%s CUDA_MPS_LOG_DIRECTORY=%s", want.PipeDir, filepath.Join(root, "GPU-a", "log"))
	if len(lines) != 2 || lines[0] != wantA || !strings.HasPrefix(lines[1], "daemon -f CUDA_VISIBLE_DEVICES=GPU-b ") {
		t.Fatalf("daemons started: %q, want GPU-a's %q then GPU-b's", lines, wantA)
	}
	modes, _ := r.got()
	if !slices.Equal(modes, []string{"GPU-a=true", "GPU-b=true"}) {
		t.Fatalf("compute modes set %q, want both GPUs EXCLUSIVE_PROCESS", modes)
	}

	// GPU-a still has sharers, GPU-b none: only GPU-b's daemon is told to quit.
	m.Sync(ctx, map[string]bool{"GPU-a": true})
	eventually(t, "GPU-b's daemon to quit", func() bool {
		modes, _ := r.got()
		return slices.Contains(modes, "GPU-b=false")
	})
	if got := m.Running(); !slices.Equal(got, []string{"GPU-a"}) {
		t.Fatalf("running %q, want GPU-a only", got)
	}
	lines = readLog(t, log)
	wantQuit := "client  quit CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(root, "GPU-b", "pipe")
	if !slices.Contains(lines, wantQuit) {
		t.Fatalf("calls %q lack the quit on GPU-b's pipe %q", lines, wantQuit)
	}

	// Shutdown quits the rest and puts the GPUs back in the DEFAULT mode.
	cancel()
	m.Wait()
	modes, events := r.got()
	if !slices.Contains(modes, "GPU-a=false") {
		t.Fatalf("compute modes %q: GPU-a not put back to DEFAULT on shutdown", modes)
	}
	if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "MPSDaemonStarted: ") }) {
		t.Fatalf("events %q lack MPSDaemonStarted", events)
	}
}

func TestDeadDaemonIsStartedAgain(t *testing.T) {
	bin, log := fakeControl(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{}
	restarts := make(chan string, 4)
	root := filepath.Join(t.TempDir(), "mps")
	m := New(ctx, Config{Control: bin, Root: root, SetComputeMode: r.setMode, Event: r.event,
		RestartBackoff: 10 * time.Millisecond, OnRestart: func(uuid string) { restarts <- uuid }})
	c, err := m.Ensure(ctx, "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(c.PipeDir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case uuid := <-restarts:
		if uuid != "GPU-a" {
			t.Fatalf("restarted %q, want GPU-a", uuid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the killed daemon was not started again")
	}
	eventually(t, "the second daemon", func() bool { return len(readLog(t, log)) == 2 })
	// StopGrace (default) keeps the daemon Ensure just asked for although Sync sees no sharer.
	m.Sync(ctx, nil)
	if got := m.Running(); !slices.Equal(got, []string{"GPU-a"}) {
		t.Fatalf("running %q right after Ensure, want GPU-a kept for StopGrace", got)
	}
	_, events := r.got()
	if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "MPSDaemonRestarted: ") }) {
		t.Fatalf("events %q lack MPSDaemonRestarted", events)
	}
	cancel()
	m.Wait()
}

func TestMissingControlBinaryIsSaidOnceAndSharesAreAccountedOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{}
	m := New(ctx, Config{Control: filepath.Join(t.TempDir(), "nvidia-cuda-mps-control"), Event: r.event, SetComputeMode: r.setMode})
	if m.Available() {
		t.Fatal("Available with no binary")
	}
	for range 2 {
		c, err := m.Ensure(ctx, "GPU-a")
		if err != nil || c != (Client{}) {
			t.Fatalf("Ensure = %+v, %v; want no MPS and no error", c, err)
		}
	}
	modes, events := r.got()
	if len(modes) != 0 {
		t.Fatalf("compute modes changed without MPS: %q", modes)
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "MPSUnavailable: ") || !strings.Contains(events[0], "accounted only") {
		t.Fatalf("events %q, want one MPSUnavailable saying shares are accounted only", events)
	}
}

func TestDaemonThatNeverServesFailsEnsure(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'no GPU' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{}
	m := New(ctx, Config{Control: bin, Root: filepath.Join(dir, "mps"), Event: r.event, SetComputeMode: r.setMode})
	_, err := m.Ensure(ctx, "GPU-a")
	if err == nil || !strings.Contains(err.Error(), "exited before it served") {
		t.Fatalf("Ensure error %v, want the daemon's early exit", err)
	}
	if _, err := m.Ensure(ctx, "../x"); err == nil {
		t.Fatal("a UUID with a path separator was accepted")
	}
	cancel()
	m.Wait()
	if modes, _ := r.got(); !slices.Equal(modes, []string{"GPU-a=true", "GPU-a=false"}) {
		t.Fatalf("compute modes %q, want EXCLUSIVE_PROCESS then DEFAULT again", modes)
	}
}

// A daemon that runs but never makes its control pipe fails Ensure after StartTimeout and is
// killed, not left running; the next Ensure tries a new one.
func TestDaemonWithoutControlPipeIsGivenUp(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	script := "#!/bin/sh\n[ \"$1\" = -f ] || exit 0\necho started >> " + filepath.Join(dir, "starts") + "\nexec sleep 600\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{}
	m := New(ctx, Config{Control: bin, Root: filepath.Join(dir, "mps"), Event: r.event, StartTimeout: 200 * time.Millisecond})
	for i := range 2 {
		_, err := m.Ensure(ctx, "GPU-a")
		if err == nil || !strings.Contains(err.Error(), "made no control pipe") {
			t.Fatalf("Ensure %d: error %v, want no control pipe", i, err)
		}
		eventually(t, "the daemon given up", func() bool { return len(m.Running()) == 0 || m.gaveUp("GPU-a") })
	}
	if starts := readLog(t, filepath.Join(dir, "starts")); len(starts) != 2 {
		t.Fatalf("daemons started %d times, want 2 (one per Ensure)", len(starts))
	}
	cancel()
	m.Wait() // returns only if no daemon was left running
}
