package redislimit

import (
	"fmt"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
)

// Option configures a Limiter; pass options to New or NewPolicies.
type Option func(*config)

type config struct {
	prefix    string
	timeout   time.Duration
	algorithm Algorithm
	clock     keyrate.Clock // nil: the Redis server's TIME (tests only set it)
	denyKeys  int           // 0: no deny cache
	denySet   bool          // WithDenyCache was given
	denyHold  time.Duration // the deny cache's longest hold
	holdSet   bool          // WithDenyCacheMaxHold was given
	res       time.Duration // WithResolution; 0: none
	resSet    bool          // WithResolution was given
	tierSet   bool          // WithTiers was given
	tagSecret []byte        // WithHashTagSecret; nil: the unkeyed tag
	tagSet    bool          // WithHashTagSecret was given
	tierOf    func(key string) string
	tiers     map[string][]keyrate.Policy

	fallbackShare   float64 // WithLocalFallback's share
	fallbackSet     bool    // WithLocalFallback was given
	fallbackKeys    int     // WithLocalFallbackMaxKeys
	fallbackKeysSet bool    // WithLocalFallbackMaxKeys was given

	group    func(key string) string // WithHashTagFunc; nil: each key its own tag
	groupSet bool                    // WithHashTagFunc was given

	lease      time.Duration // WithLeases; 0: none
	leaseSet   bool          // WithLeases was given
	leaseClock func() int64  // tests only: the local clock of leases, ns
}

// Algorithm selects how a Limiter counts: keyrate.Algorithm, the same
// choice as in process, so that one value configures both. In Redis each
// runs as one Lua script per decision, so each decision is atomic and
// costs one round trip.
type Algorithm = keyrate.Algorithm

const (
	// SlidingLog is the default: an exact sliding log, the same rule as the
	// in-process keyrate.Limiter. At most limit events per key are admitted
	// in any window-length span. Redis keeps one string per key, with an
	// 8-byte entry per instant at which it admitted events that is still in
	// the longest window, whatever their weight: 88 bytes for up to 4
	// entries, and MEMORY USAGE reports about 8.3 KB for a key holding
	// 1,000. Instants are rounded up to a tick of 1 µs for windows up to 35
	// minutes, 64 µs for a day (the longest window over 2^31), which can
	// only make a decision stricter, by up to a tick. An idle key lasts up
	// to 1.5 windows after its last admission. A key therefore costs
	// memory proportional to the calls it admitted in a window (at most
	// limit; WithResolution bounds it whatever the limit), and a decision
	// costs O(log N) on the server for N entries held, whatever the
	// weight.
	SlidingLog = keyrate.SlidingLog

	// FixedWindow counts events in windows aligned to multiples of the
	// window length since the Unix epoch: O(1) memory and work per key
	// whatever the limit (a small hash, about 100 bytes). The trade-off is the boundary burst: up to
	// 2*limit events can be admitted within a short span around the end of
	// one window and the start of the next. A refund takes its weight from
	// the count of the decision's window while that window lasts.
	FixedWindow = keyrate.FixedWindow

	// GCRA is the generic cell rate algorithm, the token bucket of the
	// core's keyrate.GCRA and of github.com/go-redis/redis_rate: a bucket
	// of limit tokens that refills one every window/limit (rounded up to a
	// microsecond), so a burst of limit, then one per window/limit. O(1)
	// memory and work per key (a small hash, a field per policy); after a
	// burst it keeps admitting at the refill rate, so a span of one window
	// may hold up to nearly twice the limit. A refund gives each bucket
	// back only the part of the decision's tokens it has not refilled yet,
	// less what refunds since the decision moved earlier: never more.
	//
	// It admits what redis_rate.Limit{Rate: limit, Burst: limit, Period:
	// window} admits, with the same Remaining, RetryAfter and ResetAfter,
	// so a user of redis_rate can switch with the same budgets, except
	// that: an admission's RetryAfter is 0 (redis_rate: -1); a refusal's
	// Remaining is the tokens left, which a smaller request could take
	// (redis_rate: 0); a weight above limit is refused with RetryAfter 0,
	// as it can never fit (redis_rate: the time the bucket takes to refill
	// that far); n == 0 is an admission, as everywhere in keyrate
	// (redis_rate: Allowed 0); redis_rate computes in floating-point
	// seconds, so with an interval of no exact binary value (7 per day) it
	// can report one token fewer Remaining, where this counts whole
	// microseconds; and the Decision has RefillAfter, the time until the
	// bucket holds one more token.
	GCRA = keyrate.GCRA
)

// DefaultPrefix is the key prefix a Limiter uses unless WithPrefix sets
// another.
const DefaultPrefix = "keyrate:"

// maxPrefixLen bounds the prefix, so that every key the Limiter writes is
// short: at most the prefix, a 10-byte tag, 128 bytes of key and a suffix.
const maxPrefixLen = 256

// DefaultTimeout is the per-call time budget a Limiter uses unless
// WithTimeout sets another.
const DefaultTimeout = 250 * time.Millisecond

