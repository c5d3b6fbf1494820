// Package redislimit is a per-key rate limiter whose state lives in Redis
// (or Valkey), so that every replica of a service shares one budget per key.
//
// An in-process keyrate.Limiter gives each replica its own budget: behind
// two replicas a client gets through twice. A redislimit.Limiter answers the
// same question with the same Decision, but decides in Redis, atomically, in
// one round trip per call: one Lua script, called by its SHA and sent in
// full only when the server does not have it cached. It works with a single
// server (redis.NewClient) or a Redis Cluster (redis.NewClusterClient) of
// github.com/redis/go-redis/v9.
//
// The default algorithm is the exact sliding log of the core package (at
// most limit events per key in any window-length span), at O(log N) per
// decision whatever the weight; FixedWindow trades exactness at window
// boundaries for O(1) memory per key. Either way the decision reads the
// Redis server's clock, never the callers', so replicas whose clocks
// disagree still share one exact window. Decision.RefillAfter is the time
// until the oldest event in the window leaves, the IETF RateLimit header's
// t; RetryAfter is when the refused request itself would fit.
//
// WithDenyCache refuses a key that Redis has just refused locally, with no
// round trip, for as long as Redis's refusal must stand; it never admits,
// so the limit stays exact across replicas.
//
// Every call has a time budget (WithTimeout, 250ms by default) on top of
// the caller's context. A stopped, paused or unreachable Redis makes
// TakeContext return an error within that budget instead of hanging the
// request; the caller decides whether to fail open or closed. That is the
// only budget: a Limiter is a keyrate.Bounded (TimeBudget), so middleware
// such as httplimit calls it directly, with no goroutine and no budget of
// its own.
//
// Keys of any length can be limited. A key over 128 bytes is stored under
// its SHA-256 digest (the rule of the middleware's bounded identities), so
// no client can make Redis hold a large key and two keys never share a
// budget short of a SHA-256 collision. Each key's state sits under a hash
// tag made from a hash of the key, so a Redis Cluster spreads keys over its
// slots whatever bytes they contain, and errors name a key by that tag,
// never by the key itself, which is often a credential.
//
// Give the go-redis client ContextTimeoutEnabled: true. A *redis.Client
// with it set stops at the budget's deadline by itself, and TakeContext
// calls it directly. Any other client, a cluster client included, is called
// from a goroutine that TakeContext stops waiting for at the deadline: the
// budget still holds, but each call costs a goroutine hand-off (tens of
// microseconds on a busy machine), and a call given up on keeps its
// connection until the client's own ReadTimeout.
package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/clientkey"
	"github.com/redis/go-redis/v9"
)

// ErrInvalidKey is wrapped by the error TakeContext and Allow return for an
// empty key. An empty key usually means the caller failed to identify the
// client; sharing one budget among all such requests would hide that bug.
// Keys of any other length are limited (see "Keys" in the package doc).
var ErrInvalidKey = keyrate.ErrInvalidKey

// Limiter is a rate limiter whose per-key state lives in Redis. It is safe
// for concurrent use, holds no goroutines or state of its own beyond its
// configuration, and needs no Close: the client's lifetime is the caller's.
type Limiter struct {
	client  redis.UniversalClient
	script  *redis.Script
	limit   int
	window  time.Duration
	micros  int64 // the window in microseconds, the scripts' unit
	prefix  string
	suffix  string
	timeout time.Duration
	clock   keyrate.Clock
	direct  bool       // the client stops at ctx's deadline by itself
	deny    *denyCache // nil without WithDenyCache
	base    time.Time  // the origin of local instants, on the monotonic clock
}

// New returns a Limiter that admits at most limit events per key in any
// window, keeping its state in the Redis that client reaches. limit must be
// from 1 to math.MaxInt32 and window at least 1ms in whole microseconds
// (the scripts count in the microseconds of Redis TIME). Invalid arguments
// or options give an error wrapping keyrate.ErrConfig. New does not contact
// Redis: an outage shows up in TakeContext's errors, not here.
func New(client redis.UniversalClient, limit int, window time.Duration, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis client is nil", keyrate.ErrConfig)
	}
	cfg, err := newConfig(limit, window, opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		client:  client,
		limit:   limit,
		window:  window,
		micros:  window.Microseconds(),
		prefix:  cfg.prefix,
		timeout: cfg.timeout,
		clock:   cfg.clock,
		base:    time.Now(),
	}
	if cfg.denyKeys > 0 {
		// With a clock set by tests, the script and the cache read the same
		// clock: no rates to allow for.
		l.deny = newDenyCache(cfg.denyKeys, cfg.clock == nil)
	}
	if c, ok := client.(*redis.Client); ok && c.Options().ContextTimeoutEnabled {
		l.direct = true
	}
	switch cfg.algorithm {
	case FixedWindow:
		l.script, l.suffix = fixedWindowScript, ":fw"
	default:
		l.script, l.suffix = slidingLogScript, ":sl"
	}
	return l, nil
}

