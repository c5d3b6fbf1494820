package keyrate

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the limiter the time: by default the system clock's monotonic
// reading, which no wall-clock step moves. A Clock with After(d) <-chan
// time.Time, as ManualClock has, wakes Wait itself when it is moved.
type Clock interface {
	Now() time.Time
}

// systemClock is the default Clock. The limiter recognises it and reads
// time.Since(base), which uses only the monotonic clock and is cheaper than
// time.Now followed by Sub.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// reading reads a limiter's clock as nanoseconds since base: the system
// clock through time.Since, a monotonic read; the coarse clock's cached
// instant, one atomic load; or the Clock given to WithClock.
type reading struct {
	clock     Clock
	base      time.Time    // instant 0 of the offsets the logs hold
	system    bool         // clock is the system clock: read time.Since(base)
	coarse    bool         // WithCoarseClock: read coarseNow
	coarseNow atomic.Int64 // the cached instant WithCoarseClock decides at

	coarseResolution time.Duration // WithCoarseClock's; 0: off
}

// start sets r to read c from base. Under a coarse resolution it starts, in
// wg, the goroutine that keeps coarseNow within resolution of the system
// clock until done is closed.
func (r *reading) start(c Clock, base time.Time, resolution time.Duration, done <-chan struct{}, wg *sync.WaitGroup) {
	r.clock, r.base = c, base
	_, r.system = c.(systemClock)
	if resolution <= 0 {
		return
	}
	r.coarseNow.Store(int64(time.Since(base)))
	r.coarse, r.coarseResolution = true, resolution
	wg.Go(func() {
		every(resolution, done, func() { r.coarseNow.Store(int64(time.Since(r.base))) })
	})
}

// now returns the clock's reading.
func (r *reading) now() int64 {
	switch {
	case r.coarse:
		return r.coarseNow.Load()
	case r.system:
		return int64(time.Since(r.base))
	default:
		return int64(r.clock.Now().Sub(r.base))
	}
}

// every calls f once per interval of real time until done is closed. The
// coarse clock and the janitor both run on it.
func every(interval time.Duration, done <-chan struct{}, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f()
		case <-done:
			return
		}
	}
}

// afterClock is a Clock that can wake a waiter itself (see Clock).
type afterClock interface {
	After(d time.Duration) <-chan time.Time
}

// afterAtClock is a clock that wakes a waiter at an absolute instant, as
// ManualClock does (and any clock that embeds one). Wait prefers it to
// After: a duration is relative to whenever the clock is read, and a clock
// moved between the decision and that read would wake the waiter late.
type afterAtClock interface {
	afterAt(t time.Time) <-chan time.Time
}

// ManualClock is a Clock that moves only when told to, safe for concurrent
// use: for tests, examples and simulations. It may move backwards; a key is
// still decided at the newest instant it has seen.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter
}

type manualWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewManualClock returns a ManualClock that reads start until moved.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start.Round(0)}
}

// Now returns the clock's instant.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d, which may be negative.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t, earlier or later.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(t.Round(0))
}

// After returns a channel that gets the clock's instant once it has moved d
// past now (at once for d <= 0).
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.afterLocked(c.now.Add(d))
}

// afterAt returns a channel that receives the clock's instant once the clock
// reads t or later; at once if it already does.
func (c *ManualClock) afterAt(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.afterLocked(t)
}

func (c *ManualClock) afterLocked(t time.Time) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if !c.now.Before(t) {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, manualWaiter{at: t, ch: ch})
	return ch
}

func (c *ManualClock) setLocked(t time.Time) {
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !t.Before(w.at) {
			w.ch <- t
			continue
		}
		kept = append(kept, w)
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}
