// Package redislimit is a per-key rate limiter whose state lives in Redis
// (or Valkey), so that every replica of a service shares one budget per key.
//
// An in-process keyrate.Limiter gives each replica its own budget: behind
// two replicas a client gets through twice. A redislimit.Limiter answers the
// same question with the same Decision, but decides in Redis, atomically, in
// one round trip (shared with the concurrent calls of the same Limiter):
// one Lua script, called by its SHA and sent in full only when the server
// does not have it cached. It works with a single
// server (redis.NewClient) or a Redis Cluster (redis.NewClusterClient) of
// github.com/redis/go-redis/v9.
//
// The default algorithm is the exact sliding log of the core package (at
// most limit events per key in any window-length span), at O(log N) per
// decision whatever the weight; keyrate.FixedWindow trades exactness at
// window boundaries for O(1) memory per key, and keyrate.GCRA is the
// core's token bucket, which answers as github.com/go-redis/redis_rate
// does, also in O(1). Whichever the algorithm, the decision reads the
// Redis server's clock, never the callers', so replicas whose clocks
// disagree still share one exact window.
//
// Refund gives an admitted decision back exactly, as the core's
// keyrate.Limiter.Refund does: the events it recorded leave the key's log,
// its own instants and not the newest, in one script run on the key's
// slot, from any replica. Taking first and refunding what should not
// count (a successful login, a response under 400) makes "count only the
// failures" exact across replicas; RefundN gives back part of a decision,
// so that a request that reserved an estimate settles its real cost.
//
// The sliding log keeps a compact string per key: 8 bytes per instant at
// which the key admitted events still in its longest window (MEMORY USAGE:
// about 8 KB for 1,000 events). WithResolution bounds that whatever the
// limit, at the cost of refusals up to one resolution early.
// Decision.RefillAfter is the time until the oldest event in the window
// leaves, the IETF RateLimit header's t; RetryAfter is when the refused
// request itself would fit.
//
// Concurrent decisions share round trips: while one is in flight to a
// Redis node, the decisions that arrive for it wait and go together in
// the next, one script run deciding many (see "Many decisions per round
// trip" in the README). There is no timer: a lone caller sends at once.
//
// A key may be under several limits at once, such as 10 per second and
// 1,000 per day (NewPolicies), and keys may have different limits by plan
// (WithTiers, SetTier), with the semantics of the in-process
// keyrate.NewPolicies and keyrate.WithTiers: a request is admitted only
// when every policy has room, and then recorded against all of them, in
// the same one script run, one round trip and one Redis key (so one Cluster
// slot) as a single limit. Each Decision names the binding policy and
// lists every policy's numbers (keyrate.Decision.Policies). TakeAll
// decides a request against several keys at once, all or nothing, in one
// script run; on a Redis Cluster its keys must share a slot, which
// WithHashTagFunc arranges by group.
//
// A policy may also be a quota per calendar period (keyrate.Policy's
// Calendar: a day, a week or a month of a time zone), counted under the
// sliding log in the same script run and Redis key as the windows; see
// "Calendar quotas" in the README.
//
// WithLeases decides busy keys in process, from leases of their budget
// that each replica takes from Redis, still exact across replicas: every
// decision looks back window + d (see WithLeases).
//
// WithDenyCache refuses a key that Redis has just refused locally, with no
// round trip, for as long as Redis's refusal must stand, and at most a
// maximum hold (1s by default, WithDenyCacheMaxHold); it never admits, so
// the limit stays exact across replicas.
//
// When Redis loses a key's events (FLUSHALL, a DEL, a restart without
// persistence, a failover that lost writes, an eviction under maxmemory),
// the key starts over with an empty window: its client can get up to one
// more limit through, once per loss. The deny cache goes on refusing such
// a key for at most its maximum hold, then asks Redis, which admits. Keys
// Redis kept are decided as before.
//
// Every call has a time budget (WithTimeout, 250ms by default) on top of
// the caller's context. A stopped, paused or unreachable Redis makes
// TakeContext return an error within that budget instead of hanging the
// request; the caller decides whether to fail open or closed. That is the
// only budget: a Limiter is a backend.Bounded (TimeBudget), so middleware
// such as httplimit calls it directly, with no goroutine and no budget of
// its own.
//
// Only the calls that meet an outage first wait out the budget: a circuit
// breaker, always on, then keeps calls off Redis until a probe gets an
// answer again, so that every call during an outage returns in
// microseconds, with an error wrapping keyrate.ErrUnavailable, or with a decision
// of the local fallback (WithLocalFallback), which admits a share of each
// limit in this process and is never unlimited. See TakeContext, and "When
// Redis is down" in the README.
//
// Keys of any length can be limited. A key over 128 bytes is stored under
// its SHA-256 digest (the rule of the middleware's bounded identities), so
// no client can make Redis hold a large key and two keys never share a
// budget short of a SHA-256 collision. Each key's state sits under a hash
// tag made from a hash of the key, so a Redis Cluster spreads keys over its
// slots whatever bytes they contain, and errors name a key by that tag,
// never by the key itself, which is often a credential. Without a secret
// anyone can compute that hash, so a client that picks its own keys can aim
// them at one slot or master; WithHashTagSecret keys the hash so that no
// client can.
//
// Give the go-redis client ContextTimeoutEnabled: true. A *redis.Client
// with it set stops at the budget's deadline by itself, and a call that
// finds no round trip in flight sends on its own goroutine. Any other
// client, a cluster client included, is called from a goroutine that
// TakeContext stops waiting for at the deadline: the budget still holds,
// but each round trip costs a goroutine hand-off (tens of microseconds on
// a busy machine), and a round trip given up on keeps its connection, and
// the node's next batch waiting, until the client's own ReadTimeout.
package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/redis/go-redis/v9"
)

