package redislimit

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The breaker's probe delays: the first probe waits probeFirst after the
// failure that opened it, and each failed probe doubles the wait, up to
// probeMax.
const (
	probeFirst = 100 * time.Millisecond
	probeMax   = time.Second
)

// breaker keeps calls off a Redis that has just failed to answer, so that
// an outage costs each call a few atomic loads instead of the time budget.
//
// A failure to answer (see unanswered) opens it. While it is open, calls do
// not ask Redis: one of them, when a probe is due, starts a probe (the
// same script on the same key, with a weight of 0, which records nothing)
// on a goroutine of its own and goes on without waiting for it. At most one
// probe is in flight; the first is due probeFirst after the breaker opened,
// and each that fails doubles the delay, up to probeMax. A probe that gets
// any answer from Redis closes the breaker, and the calls after it ask
// Redis again. Probes are driven by calls, not by a timer: a Limiter that
// no one calls holds no goroutine and probes nothing, and its first call
// after a quiet outage starts the probe that closes it.
//
// Instants are local monotonic nanoseconds (the Limiter's base), passed in,
// so that the state machine is a function of the times it is given.
//
// It is written here rather than taken from sony/gobreaker, the breaker
// of the field, for what it costs a call while Redis answers: 1 ns here
// (one atomic load), against 129 ns for gobreaker's Execute and 162 ns and
// an allocation for its two-step Allow, 147 and 185 ns with every CPU
// calling (BenchmarkBreakerClosed beside dev/librarybench's
// BenchmarkGobreaker, six runs side by side on 2 cores). gobreaker also
// reads time.Now itself, and lets a caller's own request probe a half-open
// breaker, where this one probes in the background, with a weight of 0, at
// a delay that doubles.
type breaker struct {
	open atomic.Bool
	due  atomic.Int64 // the instant the next probe may start, while open

	mu      sync.Mutex
	probing bool          // a probe is in flight
	delay   time.Duration // from the latest failed probe to the next
	since   int64         // the instant it opened
	cause   error         // the latest failure to answer, while open
}

// closed reports whether calls may ask Redis: one atomic load.
func (b *breaker) closed() bool { return !b.open.Load() }

// trip records a failure to answer at now: it opens the breaker, with the
// first probe due probeFirst later, or, when it is open already, keeps its
// schedule and remembers err as the latest cause.
func (b *breaker) trip(now int64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cause = err
	if b.open.Load() {
		return
	}
	b.since, b.delay = now, probeFirst
	b.due.Store(now + int64(probeFirst))
	b.open.Store(true)
}

// startProbe reports whether a probe should start at now, and if so
// counts it as in flight: the breaker is open, the probe is due and none is
// in flight. The caller runs it and reports with probed.
func (b *breaker) startProbe(now int64) bool {
	if !b.open.Load() || now < b.due.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() || b.probing || now < b.due.Load() {
		return false
	}
	b.probing = true
	return true
}

// probed records the outcome of the probe in flight at now: nil closes the
// breaker, a failure to answer schedules the next probe after twice the
// delay, at most probeMax.
func (b *breaker) probed(now int64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if err == nil {
		b.cause = nil
		b.open.Store(false)
		return
	}
	b.cause = err
	b.delay = min(2*b.delay, probeMax)
	b.due.Store(now + int64(b.delay))
}

// state returns, while the breaker is open, since when and the latest
// failure to answer; a nil error when it is closed.
func (b *breaker) state() (since int64, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return 0, nil
	}
	return b.since, b.cause
}

// unanswered reports whether err, from a call to Redis whose caller's own
// context is not done, means that Redis did not answer or said it cannot
// serve now: a network error, the budget's deadline, a closed client or an
// exhausted pool (anything that is not a reply of Redis), or a reply that
// Redis is loading, busy with a script, read-only, without a master or
// replicas, or refusing clients. Any other reply (a script error, a wrong
// type, OOM) is an answer: Redis is there, and a probe that gets one
// closes the breaker.
func unanswered(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	return redis.IsLoadingError(err) || redis.HasErrorPrefix(err, "BUSY") ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsNoReplicasError(err) || redis.IsMaxClientsError(err)
}
