package ledger

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"

	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// benchLedger is a 5,000-node ledger (the scale-5k cluster) with every third node half full.
func benchLedger(b *testing.B) (*Ledger, []string) {
	b.Helper()
	l := New()
	names := make([]string, 5000)
	now := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		l.SetStatus(ledgertest.SeedStatus(names[i], now))
		if i%3 == 0 {
			l.Add(types.UID(fmt.Sprintf("pod-%d", i)), names[i], []int{0, 1, 2, 3}, false, FromLease)
		}
	}
	return l, names
}

// PreFilter's scan: one pass over every node's summary per pod.
func BenchmarkLedgerCandidates5k(b *testing.B) {
	l, _ := benchLedger(b)
	req := allocator.Request{Count: 2, MinBandwidthGBps: 600}
	oldest := time.Now().Add(-time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		byFit, _ := l.Candidates(&req, oldest, func(string) bool { return true })
		if len(byFit[FitIslandBandwidth]) == 0 {
			b.Fatal("no candidates")
		}
		ReleaseCandidates(byFit)
	}
}

// Filter's work on one node: a placement on its current view.
func BenchmarkLedgerFilterNode(b *testing.B) {
	l, names := benchLedger(b)
	req := allocator.Request{Count: 2, MinBandwidthGBps: 600}
	b.ReportAllocs()
	key := RequestKey(&req)
	i := 0
	for b.Loop() {
		// Pod after pod over the same nodes, as in a burst: the placement cache answers.
		if _, _, err, _ := l.Place(names[i%len(names)], "pending-pod", key, req); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
