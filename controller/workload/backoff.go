package workload

import "time"

// MaxBackoff caps one wait between retries, jitter included.
const MaxBackoff = 5 * time.Minute

// maxJitter is the largest share of the wait added as jitter, so that the pods of many
// workloads that failed together (a node lost, a GPU gone bad) do not all come back at once.
const maxJitter = 0.10

// Backoff is the wait before retry n (counted from 0) of a workload whose first wait is base:
// base·2ⁿ, plus jitter·10 % of that (jitter is drawn from [0, 1)), never more than MaxBackoff.
// It is pure: the caller draws the jitter, so tests can pin it.
func Backoff(base time.Duration, n int32, jitter float64) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := int32(0); i < n && d < MaxBackoff; i++ {
		d *= 2
	}
	if jitter < 0 {
		jitter = 0
	}
	if jitter >= 1 {
		jitter = 1
	}
	d += time.Duration(float64(d) * maxJitter * jitter)
	return min(d, MaxBackoff)
}

// RetryAt is when retry n is due, for a failure seen at now.
func RetryAt(now time.Time, base time.Duration, n int32, jitter float64) time.Time {
	return now.Add(Backoff(base, n, jitter))
}

// RetryDue reports whether a retry set for at is due at now, and if not, how long is left.
func RetryDue(now, at time.Time) (bool, time.Duration) {
	if !now.Before(at) {
		return true, 0
	}
	return false, at.Sub(now)
}
