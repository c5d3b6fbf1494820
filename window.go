// Package keyrate is a per-key rate limiter with an exact sliding window.
//
// A Limiter admits at most limit events per key in any window-length span of
// time: not approximately, and not per fixed calendar window. Where a fixed
// window of 10 per 10s lets 10 requests through at 00:09 and 10 more at 00:11
// (20 in two seconds), keyrate admits the first 10 and refuses the rest until
// 00:19, when the first of them leaves the window.
//
// It keeps, per key, the instants of the events it admitted in a ring buffer
// (at most limit of them, 8 bytes each) and decides each request with one
// comparison. Keys live in a concurrent map (xsync.MapOf) with lock-free
// lookups and a lock per key; a janitor goroutine evicts keys that have gone
// idle, and WithMaxKeys bounds the map against floods of new keys.
//
// Most callers use Allow, or Take when they need the numbers behind the
// answer (for RateLimit and Retry-After headers); Wait blocks until a request
// fits, for guarding outbound calls. Close the Limiter when done with it.
package keyrate

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Wait, WaitN and TakeContext once the Limiter has
// been closed, including to calls that were waiting when Close was called.
var ErrClosed = errors.New("keyrate: limiter closed")

// ErrExceedsLimit is returned by WaitN for a weight that can never be
// admitted: negative, or greater than the limit.
var ErrExceedsLimit = errors.New("keyrate: weight can never be admitted")

// Limiter is an exact sliding-window rate limiter over string keys. It is
// safe for concurrent use. Create one with New and Close it when done.
type Limiter struct {
	limit  int
	window int64 // nanoseconds
	keys   *keyMap

	clock     Clock
	base      time.Time    // instant 0 of the offsets the logs hold
	system    bool         // clock is the system clock: read time.Since(base)
	coarse    bool         // WithCoarseClock: read coarseNow
	coarseNow atomic.Int64 // the cached instant WithCoarseClock decides at

	beforeSleep func() // tests: runs between a refused Take in WaitN and its sleep

	closed     atomic.Bool
	done       chan struct{}
	closeOnce  sync.Once
	background sync.WaitGroup // the janitor and the coarse clock
}

// New returns a Limiter that admits at most limit events per key in any
// span of length window. limit must be at least 1 and window positive;
// otherwise, or for an invalid option, New returns an error wrapping
// ErrConfig that names the field.
func New(limit int, window time.Duration, opts ...Option) (*Limiter, error) {
	cfg, err := newConfig(limit, window, opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		limit:  limit,
		window: int64(window),
		clock:  cfg.clock,
		keys:   newKeyMap(cfg.maxKeys),
		done:   make(chan struct{}),
	}
	_, l.system = cfg.clock.(systemClock)
	l.base = cfg.clock.Now()
	if cfg.coarse > 0 {
		l.startCoarseClock(cfg.coarse)
	}
	if cfg.janitorInterval > 0 {
		l.startJanitor(cfg.janitorInterval)
	}
	return l, nil
}

// Limit returns the most events admitted per key in any window.
func (l *Limiter) Limit() int { return l.limit }

// Window returns the length of the sliding window.
func (l *Limiter) Window() time.Duration { return time.Duration(l.window) }

// Policies returns a copy of the policies the Limiter enforces, in the order
// they were given: for New, one policy with an empty name. Middleware reads
// it to advertise them when it has no Decision at hand.
func (l *Limiter) Policies() []Policy { return []Policy{l.policy()} }

// policy returns the Limiter's one policy.
func (l *Limiter) policy() Policy {
	return Policy{Limit: l.limit, Window: time.Duration(l.window)}
}

// Allow reports whether one event for key fits now, and records it if so.
func (l *Limiter) Allow(key string) bool { return l.AllowN(key, 1) }

// AllowN reports whether n events for key fit now, and records them if so.
// It answers as Take(key, n).Allowed does, without working out the rest of
// the Decision.
func (l *Limiter) AllowN(key string, n int) bool {
	if n < 1 || n > l.limit {
		return n == 0
	}
	now := l.now()
	g := l.lock(key, true)
	if g == nil {
		return false // WithMaxKeys is full
	}
	ok := g.allow(now, n, l.limit, l.window)
	g.mu.Unlock()
	return ok
}

// Take decides a request of weight n for key and records it if admitted,
// atomically: concurrent calls for one key are decided one after another,
// each against the events the earlier ones recorded. A refused request
// records nothing.
//
// A weight of 0 is always allowed and records nothing (useful for requests a
// cost function rates as free). A negative weight, or one above the limit,
// is never allowed, with RetryAfter 0.
func (l *Limiter) Take(key string, n int) Decision {
	d, _ := l.take(key, n)
	return d
}

