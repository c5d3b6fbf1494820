package redislimit

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/redis/go-redis/v9"
)

// Concurrency limits how many requests of each key are in flight at once
// across every replica that shares a Redis: keyrate.Concurrency's limit,
// with its slots in Redis. It is safe for concurrent use; create one with
// NewConcurrency and Close it when done.
//
// Each slot is a lease with a time to live: taken with one script run
// (one round trip), given back with one ZREM (one more), and renewed
// while it is held, every third of the time to live, by one goroutine per
// Concurrency that renews all of its leases together, a pipeline of one
// script run per key. A replica that dies (a crash, SIGKILL, a lost host)
// stops renewing, and its slots come back within the time to live: the
// next acquire of the key drops the leases that have lapsed. The clock is
// the Redis server's, so the replicas' clocks need not agree.
//
// What it cannot know is a replica cut off from Redis for longer than the
// time to live while its requests go on: their leases lapse, and other
// replicas may take those slots, exceeding the limit until the cut-off
// requests end. A renewal never puts back a lease that has lapsed and
// been dropped (its slot may be someone else's); the request keeps running
// without one. Choose the time to live as a trade-off between how long a
// dead replica's slots stay taken and how long an outage it rides out.
//
// Acquire waits by asking again after a back-off, from 5ms doubling to
// 100ms with jitter, within its context: waiters of one key are not
// served in any particular order, unlike keyrate.Concurrency's, and a
// slot given back reaches one of them up to a back-off later.
type Concurrency struct {
	client  redis.UniversalClient
	prefix  string
	tags    hashTags
	timeout time.Duration
	direct  bool          // the client stops at ctx's deadline by itself
	clock   keyrate.Clock // nil: the server's TIME (tests only set it)
	ttl     time.Duration
	owner   string // the leases' id prefix, random per Concurrency
	seq     atomic.Uint64

	limit  int
	tierOf func(key string) string
	tiers  map[string]int

	mu       sync.Mutex
	held     map[string]map[string]struct{} // Redis key -> lease ids held, for renewal
	renewing bool                           // the renewal goroutine runs
	closed   bool
	done     chan struct{} // closed by Close
	renewal  sync.WaitGroup
}

// NewConcurrency returns a Concurrency that lets each key hold at most
// limit slots at once in the Redis client reaches, each a lease lasting ttl
// unless renewed (every ttl/3). limit is 1 to math.MaxInt32; ttl at least
// twice the time budget, so that a renewal lands in time. It takes
// WithPrefix, WithTimeout, WithHashTagSecret and WithTiers (each tier one
// policy with a Limit alone, as for keyrate.NewConcurrency); any other
// option is an error. Every error wraps keyrate.ErrConfig. It does not
// contact Redis.
func NewConcurrency(client redis.UniversalClient, limit int, ttl time.Duration, opts ...Option) (*Concurrency, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis client is nil", keyrate.ErrConfig)
	}
	if limit < 1 || limit > math.MaxInt32 {
		return nil, fmt.Errorf("%w: limit is %d, want 1 to %d", keyrate.ErrConfig, limit, math.MaxInt32)
	}
	cfg, err := concurrencyConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := checkLeaseTTL(ttl, cfg.timeout); err != nil {
		return nil, err
	}
	tiers, err := slotLimits(cfg.tiers)
	if err != nil {
		return nil, err
	}
	var owner [8]byte
	crand.Read(owner[:]) // never fails
	c := &Concurrency{
		client:  client,
		prefix:  cfg.prefix,
		tags:    newHashTags(cfg.tagSecret),
		timeout: cfg.timeout,
		clock:   cfg.clock,
		ttl:     ttl,
		owner:   hex.EncodeToString(owner[:]) + ":",
		limit:   limit,
		tierOf:  cfg.tierOf,
		tiers:   tiers,
		held:    make(map[string]map[string]struct{}),
		done:    make(chan struct{}),
	}
	if rc, ok := client.(*redis.Client); ok && rc.Options().ContextTimeoutEnabled {
		c.direct = true
	}
	return c, nil
}

// TryAcquire takes one of key's slots if one is free now, in one round
// trip, and returns the function that gives it back (only its first call
// counts, from any goroutine); ok is false when key holds its limit. The
// tier function sees the context's identity, else key. Errors:
// keyrate.ErrInvalidKey for "", ctx's, keyrate.ErrUnavailable when Redis
// does not answer within the budget, keyrate.ErrClosed after Close, and
// Redis's own; a call that timed out may hold a slot, which lapses within
// the time to live. Errors never name the key.
func (c *Concurrency) TryAcquire(ctx context.Context, key string) (release func(), ok bool, err error) {
	release, err = c.acquire(ctx, key, c.limitFor(ctx, key))
	return release, release != nil, err
}

// Acquire takes one of key's slots, waiting for one until ctx is done (see
// the type's doc for how), and returns the function that gives it back.
// It returns TryAcquire's errors, ctx's error when ctx ends before a slot
// is free, and ErrClosed when Close is called while it waits. A call that
// returns an error holds no slot.
func (c *Concurrency) Acquire(ctx context.Context, key string) (release func(), err error) {
	release, _, err = c.AcquireSlot(ctx, key, true)
	return release, err
}

