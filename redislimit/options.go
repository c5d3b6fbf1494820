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
	algorithm keyrate.Algorithm
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

// defaultPrefix is the key prefix a Limiter uses unless WithPrefix sets
// another.
const defaultPrefix = "keyrate:"

// maxPrefixLen bounds the prefix, so that every key the Limiter writes is
// short: at most the prefix, a 10-byte tag, 128 bytes of key and a suffix.
const maxPrefixLen = 256

// defaultTimeout is the per-call time budget a Limiter uses unless
// WithTimeout sets another.
const defaultTimeout = 250 * time.Millisecond

// WithAlgorithm selects the counting algorithm: keyrate.SlidingLog (the
// default), exact, at 8 bytes per instant a key admitted at in its longest
// window; keyrate.FixedWindow, a hash of about 100 bytes per key, which
// admits up to 2*limit across a window boundary; or keyrate.GCRA, the token
// bucket of go-redis/redis_rate, a hash of about 150 bytes, which smooths a
// key to its refill rate after a burst. Each decides in one script run; see
// "Algorithms" in the README for their memory and where GCRA's numbers
// differ from redis_rate's.
func WithAlgorithm(a keyrate.Algorithm) Option {
	return func(cfg *config) { cfg.algorithm = a }
}

// WithPrefix sets the prefix of every Redis key the Limiter writes.
// Default: "keyrate:". Limiters with one prefix and algorithm share each
// key's budget, as replicas of a service should; give each route or
// differently configured limiter its own ("keyrate:login:"). The prefix is
// at most 256 bytes and has no '{' or '}', which would move the key's
// Redis Cluster hash tag.
func WithPrefix(p string) Option {
	return func(cfg *config) { cfg.prefix = p }
}

// WithTimeout sets the time budget of each call, on top of the caller's
// context: a call returns by its end even while Redis is stopped, paused or
// unreachable. Default: 250ms. A shorter budget bounds what an outage adds
// to each request; one below the network's round trip turns slow answers
// into errors. It must be positive.
func WithTimeout(d time.Duration) Option {
	return func(cfg *config) { cfg.timeout = d }
}

// WithDenyCache refuses locally, with no round trip, a request that Redis
// has just refused and must still refuse: until the oldest event in the
// key's window leaves it, or the maximum hold passes (WithDenyCacheMaxHold,
// 1s), whichever is first. It never admits, so the limit stays exact; a
// hammered key then costs a map lookup a request and one round trip per
// hold. It holds at most maxKeys keys, about 500 bytes each plus the key,
// dropping the one that lapses soonest. Default: none; maxKeys must be
// positive. See "Deny cache" in the README for its exact bounds.
func WithDenyCache(maxKeys int) Option {
	return func(cfg *config) {
		cfg.denyKeys = maxKeys
		cfg.denySet = true
	}
}

// defaultDenyHold is the longest the deny cache holds a refusal without
// asking Redis, unless WithDenyCacheMaxHold sets another.
const defaultDenyHold = time.Second

// WithDenyCacheMaxHold sets the longest the deny cache (WithDenyCache)
// refuses a key without asking Redis. Default: 1s. A key refused without
// pause costs Redis one round trip per d; after Redis loses the key's
// events (a FLUSHALL, a restart), the cache goes on refusing it wrongly for
// up to d. d must be positive, and the option needs WithDenyCache.
func WithDenyCacheMaxHold(d time.Duration) Option {
	return func(cfg *config) {
		cfg.denyHold = d
		cfg.holdSet = true
	}
}

// WithHashTagSecret makes the hash tag that places each key in a Redis
// Cluster slot an HMAC-SHA256 keyed by secret, so that no client that picks
// its own keys can aim them at one slot or master. Default: none, a plain
// hash anyone can compute. The secret is copied, at least 16 bytes, kept
// like a credential, and the same on every limiter that shares budgets:
// changing it starts every key over. Cost: an HMAC per call, under a
// microsecond. See "Keys and Redis Cluster" in the README.
func WithHashTagSecret(secret []byte) Option {
	secret = append([]byte{}, secret...) // the caller's slice may change
	return func(cfg *config) {
		cfg.tagSecret = secret
		cfg.tagSet = true
	}
}

// WithResolution makes the sliding log record the events of one tick of d
// (multiples of d on the Redis server's clock) in one entry, at the tick's
// end: a key then holds about longest window / d + 2 entries whatever its
// limit. No window of real instants holds more than its limit; the cost is
// refusals, and RetryAfter, up to d early. Default: none. d is whole
// microseconds, at most every tier's shortest window, for the sliding log
// alone; otherwise the error wraps keyrate.ErrConfig ("Algorithms" in the
// README).
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
	cfg := config{prefix: defaultPrefix, timeout: defaultTimeout, denyHold: defaultDenyHold}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.algorithm != keyrate.SlidingLog && cfg.algorithm != keyrate.FixedWindow && cfg.algorithm != keyrate.GCRA:
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
	case cfg.resSet && cfg.algorithm == keyrate.FixedWindow:
		return config{}, fmt.Errorf("%w: resolution %v given to the fixed window, which has none", keyrate.ErrConfig, cfg.res)
	case cfg.resSet && cfg.algorithm == keyrate.GCRA:
		return config{}, fmt.Errorf("%w: resolution %v given to GCRA, which has none", keyrate.ErrConfig, cfg.res)
	}
	return cfg, nil
}