// WithAlgorithm selects the counting algorithm. Default: SlidingLog, exact
// at a memory cost proportional to the limit; FixedWindow is O(1) per key
// but admits bursts of up to 2*limit across a window boundary; GCRA is
// O(1) per key, smooths a key to its refill rate after a burst of limit,
// and answers as redis_rate does.
func WithAlgorithm(a Algorithm) Option {
	return func(cfg *config) { cfg.algorithm = a }
}

// WithPrefix sets the prefix of every Redis key the Limiter writes.
// Default: DefaultPrefix ("keyrate:"). Limiters with the same prefix and
// algorithm share budgets per key, which is what replicas of one service
// want; give each route or differently configured limiter its own prefix
// (for example "keyrate:login:") so their budgets stay separate. (The
// tiers of one Limiter share a key's state on purpose, see WithTiers.) The
// prefix must not contain '{' or '}', which would move the hash tag that
// keeps each key in one Redis Cluster slot, and is at most 256 bytes.
func WithPrefix(p string) Option {
	return func(cfg *config) { cfg.prefix = p }
}

// WithTimeout sets the time budget of each call, applied on top of the
// caller's context: a call returns an error once the budget or the context
// runs out, whichever comes first, even while Redis is stopped, paused or
// unreachable. Default: DefaultTimeout (250ms). A shorter budget bounds the
// latency an outage adds to every request; a budget below the network's
// round trip turns slow answers into errors. It must be positive.
func WithTimeout(d time.Duration) Option {
	return func(cfg *config) { cfg.timeout = d }
}

// WithDenyCache lets the Limiter refuse, without asking Redis, a request
// that Redis has just refused and that must still be refused: after Redis
// refuses a request of weight n for a key, the same request is refused
// locally, with zero round trips, until the oldest event in the key's
// window leaves it or the maximum hold passes (WithDenyCacheMaxHold, 1s by
// default), whichever comes first. Until the oldest event leaves, no event
// leaves, whatever other clients and replicas do, so the refusal stands as
// long as Redis keeps the key; the local Decision is Redis's, counted down
// (RetryAfter, RefillAfter and ResetAfter shrink with the time elapsed).
// The cache never admits, so the limit stays exact across every replica.
// It pays off against a client that keeps hammering a key past its limit:
// each such request costs a map lookup instead of a round trip, and the
// key costs Redis one round trip per maximum hold.
//
// The maximum hold is there for a Redis that loses the key's events
// (FLUSHALL, a DEL, a restart without persistence, a failover that lost
// writes): Redis then admits the key again, and the cache would otherwise
// keep refusing it for as long as the forgotten refusal had to run, up to
// the longest window (a day, under a daily policy). With the bound it
// refuses wrongly for at most the maximum hold.
//
// Under several policies a refusal is held at most until the oldest event
// of any policy's window leaves it (the least RefillAfter among the
// policies that hold events), so that every policy's numbers in the local
// Decision stay Redis's; past that instant Redis is asked again. A refusal
// is used only for the policies it was made under: once SetTier changes the
// key's tier, or the key moves to another tier, Redis is asked again.
//
// It holds at most maxKeys keys (about 500 bytes each, every policy's
// numbers included, plus the key, which is at most 128 bytes, see the
// package doc); when full, the entry that would lapse soonest goes.
// Elapsed time is measured on the local monotonic clock from when each
// call was sent, stretched by 0.1% for the clocks' rates, so an entry
// lapses up to a round trip and 0.1% early, never late; a forward step of
// the Redis server's clock is the one thing it cannot see (Redis then
// admits up to the step earlier than the cache does, for at most the
// maximum hold). A refund (Refund, RefundN) drops the key's refusal from
// this Limiter's cache; other Limiters' caches cannot see it, and may go
// on refusing the key for up to their maximum hold. Default: no cache;
// maxKeys must be positive.
func WithDenyCache(maxKeys int) Option {
	return func(cfg *config) {
		cfg.denyKeys = maxKeys
		cfg.denySet = true
	}
}

// DefaultDenyCacheMaxHold is the longest the deny cache holds a refusal
// without asking Redis, unless WithDenyCacheMaxHold sets another.
const DefaultDenyCacheMaxHold = time.Second

// WithDenyCacheMaxHold sets the longest the deny cache (WithDenyCache)
// refuses a key without asking Redis: a refusal is held until the key's
// oldest event leaves its window or d has passed, whichever comes first.
// Default: DefaultDenyCacheMaxHold (1s). The trade-off: a key refused
// without pause costs Redis one round trip per d, and after Redis loses
// the key's events (see WithDenyCache) the cache goes on refusing it for
// up to d. A longer d saves little (at 1s a hot key already costs one
// round trip a second, whatever its traffic); it is bounded for the loss.
// d must be positive, and the option needs WithDenyCache.
func WithDenyCacheMaxHold(d time.Duration) Option {
	return func(cfg *config) {
		cfg.denyHold = d
		cfg.holdSet = true
	}
}