// Limiter is a rate limiter whose per-key state lives in Redis. It is safe
// for concurrent use, holds no state of its own beyond its configuration,
// its circuit breaker (and the deny cache, local fallback and leases, when
// on); the client's lifetime is the caller's. Without leases it needs no
// Close, and holds no goroutine except while Redis is unavailable: then at
// most one probe at a time, which ends within the time budget. With
// WithLeases it runs a sweeper until Close, which gives the leases back. It adds one go-redis
// hook to the client, which notes whether connecting to Redis fails (see
// TakeContext's errors; a failure opens the breaker); create Limiters
// once, not per request.
type Limiter struct {
	client  redis.UniversalClient
	script  *script // the algorithm's decision script (scripts.go)
	lone    *script // the script of a run of one request; nil: script
	prefix  string
	suffix  string
	res     int64 // WithResolution, in microseconds; 0: none
	timeout time.Duration
	clock   keyrate.Clock
	direct  bool       // the client stops at ctx's deadline by itself
	deny    *denyCache // nil without WithDenyCache
	tags    hashTags
	base    time.Time  // the origin of local instants, on the monotonic clock
	dials   *dialWatch // how the client's connecting goes; nil for a client it cannot watch
	breaker breaker
	// fallback decides while Redis cannot (WithLocalFallback); nil: none.
	fallback *fallback
	// group names the group a key's hash tag is made from
	// (WithHashTagFunc); nil: each key its own tag.
	group func(key string) string

	// one batches the decisions for a single server, nodes those for each
	// node of a Cluster, by address (batch.go).
	one   batcher
	nodes sync.Map
	// perRequest sends each request of a batch as a script run of its
	// own, in one pipeline, instead of one run for many: only the
	// benchmark that compares the two sets it.
	perRequest bool

	tiers   atomic.Pointer[tierTable]
	tierOf  func(key string) string // WithTiers; nil: every key in the default tier
	setTier sync.Mutex              // serialises SetTier's copy-and-swap of tiers

	// leases holds this replica's leases (WithLeases); nil: none.
	leases     *leases
	leaseClock func() int64 // the local clock leases are timed on, in ns; nil: leaseNow's
	leaseLast  atomic.Int64 // the latest instant leaseNow read from a test's clock
	// calNow, set by tests alone, is the client's instant calendar
	// boundaries are computed around (calendarNow); nil: the clock's.
	calNow func() time.Time

	closeOnce sync.Once
	closed    atomic.Bool
}

// New returns a Limiter that admits at most limit events per key in any
// window, keeping its state in the Redis that client reaches: one policy,
// with an empty name. limit must be from 1 to math.MaxInt32 and window at
// least 1ms in whole microseconds (the scripts count in the microseconds of
// Redis TIME). Invalid arguments or options give an error wrapping
// keyrate.ErrConfig. New does not contact Redis: an outage shows up in
// TakeContext's errors, not here.
func New(client redis.UniversalClient, limit int, window time.Duration, opts ...Option) (*Limiter, error) {
	def, err := newTier("", []keyrate.Policy{{Limit: limit, Window: window}})
	if err != nil {
		return nil, err
	}
	return newLimiter(client, def, opts)
}

