// Package spread spreads a node's periodic writes (its GpuNodeStatus refresh, its liveness
// Lease renewals) over time, so that a fleet of agents started at once does not write in step.
// Beats in step would be a wave of writes, one per node, every interval, landing on whatever
// the cluster is doing at that moment, and on 5,000 nodes a burst the apiserver notices.
package spread

import (
	"hash/fnv"
	"time"
)

// Beat is one node's periodic beat. Each node beats a little earlier than the interval (up to
// 20%, fixed per node); with SpreadFirst, the first beat after the start comes after a fraction
// of the interval fixed per node, anywhere in (0, interval], instead of a whole interval after
// the first write. Agents started together (a DaemonSet rollout, the simulator's fleet) then
// beat spread over the whole interval from their second beat on, as agents started at
// different times do, rather than all within its last fifth.
type Beat struct {
	interval time.Duration
	every    time.Duration
	// firstFrac is the fraction of interval after the first write at which the next beat comes;
	// zero once that write is done, or when not spread.
	firstFrac float64
	// first is when that beat is due, set by the first write; zero once it is written.
	first time.Time
}

// New makes node's beat for interval. The same node always gets the same jitter and the same
// first fraction, whatever the interval: a restarted agent keeps its place in the fleet.
func New(node string, interval time.Duration, spreadFirst bool) *Beat {
	h := fnv.New32a()
	h.Write([]byte(node))
	sum := h.Sum32()
	early := time.Duration(float64(interval) * 0.2 * float64(sum%1000) / 1000)
	b := &Beat{interval: interval, every: interval - early}
	if spreadFirst {
		// Another part of the hash than the one for early, so the two are independent.
		b.firstFrac = float64((sum/1000)%1000+1) / 1000
	}
	return b
}

// Every is this node's interval, after its fixed jitter.
func (b *Beat) Every() time.Duration { return b.every }

// Next is when the beat after one written at last is due: Every later, or the spread first
// beat if that is not written yet and comes sooner.
func (b *Beat) Next(last time.Time) time.Time {
	due := last.Add(b.every)
	if !b.first.IsZero() && b.first.Before(due) {
		return b.first
	}
	return due
}

// Wrote records a write at now. The write after the first one is the spread beat (or came
// before it): from then on the interval alone sets the beat.
func (b *Beat) Wrote(now time.Time) {
	b.first = time.Time{}
	if b.firstFrac > 0 {
		b.first = now.Add(time.Duration(float64(b.interval) * b.firstFrac))
		b.firstFrac = 0
	}
}