// TimeBudget returns the time budget of every call (WithTimeout):
// TakeContext returns by its end whatever Redis does. It makes a Limiter a
// keyrate.Bounded, so middleware calls it directly and adds no budget of
// its own: one budget, in one place.
func (l *Limiter) TimeBudget() time.Duration { return l.timeout }

// Limit returns the most events admitted per key in any window.
func (l *Limiter) Limit() int { return l.limit }

// Window returns the length of the window.
func (l *Limiter) Window() time.Duration { return l.window }

// Allow reports whether one event for key fits now, and records it if so.
// See TakeContext for the errors.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.TakeContext(ctx, key, 1)
	return d.Allowed, err
}

// TakeContext decides a request of weight n for key and records it if
// admitted, atomically across every client of the same Redis: one script
// run, one round trip (none for a refusal the deny cache answers). A
// refused request records nothing. The rules for n are the core's: 0 is
// always allowed and records nothing, a negative n or one above the limit
// is refused with RetryAfter 0 (it can never fit).
//
// Keys of any length are limited; an error never quotes the key (it names
// it by its hash tag, see the package doc). It returns an error wrapping
// ErrInvalidKey for an empty key; ctx's error, wrapped, if ctx is done
// before Redis answers; an error wrapping context.DeadlineExceeded when
// Redis has not answered within the time budget; and Redis's or the
// network's error otherwise. ctx's deadline ends the call at once. Its
// cancellation does too, except with a client TakeContext calls directly
// (see the package doc), which watches only deadlines: there a cancelled
// call ends at the budget at the latest. With an error the Decision is not
// an answer: only its Limit is set. A call that timed out may still have
// been recorded, once Redis gets to it; that can only make later decisions
// stricter.
func (l *Limiter) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	d := keyrate.Decision{Limit: l.limit}
	if key == "" {
		return d, fmt.Errorf("redislimit: %w: empty key", ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return d, err
	}
	id := clientkey.Bound(key)
	sent := l.localNow()
	if l.deny != nil {
		if cached, ok := l.deny.refuse(id, n, sent); ok {
			cached.Limit = l.limit
			return cached, nil
		}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()

	t := tag(id)
	keys := []string{l.storeKey(id, t)}
	args := make([]any, 4)
	args[0], args[1], args[2], args[3] = n, "", l.limit, l.micros
	if l.clock != nil {
		args[1] = sent / 1000 // the same instant the deny cache counts from
	}

	var r result
	if l.direct {
		r.v, r.err = l.script.Run(ctx, l.client, keys, args...).Int64Slice()
	} else {
		// The client may not stop at ctx's deadline (go-redis only does
		// with ContextTimeoutEnabled), so the budget is enforced here, at
		// the cost of a goroutine hand-off per call.
		reply := make(chan result, 1)
		go func() {
			v, err := l.script.Run(ctx, l.client, keys, args...).Int64Slice()
			reply <- result{v, err}
		}()
		select {
		case r = <-reply:
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	}
	if r.err != nil {
		if err := parent.Err(); err != nil {
			return d, fmt.Errorf("redislimit: take %s: %w", keyRef(t), err)
		}
		if err := ctx.Err(); err != nil {
			return d, fmt.Errorf("redislimit: take %s: no answer from redis within the %v budget: %w", keyRef(t), l.timeout, err)
		}
		return d, fmt.Errorf("redislimit: take %s: %w", keyRef(t), r.err)
	}
	// {allowed, now, then remaining, retryAfter, resetAfter, refillAfter
	// for each policy}: one policy here.
	if len(r.v) != 6 {
		return d, fmt.Errorf("redislimit: take %s: script returned %d values, want 6", keyRef(t), len(r.v))
	}
	d.Allowed = r.v[0] == 1
	d.Remaining = int(r.v[2])
	d.RetryAfter = time.Duration(r.v[3]) * time.Microsecond
	d.ResetAfter = time.Duration(r.v[4]) * time.Microsecond
	d.RefillAfter = time.Duration(r.v[5]) * time.Microsecond
	if l.deny != nil {
		if d.Allowed {
			l.deny.forget(id)
		} else {
			l.deny.store(id, n, sent, d)
		}
	}
	return d, nil
}

// localNow returns the local instant in nanoseconds: on the monotonic
// clock since the Limiter was made, or, with a clock set by tests, that
// clock's instant in whole microseconds (the instant the script is given).
func (l *Limiter) localNow() int64 {
	if l.clock != nil {
		return l.clock.Now().UnixMicro() * 1000
	}
	return int64(time.Since(l.base))
}

type result struct {
	v   []int64
	err error
}