// newLimiter is New and NewPolicies once the default tier is built.
func newLimiter(client redis.UniversalClient, def *tier, opts []Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis client is nil", keyrate.ErrConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := checkFallback(&cfg); err != nil {
		return nil, err
	}
	if cfg.groupSet && cfg.group == nil {
		return nil, fmt.Errorf("%w: hash tag function is nil", keyrate.ErrConfig)
	}
	tab, err := newTierTable(def, cfg.tiers, cfg.res)
	if err != nil {
		return nil, err
	}
	for _, t := range tab.named {
		if err := t.checkAlgorithm(cfg.algorithm); err != nil {
			return nil, err
		}
	}
	if err := checkLeases(&cfg, tab); err != nil {
		return nil, err
	}
	var fb *fallback
	if cfg.fallbackSet {
		if fb, err = newFallback(&cfg, tab, cfg.tierOf != nil); err != nil {
			return nil, err
		}
	}
	l := &Limiter{
		client:  client,
		prefix:  cfg.prefix,
		res:     cfg.res.Microseconds(),
		timeout: cfg.timeout,
		clock:   cfg.clock,
		base:    time.Now(),
		tierOf:  cfg.tierOf,
		tags:    newHashTags(cfg.tagSecret),
		group:   cfg.group,

		fallback: fb,
	}
	l.one.l = l
	if cfg.leaseSet {
		for _, t := range tab.named {
			t.lengthen(cfg.lease)
		}
		l.leases = newLeases(cfg.lease)
	}
	l.tiers.Store(tab)
	if cfg.denyKeys > 0 {
		// With a clock set by tests, the script and the cache read the same
		// clock: no rates to allow for.
		l.deny = newDenyCache(cfg.denyKeys, cfg.denyHold, cfg.clock == nil)
	}
	if c, ok := client.(*redis.Client); ok && c.Options().ContextTimeoutEnabled {
		l.direct = true
	}
	l.dials = watchDials(client, l.base, l.breaker.trip)
	if l.leases != nil {
		l.leaseClock = cfg.leaseClock
		if l.clock == nil {
			go l.sweeper() // with a test's clock, the test sweeps
		} else {
			close(l.leases.done)
		}
	}
	switch cfg.algorithm {
	case keyrate.FixedWindow:
		l.script, l.suffix = fixedWindowScript, ":fw"
	case keyrate.GCRA:
		l.script, l.suffix = gcraScript, ":gcra"
	default:
		l.script, l.lone, l.suffix = slidingLogScript, slidingLogOneScript, ":log"
	}
	return l, nil
}

// TimeBudget returns the time budget of every call (WithTimeout):
// TakeContext returns by its end whatever Redis does. It makes a Limiter a
// backend.Bounded, so middleware calls it directly and adds no budget of
// its own: one budget, in one place.
func (l *Limiter) TimeBudget() time.Duration { return l.timeout }

// Allow reports whether one event for key fits now, and records it if so.
// See TakeContext for the errors.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	if l.leases != nil && key != "" && !l.closed.Load() {
		// The answer alone: a decision made in process builds no numbers.
		tr := l.tierFor(ctx, key)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		d, err := l.decideLeased(ctx, key, clientkey.Bound(key), tr, 1, false)
		return d.Allowed, err
	}
	d, err := l.TakeContext(ctx, key, 1)
	return d.Allowed, err
}