// WithHashTagSecret keys the hash tag that places each key's state in a
// Redis Cluster slot (see "Keys" in the package doc) with secret, through
// HMAC-SHA256, so that no client can choose where its keys land. Without a
// secret the tag is a plain hash of the key: it spreads keys over the slots
// whatever bytes they contain, against accidents, but a client that picks
// its own keys (API keys it registers, addresses it controls) can compute
// the tag and pile its keys onto one slot in about 16,000 tries per key, or
// onto one master of three in three.
//
// Every limiter that shares budgets (the replicas of a service) must be
// given the same secret and prefix: under another secret a key's state is
// another Redis key, so changing the secret starts every key over with an
// empty window, as a new prefix does. Keep it like any credential (32
// random bytes, from the service's secret store); it is copied. It must be
// at least 16 bytes. Default: no secret. A single Redis server has no
// slots, so it gains nothing there; the cost is an HMAC per call, well
// under a microsecond.
func WithHashTagSecret(secret []byte) Option {
	secret = append([]byte{}, secret...) // the caller's slice may change
	return func(cfg *config) {
		cfg.tagSecret = secret
		cfg.tagSet = true
	}
}

// WithResolution makes the sliding log record events at a resolution of
// d: the events a key admits within one tick of d (ticks are multiples of
// d since the Unix epoch, on the Redis server's clock) share one entry of
// its log, at the tick's end. A key then holds at most about longest
// window / d + 2 entries, 8 bytes each, whatever its limit: with d of a
// minute, 100,000 per day take about 12 KB per key instead of 800 KB.
//
// An event counts as if it happened at the end of its tick, up to d after
// it did, never before, so no window of real instants ever holds more than
// its limit. The cost is that RetryAfter, RefillAfter and ResetAfter run
// up to d long: a request may be refused up to d before an exact log would
// admit it. Replicas with different resolutions (during a configuration
// rollout) share a key safely.
//
// Default: none, every instant its own entry. d must be positive, in whole
// microseconds, and at most the shortest window of every tier (New,
// NewPolicies and SetTier check); it applies to SlidingLog, and with
// FixedWindow or GCRA it is an error. Each error wraps keyrate.ErrConfig.
func WithResolution(d time.Duration) Option {
	return func(cfg *config) { cfg.res, cfg.resSet = d, true }
}

// withClock makes decisions at the clock's instants instead of the Redis
// server's TIME. Only tests set it (through export_test.go), so that one
// manual clock can drive the in-process limiter and this backend alike.
func withClock(c keyrate.Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// newConfig applies opts and validates them (the tiers are validated with
// the tier table).
func newConfig(opts []Option) (config, error) {
	cfg := config{prefix: DefaultPrefix, timeout: DefaultTimeout, denyHold: DefaultDenyCacheMaxHold}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.algorithm != SlidingLog && cfg.algorithm != FixedWindow && cfg.algorithm != GCRA:
		return config{}, fmt.Errorf("%w: unknown algorithm %v", keyrate.ErrConfig, cfg.algorithm)
	case strings.ContainsAny(cfg.prefix, "{}"):
		return config{}, fmt.Errorf("%w: prefix %q contains '{' or '}'", keyrate.ErrConfig, cfg.prefix)
	case len(cfg.prefix) > maxPrefixLen:
		return config{}, fmt.Errorf("%w: prefix is %d bytes, want at most %d", keyrate.ErrConfig, len(cfg.prefix), maxPrefixLen)
	case cfg.denySet && cfg.denyKeys <= 0:
		return config{}, fmt.Errorf("%w: deny cache of %d keys, want > 0", keyrate.ErrConfig, cfg.denyKeys)
	case cfg.holdSet && !cfg.denySet:
		return config{}, fmt.Errorf("%w: a deny cache hold without a deny cache (WithDenyCache)", keyrate.ErrConfig)
	case cfg.denyHold <= 0:
		return config{}, fmt.Errorf("%w: deny cache hold is %v, want > 0", keyrate.ErrConfig, cfg.denyHold)
	case cfg.tagSet && len(cfg.tagSecret) < minTagSecret:
		return config{}, fmt.Errorf("%w: hash tag secret is %d bytes, want at least %d", keyrate.ErrConfig, len(cfg.tagSecret), minTagSecret)
	case cfg.timeout <= 0:
		return config{}, fmt.Errorf("%w: timeout is %v, want > 0", keyrate.ErrConfig, cfg.timeout)
	case cfg.tierSet && cfg.tierOf == nil:
		return config{}, fmt.Errorf("%w: tier function is nil", keyrate.ErrConfig)
	case cfg.resSet && (cfg.res <= 0 || cfg.res%time.Microsecond != 0):
		return config{}, fmt.Errorf("%w: resolution is %v, want a positive number of whole microseconds", keyrate.ErrConfig, cfg.res)
	case cfg.resSet && cfg.algorithm == FixedWindow:
		return config{}, fmt.Errorf("%w: resolution %v given to the fixed window, which has none", keyrate.ErrConfig, cfg.res)
	case cfg.resSet && cfg.algorithm == GCRA:
		return config{}, fmt.Errorf("%w: resolution %v given to GCRA, which has none", keyrate.ErrConfig, cfg.res)
	}
	return cfg, nil
}
