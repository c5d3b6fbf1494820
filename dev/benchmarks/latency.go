package benchmarks

import (
	"fmt"
	"time"
)

// Histogram counts durations in buckets of 1ns below 1µs, 1µs below 1ms and
// 1ms above, so that percentiles keep three significant digits or better
// without storing every sample.
type Histogram struct {
	ns, us, ms [1000]int64
	over       int64 // 1s or more
	n          int64
	max        time.Duration
}

// Add records one duration.
func (h *Histogram) Add(d time.Duration) {
	h.n++
	h.max = max(h.max, d)
	switch {
	case d < 0:
		h.ns[0]++
	case d < time.Microsecond:
		h.ns[d]++
	case d < time.Millisecond:
		h.us[d/time.Microsecond]++
	case d < time.Second:
		h.ms[d/time.Millisecond]++
	default:
		h.over++
	}
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() int64 { return h.n }

// Max returns the longest duration recorded.
func (h *Histogram) Max() time.Duration { return h.max }

// AtLeast returns how many recorded durations were d or longer, for d a
// whole number of milliseconds (the coarsest bucket).
func (h *Histogram) AtLeast(d time.Duration) int64 {
	n := h.over
	for i := int(d / time.Millisecond); i < len(h.ms); i++ {
		n += h.ms[i]
	}
	return n
}

// Quantile returns the upper edge of the bucket holding the q-th quantile
// (0 < q <= 1), or 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	seen := int64(0)
	scales := []struct {
		b    *[1000]int64
		unit time.Duration
	}{{&h.ns, time.Nanosecond}, {&h.us, time.Microsecond}, {&h.ms, time.Millisecond}}
	for _, s := range scales {
		for i, c := range s.b {
			if seen += c; seen >= rank {
				return time.Duration(i+1) * s.unit
			}
		}
	}
	return h.max
}

// SweepLatency is what one caller saw while a sweep ran.
type SweepLatency struct {
	Calls                      int64
	P50, P99, P999, P9999, Max time.Duration
	// Over1ms counts calls that took a millisecond or more.
	Over1ms int64
	// KeysLeft is how many keys the limiter still tracked at the end, where
	// it can tell (keyrate); -1 otherwise.
	KeysLeft int
}

// Sweep latency setup: SweepKeys idle keys, a window of SweepWindow, a
// sweeper every SweepEvery, and a caller timed for SweepMeasure from the
// moment the keys are in.
const (
	SweepKeys    = 1_000_000
	SweepWindow  = time.Second
	SweepEvery   = 4 * time.Second
	SweepMeasure = 6 * time.Second
)

// LatencyDuringSweep fills a fresh limiter with SweepKeys keys (one event
// each), then times Allow on one other key, one call after another, for
// SweepMeasure. The keys go idle one window after they were filled and the
// limiter's sweeper (every SweepEvery since its creation) finds all of them
// idle during the measurement; a limiter that sweeps only on its callers'
// path (httprate) does so when a new window begins. Each timed call includes
// two clock reads (about 2x the floor's time-now).
func LatencyDuringSweep(p Peer) (SweepLatency, error) {
	l, err := p.New(Config{Limit: 100, Window: SweepWindow, Sweep: SweepEvery})
	if err != nil {
		return SweepLatency{}, err
	}
	defer l.Close()
	created := time.Now()
	for _, k := range Keys(SweepKeys) {
		l.Allow(k)
	}
	if filled := time.Since(created); filled > SweepEvery-SweepWindow {
		return SweepLatency{}, fmt.Errorf("%s: filling %d keys took %v, past the first sweep", p.Name, SweepKeys, filled)
	}
	var h Histogram
	key := "caller"
	end := time.Now().Add(SweepMeasure)
	for {
		t0 := time.Now()
		l.Allow(key)
		t1 := time.Now()
		h.Add(t1.Sub(t0))
		if t1.After(end) {
			break
		}
	}
	res := SweepLatency{
		Calls: h.Count(), P50: h.Quantile(0.5), P99: h.Quantile(0.99), P999: h.Quantile(0.999), P9999: h.Quantile(0.9999),
		Max: h.Max(), Over1ms: h.AtLeast(time.Millisecond),
		KeysLeft: -1,
	}
	if k, ok := l.(interface{ Len() int }); ok {
		res.KeysLeft = k.Len()
	}
	return res, nil
}
