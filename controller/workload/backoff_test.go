package workload

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		name   string
		base   time.Duration
		n      int32
		jitter float64
		want   time.Duration
	}{
		{"first retry, no jitter", 10 * time.Second, 0, 0, 10 * time.Second},
		{"doubles", 10 * time.Second, 1, 0, 20 * time.Second},
		{"doubles again", 10 * time.Second, 3, 0, 80 * time.Second},
		{"half the jitter is 5 %", 10 * time.Second, 0, 0.5, 10500 * time.Millisecond},
		{"most jitter is under 10 %", 10 * time.Second, 2, 0.999, 40*time.Second + 3996*time.Millisecond},
		{"jitter above 1 counts as 10 %", 10 * time.Second, 0, 7, 11 * time.Second},
		{"negative jitter counts as none", 10 * time.Second, 0, -1, 10 * time.Second},
		{"capped at 5 minutes", 10 * time.Second, 5, 0, 5 * time.Minute},
		{"the cap holds with jitter", 160 * time.Second, 0, 0, 160 * time.Second},
		{"jitter does not pass the cap", 280 * time.Second, 0, 0.9, 5 * time.Minute},
		{"a huge retry count neither overflows nor passes the cap", time.Second, 1 << 30, 0.5, 5 * time.Minute},
		{"one second base", time.Second, 2, 0, 4 * time.Second},
		{"no base, no wait", 0, 4, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Backoff(tt.base, tt.n, tt.jitter); got != tt.want {
				t.Fatalf("Backoff(%s, %d, %g) = %s, want %s", tt.base, tt.n, tt.jitter, got, tt.want)
			}
		})
	}
}

// TestRetryOnFakeClock walks a workload's retries on a fake clock: each retry is due exactly
// when its backoff has passed, not a moment before.
func TestRetryOnFakeClock(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	base := 2 * time.Second
	jitters := []float64{0, 0.5, 0.25, 0.999}
	wantWaits := []time.Duration{2 * time.Second, 4200 * time.Millisecond, 8200 * time.Millisecond, 16*time.Second + 1598400*time.Microsecond}
	for n, j := range jitters {
		at := RetryAt(clk.Now(), base, int32(n), j)
		if got := at.Sub(clk.Now()); got != wantWaits[n] {
			t.Fatalf("retry %d: wait %s, want %s", n, got, wantWaits[n])
		}
		clk.Step(wantWaits[n] - time.Millisecond)
		if due, left := RetryDue(clk.Now(), at); due || left != time.Millisecond {
			t.Fatalf("retry %d: due=%v left=%s a millisecond early, want not due with 1ms left", n, due, left)
		}
		clk.Step(time.Millisecond)
		if due, left := RetryDue(clk.Now(), at); !due || left != 0 {
			t.Fatalf("retry %d: due=%v left=%s on time, want due", n, due, left)
		}
	}
	if got, want := clk.Now().Sub(start), 30*time.Second+1998400*time.Microsecond; got != want {
		t.Fatalf("the four retries took %s, want %s", got, want)
	}
}