// take is Take that also returns the instant it decided at.
func (l *Limiter) take(key string, n int) (Decision, int64) {
	admissible := n >= 1 && n <= l.limit
	now := l.now()
	g := l.lock(key, admissible)
	if g == nil {
		if admissible {
			return l.overflow(), now
		}
		return untracked(now, n, l.policy()), now
	}
	d := g.decide(now, n, l.policy(), true)
	at := g.last
	g.mu.Unlock()
	return d, at
}

// Peek returns the Decision that Take(key, 1) would return now, recording
// nothing and creating no state for an untracked key.
func (l *Limiter) Peek(key string) Decision {
	now := l.now()
	g := l.lock(key, false)
	if g == nil {
		if l.keys.full() {
			return l.overflow()
		}
		return untracked(now, 1, l.policy())
	}
	d := g.decide(now, 1, l.policy(), false)
	g.mu.Unlock()
	return d
}

// lock returns key's log with its mutex held, creating the log first if
// create is set. It returns nil when the key is not tracked and create is
// unset, or when creating it would pass WithMaxKeys.
//
// Callers read the clock before lock, off the key's critical section, and
// decide at the later of that reading and the newest instant the key has
// seen (eventLog.settle). Both were read during the caller's own call, so
// the instant it decides at is too, and each key's instants stay in the
// order its decisions were made: every decision is linearizable.
func (l *Limiter) lock(key string, create bool) *eventLog {
	for {
		g := l.keys.load(key)
		if g == nil {
			if !create {
				return nil
			}
			if g = l.keys.create(key); g == nil {
				return nil
			}
		}
		g.mu.Lock()
		if !g.dead {
			return g
		}
		g.mu.Unlock() // evicted between lookup and lock: look again
		runtime.Gosched()
	}
}

// untracked decides for a key with no log, on an empty one that is never
// stored. An empty log's answer does not depend on the instant.
func untracked(now int64, n int, p Policy) Decision {
	var empty eventLog
	return empty.decide(now, n, p, false)
}

// overflow is the refusal of an untracked key while WithMaxKeys is full.
// Each wait it reports is the window, an estimate of when the janitor will
// have made room.
func (l *Limiter) overflow() Decision {
	p := l.policy()
	d := Combine(PolicyDecision{Policy: p, RetryAfter: p.Window, RefillAfter: p.Window, ResetAfter: p.Window})
	d.Overflow = true
	return d
}

// TakeContext is Take for callers that hold a context, such as a backend
// interface shared with networked limiters. It returns ctx's error when ctx
// is already done and ErrClosed after Close; otherwise it cannot fail.
func (l *Limiter) TakeContext(ctx context.Context, key string, n int) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{Limit: l.limit}, err
	}
	if l.closed.Load() {
		return Decision{Limit: l.limit}, ErrClosed
	}
	return l.Take(key, n), nil
}

// Wait blocks until one event for key fits, records it and returns nil.
// See WaitN.
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key fit, records them and returns nil.
//
// It returns ctx's error if ctx ends first, and returns at once, with an
// error for which errors.Is(err, context.DeadlineExceeded) holds, when ctx's
// deadline comes before the events could fit. It returns ErrClosed after
// Close, and an error wrapping ErrExceedsLimit for n < 0 or n > limit. n == 0
// returns nil at once.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	if n < 0 || n > l.limit {
		return fmt.Errorf("%w: n is %d, limit is %d", ErrExceedsLimit, n, l.limit)
	}
	for {
		if l.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		d, at := l.take(key, n)
		if d.Allowed {
			return nil
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.RetryAfter {
			return fmt.Errorf("keyrate: wait of %v for %q would pass the context deadline: %w",
				d.RetryAfter, key, context.DeadlineExceeded)
		}
		if l.beforeSleep != nil {
			l.beforeSleep()
		}
		// Wake at the refusal's own instant plus RetryAfter: the clock may
		// have moved since it was read.
		if err := l.sleep(ctx, at+int64(d.RetryAfter)); err != nil {
			return err
		}
	}
}

// sleep waits until the limiter's clock reaches instant wake (an offset
// from base), ctx ends, or Close.
func (l *Limiter) sleep(ctx context.Context, wake int64) error {
	var ch <-chan time.Time
	switch c := l.clock.(type) {
	case afterAtClock:
		ch = c.afterAt(l.base.Add(time.Duration(wake)))
	case afterClock:
		ch = c.After(time.Duration(wake - l.now()))
	default:
		t := time.NewTimer(time.Duration(wake - l.now()))
		defer t.Stop()
		ch = t.C
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return ErrClosed
	}
}

// Reset forgets every event recorded for key, giving it its whole limit back.
func (l *Limiter) Reset(key string) {
	l.keys.remove(key)
}

// Len returns the number of keys currently tracked.
func (l *Limiter) Len() int { return l.keys.len() }

// Close stops the janitor and waits for it to exit, and wakes every Wait
// with ErrClosed. It is idempotent and always returns nil. Allow, Take and
// Peek keep answering exactly after Close, but idle keys are no longer
// evicted.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
		l.background.Wait()
	})
	return nil
}