// TakeContext decides a request of weight n for key and records it if
// admitted, atomically across every client of the Redis, in one script run
// and one round trip shared with the Limiter's concurrent calls (none for a
// refusal the deny cache holds), under every policy of the key's tier. The
// rules for n are the core's. While Redis cannot answer, the circuit
// breaker opens and calls return at once, from the local fallback if any.
// Errors: keyrate.ErrInvalidKey for "", ctx's when it ends first (never a
// fallback decision), keyrate.ErrUnavailable (with
// context.DeadlineExceeded past the budget), backend.ErrOutOfMemory, and
// Redis's own; with one, only the Decision's Limit is set. A call that
// timed out may still be recorded. See "Errors" in the README.
func (l *Limiter) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	if key == "" {
		return l.tiers.Load().def.failed(), fmt.Errorf("redislimit: %w: empty key", keyrate.ErrInvalidKey)
	}
	if l.closed.Load() {
		return l.tiers.Load().def.failed(), errClosed("take")
	}
	tr := l.tierFor(ctx, key)
	if err := ctx.Err(); err != nil {
		return tr.failed(), err
	}
	id := clientkey.Bound(key)
	if l.leases != nil && n > 0 {
		return l.takeLeased(ctx, key, id, tr, n)
	}
	sent := l.localNow()
	if l.deny != nil {
		if cached, ok := l.deny.refuse(id, tr, n, sent); ok {
			return cached, nil
		}
	}
	t := l.tagOf(key, id)
	r := oneKey(l.storeKey(id, t), n, tr, t, sent/1000)
	a, fallback, err := l.ask(ctx, r, func(int) string { return "take " + keyRef(t) })
	switch {
	case fallback:
		return l.fallbackTake(tr, id, n), nil
	case err != nil:
		return tr.failed(), err
	}
	d, err := tr.decision(n, a.admitted, a.replies[0])
	if err != nil {
		return tr.failed(), fmt.Errorf("redislimit: take %s: %w", keyRef(t), err)
	}
	l.remember(id, tr, n, sent, d, d.Allowed)
	return d, nil
}

// ask sends r to Redis, through the circuit breaker and within the time
// budget, and returns its answer. When Redis cannot answer (the breaker is
// open, the budget ran out, the store went away, or it is out of memory
// and cannot record), it reports fallback instead, for the local fallback
// to decide, or, without a fallback, the error to fail with; any other
// failure is an error too. what(i) names the call in errors, i being the
// place of the key at fault, or -1: "take {tag}".
func (l *Limiter) ask(ctx context.Context, r *request, what func(i int) string) (a answer, fallback bool, err error) {
	if !l.breaker.closed() {
		l.probe(r)
		if l.fallback != nil {
			return a, true, nil
		}
		return a, false, l.notAsked(r.tag)
	}
	budget, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	r.ctx = budget
	if a = l.batcherFor(budget, r.keys[0]).do(r); a.err == nil {
		return a, false, nil
	}
	if err := ctx.Err(); err != nil {
		return a, false, fmt.Errorf("redislimit: %s: %w", what(-1), err)
	}
	down, err := l.callError(budget, a.err)
	if down {
		l.breaker.trip(l.mono(), err)
		err = fmt.Errorf("%w: %w", keyrate.ErrUnavailable, err)
	}
	if (down || errors.Is(err, backend.ErrOutOfMemory)) && l.fallback != nil {
		return a, true, nil
	}
	return a, false, fmt.Errorf("redislimit: %s: %w", what(a.failedAt), err)
}

// remember keeps what Redis said of key id, bounded, under tier tr at
// weight n, sent at the local instant sent, in the deny cache: a refusal
// (refused, d) until its RetryAfter, an admission as the end of any
// refusal held.
func (l *Limiter) remember(id string, tr *tier, n int, sent int64, d keyrate.Decision, admitted bool) {
	switch {
	case l.deny == nil:
	case admitted:
		l.deny.forget(id)
	case !d.Allowed:
		l.deny.store(id, tr, n, sent, d)
	}
}

// callError reports whether Redis did not answer a script run under
// budget, the call's budget context, that failed with err while the
// caller's own context was not done (see unanswered), and returns why,
// without naming the key. A refusal to record for want of memory wraps
// backend.ErrOutOfMemory.
func (l *Limiter) callError(budget context.Context, err error) (down bool, cause error) {
	if budget.Err() != nil {
		// The budget began about l.timeout ago.
		if dial := l.dials.failedSince(l.mono() - int64(l.timeout)); dial != nil {
			return true, fmt.Errorf("no answer from redis within the %v budget; connecting to it failed: %w: %w", l.timeout, dial, budget.Err())
		}
		return true, fmt.Errorf("no answer from redis within the %v budget: %w", l.timeout, budget.Err())
	}
	if errors.Is(err, backend.ErrOutOfMemory) {
		return false, err
	}
	if redis.IsOOMError(err) {
		// Redis runs a script until its first write, so a key at its
		// limit is still refused; only what must be recorded fails.
		return false, fmt.Errorf("%w: %w", backend.ErrOutOfMemory, err)
	}
	return unanswered(err), err
}

