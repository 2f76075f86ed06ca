package runner

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws one line: phase, or a bar of bound pods with rate and ETA. On a terminal it
// redraws in place; elsewhere (CI logs) it prints a line every ten seconds.
type progress struct {
	w     io.Writer
	mode  string
	tty   bool
	mu    sync.Mutex
	last  time.Time
	drawn bool
	// phases are the durations of the finished phases, cur the one under way.
	phases   []Phase
	cur      string
	curStart time.Time
}

// Phase is one step of a run and how long it took.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
}

// mark ends the phase under way and starts what ("" for none); it also times the phases that
// print no line (the workload).
func (p *progress) mark(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.cur != "" {
		p.phases = append(p.phases, Phase{Name: p.cur, Duration: now.Sub(p.curStart)})
	}
	p.cur, p.curStart = what, now
}

func newProgress(w io.Writer, mode string) *progress {
	p := &progress{w: w, mode: mode}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) phase(what string) {
	p.mark(what)
	if p.w == nil || what == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	fmt.Fprintf(p.w, "[%s] %s\n", p.mode, what)
}

func (p *progress) update(bound, created, total int, elapsed time.Duration) {
	if p.w == nil || total == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !p.tty && now.Sub(p.last) < 10*time.Second {
		return
	}
	p.last = now
	const width = 30
	done := min(bound*width/total, width)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(bound) / s
	}
	eta := "--"
	if rate > 0 && bound < total {
		eta = time.Duration(float64(total-bound) / rate * float64(time.Second)).Round(time.Second).String()
	} else if bound >= total {
		eta = "0s"
	}
	line := fmt.Sprintf("[%s] %s%s %d/%d bound, %d created, %.0f pods/s, %s elapsed, ETA %s",
		p.mode, strings.Repeat("#", done), strings.Repeat(".", width-done), bound, total, created, rate,
		elapsed.Round(time.Second), eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drawn = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
