package spread_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/agent/spread"
)

// A node's beat is fixed (the same node, the same jitter), at most a fifth early, and its
// first beat after a write comes within (0, interval]; from the second write on the interval
// alone sets it.
func TestBeat(t *testing.T) {
	const interval = 30 * time.Minute
	start := time.Unix(1e9, 0)
	for i := range 200 {
		node := fmt.Sprintf("node-%d", i)
		b := spread.New(node, interval, true)
		if b.Every() != spread.New(node, interval, true).Every() {
			t.Fatalf("%s: two beats of one node differ", node)
		}
		if b.Every() > interval || b.Every() < interval*4/5 {
			t.Fatalf("%s: interval %s outside [%s, %s]", node, b.Every(), interval*4/5, interval)
		}
		if got := b.Next(start); !got.Equal(start.Add(b.Every())) {
			t.Fatalf("%s: before any write, next beat at +%s, want +%s", node, got.Sub(start), b.Every())
		}
		b.Wrote(start)
		first := b.Next(start)
		if d := first.Sub(start); d <= 0 || d > interval {
			t.Fatalf("%s: first beat at +%s, want within (0, %s]", node, d, interval)
		}
		b.Wrote(first)
		if got := b.Next(first); !got.Equal(first.Add(b.Every())) {
			t.Fatalf("%s: after the first beat, next at +%s, want +%s", node, got.Sub(first), b.Every())
		}
	}
}

// Without SpreadFirst, the beat after the first write is a whole interval later.
func TestBeatUnspread(t *testing.T) {
	b := spread.New("n", time.Minute, false)
	start := time.Unix(1e9, 0)
	b.Wrote(start)
	if got := b.Next(start); !got.Equal(start.Add(b.Every())) {
		t.Fatalf("next beat at +%s, want +%s", got.Sub(start), b.Every())
	}
}