// notAsked returns the error of a call that the open breaker kept off
// Redis, for the key whose tag is t. It does not wrap the failure that
// opened the breaker: that one may have been a timeout, and this call
// waited for nothing.
func (l *Limiter) notAsked(t string) error {
	since, cause := l.breaker.state()
	if cause == nil { // closed meanwhile
		return fmt.Errorf("redislimit: take %s: %w: not asked, the circuit breaker was open", keyRef(t), keyrate.ErrUnavailable)
	}
	return fmt.Errorf("redislimit: take %s: %w: not asked, the circuit breaker has been open for %v; the latest failure: %v",
		keyRef(t), keyrate.ErrUnavailable, time.Duration(l.mono()-since).Round(time.Millisecond), cause)
}

// probe starts a probe of Redis when the breaker has one due: the
// script on the keys of r, a call's own request, at a weight of 0, which
// records nothing, on a goroutine of its own under the time budget,
// bypassing the batches (none is in flight while the breaker is open,
// and the probe must not wait behind one). It does not wait for it.
func (l *Limiter) probe(r *request) {
	if !l.breaker.startProbe(l.mono()) {
		return
	}
	p := &request{keys: r.keys, weights: make([]int, len(r.keys)), tiers: r.tiers, tag: r.tag, instant: r.instant}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		defer cancel()
		p.ctx = ctx
		l.send(ctx, []*request{p})
		err := p.ans.err
		if err != nil {
			var down bool
			if down, err = l.callError(ctx, err); !down {
				err = nil // an answer, even an error reply: Redis is there
			}
		}
		l.breaker.probed(l.mono(), err)
	}()
}

// mono returns the instant on the local monotonic clock, in nanoseconds
// since the Limiter was made, whatever clock tests set: the breaker and
// the dial watch time real waits.
func (l *Limiter) mono() int64 { return int64(time.Since(l.base)) }

// decision makes the Decision of one key, decided at weight n under t,
// from its part of the script's reply v (see keyReply), in a request the
// script admitted or not; an admission of a positive weight gets its
// Receipt from now, gen and rid. Each policy's part says whether that
// policy alone had room, by the core's rules; Combine picks the binding
// one. The script's own verdict must agree with the parts': a reply that
// admitted what the parts refuse, or the reverse, is an error, never an
// answer.
func (t *tier) decision(n int, admitted bool, v keyReply) (keyrate.Decision, error) {
	if want := 3 + 4*len(t.policies); len(v) != want {
		return keyrate.Decision{}, fmt.Errorf("script returned %d values for a key, want %d", len(v), want)
	}
	var parts [backend.MaxPolicies]keyrate.PolicyDecision
	for i, p := range t.policies {
		r := v.policy(i)
		// The sliding log rounds instants up (to its tick, its
		// resolution) and GCRA's limit refill intervals can pass the
		// window by under a microsecond each: ResetAfter and RefillAfter
		// say at most the window, as in every backend (a fresh key of 60
		// per minute says 60 s, never 60.000063). RetryAfter stays exact.
		parts[i] = keyrate.PolicyDecision{
			Policy:      p,
			Allowed:     n == 0 || n > 0 && n <= p.Limit && r[1] == 0,
			Remaining:   int(r[0]),
			RetryAfter:  time.Duration(r[1]) * time.Microsecond,
			ResetAfter:  min(time.Duration(r[2])*time.Microsecond, p.Window),
			RefillAfter: min(time.Duration(r[3])*time.Microsecond, p.Window),
		}
		if t.ids[i] != 0 {
			// A calendar policy's count leaves when its period turns,
			// which the script's numbers reach exactly: no window caps
			// them.
			parts[i].ResetAfter = time.Duration(r[2]) * time.Microsecond
			parts[i].RefillAfter = time.Duration(r[3]) * time.Microsecond
			start, end := backend.Period(p.Calendar, time.UnixMicro(v.now()))
			parts[i].Period = end.Sub(start)
		}
	}
	d := backend.Combine(parts[:len(t.policies)]...)
	if d.Allowed != admitted {
		return keyrate.Decision{}, fmt.Errorf("script answered admitted=%v, its policies' numbers say %v", admitted, d.Allowed)
	}
	if d.Allowed && n > 0 {
		d.Receipt = newReceipt(n, v.now(), v.rid(), v.gen())
	}
	return d, nil
}

// failed is the Decision returned with an error: not an answer, only the
// limit of t's first policy set.
func (t *tier) failed() keyrate.Decision {
	return keyrate.Decision{Limit: t.policies[0].Limit}
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