// AcquireSlot is the call middleware makes (middleware.Concurrency): with
// wait, Acquire; without, TryAcquire, a key at its limit being a nil
// release and a nil error. limit is key's number of slots, that of its
// tier, set with every answer.
func (c *Concurrency) AcquireSlot(ctx context.Context, key string, wait bool) (release func(), limit int, err error) {
	limit = c.limitFor(ctx, key)
	backoff := 5 * time.Millisecond
	for {
		release, err = c.acquire(ctx, key, limit)
		if release != nil || err != nil || !wait {
			return release, limit, err
		}
		// Jitter spreads the waiters of a key over the back-off, so that a
		// slot given back is not asked for by all of them at once.
		pause := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, limit, ctx.Err()
		case <-c.done:
			t.Stop()
			return nil, limit, keyrate.ErrClosed
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// acquire runs the acquire script once for key under limit, and returns
// the slot's release, or nil when the key is full.
func (c *Concurrency) acquire(ctx context.Context, key string, limit int) (func(), error) {
	if key == "" {
		return nil, fmt.Errorf("redislimit: %w: empty key", keyrate.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, keyrate.ErrClosed
	}
	id := clientkey.Bound(key)
	tag := c.tags.of(id)
	sk := c.slotKey(id, tag)
	lease := c.owner + strconv.FormatUint(c.seq.Add(1), 36)
	v, err := c.run(ctx, acquireScript, sk, c.now(), limit, c.ttl.Microseconds(), lease)
	if err != nil {
		return nil, fmt.Errorf("redislimit: acquire a slot of %s: %w", keyRef(tag), err)
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("redislimit: acquire a slot of %s: script returned %d values, want 2", keyRef(tag), len(v))
	}
	if v[0] != 1 {
		return nil, nil
	}
	c.hold(sk, lease)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			c.release(sk, lease)
		}
	}, nil
}

// slotKey returns the Redis key of the slots of the bounded key id, whose
// hash tag is tag: beside its rate state (see keys.go), in the same slot.
func (c *Concurrency) slotKey(id, tag string) string {
	return c.prefix + "{" + tag + "}" + id + ":inflight"
}

// release gives the lease back: it is renewed no more, and leaves the set
// in one round trip. Should that fail, the lease lapses within its time to
// live, unrenewed.
func (c *Concurrency) release(sk, lease string) {
	c.mu.Lock()
	if ids := c.held[sk]; ids != nil {
		delete(ids, lease)
		if len(ids) == 0 {
			delete(c.held, sk)
		}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.client.ZRem(ctx, sk, lease)
}

// run runs script on the set sk with args under the time budget, and
// returns its reply, or why there is none: ctx's error when ctx ended
// first, one wrapping keyrate.ErrUnavailable when Redis did not or could
// not answer.
func (c *Concurrency) run(ctx context.Context, script *redis.Script, sk string, args ...any) ([]int64, error) {
	budget, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var v []int64
	var err error
	if c.direct {
		v, err = script.Run(budget, c.client, []string{sk}, args...).Int64Slice()
	} else {
		// The client may not stop at the deadline by itself (see the
		// package doc): the budget is enforced here.
		type reply struct {
			v   []int64
			err error
		}
		ch := make(chan reply, 1)
		go func() {
			v, err := script.Run(budget, c.client, []string{sk}, args...).Int64Slice()
			ch <- reply{v, err}
		}()
		select {
		case r := <-ch:
			v, err = r.v, r.err
		case <-budget.Done():
			err = budget.Err()
		}
	}
	switch {
	case err == nil:
		return v, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case budget.Err() != nil:
		return nil, fmt.Errorf("%w: no answer from redis within the %v budget: %w", keyrate.ErrUnavailable, c.timeout, budget.Err())
	case redis.IsOOMError(err):
		return nil, fmt.Errorf("%w: %w", backend.ErrOutOfMemory, err)
	case unanswered(err):
		return nil, fmt.Errorf("%w: %w", keyrate.ErrUnavailable, err)
	}
	return nil, err
}

// now returns the instant to pass the scripts: "" for the server's TIME,
// or the test clock's, in microseconds.
func (c *Concurrency) now() any {
	if c.clock == nil {
		return ""
	}
	return c.clock.Now().UnixMicro()
}

// limitFor returns the limit of key's tier under ctx: that of the tier the
// tier function names for the identity ctx carries, else for key; the
// default for a tier not in the map, for "", and when the function panics.
func (c *Concurrency) limitFor(ctx context.Context, key string) int {
	if c.tierOf == nil {
		return c.limit
	}
	if n, ok := c.tiers[backend.TierOf(ctx, c.tierOf, key)]; ok {
		return n
	}
	return c.limit
}

// Close stops renewing leases and waits for the renewal goroutine to
// exit, wakes every Acquire waiting with keyrate.ErrClosed, and makes
// later acquires return it. Slots still held stay held until given back,
// which still works, or until their leases lapse within the time to live.
// It is idempotent and always returns nil.
func (c *Concurrency) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	c.renewal.Wait()
	return nil
}
