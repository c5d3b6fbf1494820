package redislimit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// WithLocalFallback makes the Limiter decide in this process when Redis
// cannot answer, instead of returning an error: when it is unreachable,
// refuses connections, outlives the time budget, replies that it cannot
// serve now (LOADING, BUSY, ...), is out of memory and cannot record an
// admission, or while the circuit breaker is open after any of these (see
// TakeContext). The decision then comes from an in-process
// keyrate.Limiter with the same policies and tiers, each limit scaled by
// share and rounded down, but at least 1. Give each of N replicas a share
// of 1/N and together they admit about the limit while Redis is down; a
// share of 1 lets each replica admit the whole limit on its own.
//
// Such a Decision has Fallback set, and its Limit, Remaining and every
// policy's numbers are the fallback's, so that the RateLimit fields a
// middleware writes stay true; TakeContext returns it with a nil error,
// so middleware answers it like any other decision, and its failure mode
// (FailOpen, FailClosed) applies only when no decision at all can be had.
// promlimit counts such decisions as source="fallback".
//
// What the fallback admits is not written to Redis when it answers again,
// and the fallback does not know what Redis admitted before the outage. So
// within a window that spans an outage, a client can get up to its limit
// through Redis and limit × share more through each replica's fallback:
// with one replica and a share of 0.5, one and a half times its limit. The
// fallback keeps its counts after Redis recovers, so a Redis that goes
// down again within the window does not give a client a second share.
// Decisions return to Redis within a second of it answering again (the
// breaker's probes).
//
// The fallback counts with the exact sliding log whatever the Algorithm
// (FixedWindow would admit more), without WithResolution, on the local
// clock, keyed by the same bounded keys as Redis (see "Keys" in the
// package doc) and the name of their tier, and SetTier changes its tiers
// along with the Limiter's. A key that moves to another tier during an
// outage (a plan change, not SetTier) starts over in the fallback. It
// holds at most WithLocalFallbackMaxKeys keys (100,000 by default), 4 bytes
// per event held plus about 110 per key, and makes room by forgetting the
// keys it decided least recently (see keyrate.WithMaxKeys); it runs no
// janitor, so the Limiter still needs no Close.
//
// share must be greater than 0 and at most 1; otherwise New returns an
// error wrapping keyrate.ErrConfig. Default: no fallback, and calls return
// an error wrapping ErrUnavailable (or ErrOutOfMemory) while Redis cannot
// answer.
func WithLocalFallback(share float64) Option {
	return func(cfg *config) { cfg.fallbackShare, cfg.fallbackSet = share, true }
}

// DefaultLocalFallbackMaxKeys is how many keys the local fallback tracks
// at most, unless WithLocalFallbackMaxKeys sets another bound.
const DefaultLocalFallbackMaxKeys = 100_000

// WithLocalFallbackMaxKeys bounds the keys the local fallback
// (WithLocalFallback) tracks at once. Past n, a new key makes room by
// evicting the keys decided least recently, which forget their local
// events: a key idle longer than every other tracked key may then get its
// share again within a window. Size it a sixteenth above the clients
// active within the longest window. Default: DefaultLocalFallbackMaxKeys.
// n must be positive, and the option needs WithLocalFallback.
func WithLocalFallbackMaxKeys(n int) Option {
	return func(cfg *config) { cfg.fallbackKeys, cfg.fallbackKeysSet = n, true }
}

// checkFallback validates the fallback's options.
func checkFallback(cfg *config) error {
	switch {
	case cfg.fallbackSet && !(cfg.fallbackShare > 0 && cfg.fallbackShare <= 1): // NaN too
		return fmt.Errorf("%w: local fallback share is %v, want more than 0 and at most 1", keyrate.ErrConfig, cfg.fallbackShare)
	case cfg.fallbackKeysSet && !cfg.fallbackSet:
		return fmt.Errorf("%w: a local fallback key bound without a local fallback (WithLocalFallback)", keyrate.ErrConfig)
	case cfg.fallbackKeysSet && cfg.fallbackKeys <= 0:
		return fmt.Errorf("%w: local fallback of %d keys, want > 0", keyrate.ErrConfig, cfg.fallbackKeys)
	}
	return nil
}

// fallback is the in-process Limiter that decides while Redis cannot.
type fallback struct {
	share float64
	lim   *keyrate.Limiter
}

// newFallback returns the fallback of a Limiter configured by cfg, whose
// tiers are tab, with a tier function when tiered.
func newFallback(cfg *config, tab *tierTable, tiered bool) (*fallback, error) {
	f := &fallback{share: cfg.fallbackShare}
	keys := DefaultLocalFallbackMaxKeys
	if cfg.fallbackKeysSet {
		keys = cfg.fallbackKeys
	}
	// No janitor: a Limiter has no Close to stop one. The bound on keys
	// bounds the memory instead. SetTier may give Redis windows of any
	// length, and the fallback must hold them too: its ticks span a year
	// (20ms ticks; see keyrate.WithMaxWindow), or the longest window given.
	opts := []keyrate.Option{keyrate.WithMaxKeys(keys), keyrate.WithJanitorInterval(0), keyrate.WithMaxWindow(fallbackMaxWindow)}
	if cfg.clock != nil {
		opts = append(opts, keyrate.WithClock(cfg.clock))
	}
	if tiered {
		tiers := make(map[string][]keyrate.Policy, len(tab.named))
		for name, t := range tab.named {
			if name != "" {
				tiers[name] = f.scale(t.policies)
			}
		}
		// The Limiter works out a key's tier as it does for Redis and
		// puts its name in front of the key (see fallbackKey), so that the
		// tier function runs once, on what it sees for Redis.
		opts = append(opts, keyrate.WithTiers(fallbackTier, tiers))
	}
	lim, err := keyrate.NewPolicies(f.scale(tab.def.policies), opts...)
	if err != nil {
		return nil, fmt.Errorf("redislimit: local fallback: %w", err)
	}
	f.lim = lim
	return f, nil
}

// fallbackMaxWindow is the longest window the local fallback holds in a
// tier SetTier gives it later: a year.
const fallbackMaxWindow = 365 * 24 * time.Hour

// scale returns policies with each limit scaled by the share.
func (f *fallback) scale(policies []keyrate.Policy) []keyrate.Policy {
	out := make([]keyrate.Policy, len(policies))
	for i, p := range policies {
		p.Limit = scaleLimit(p.Limit, f.share)
		out[i] = p
	}
	return out
}

// scaleLimit returns limit × share rounded down, at least 1 and at most
// limit. The product is nudged up by a trillionth first, so that a share
// binary floating point cannot hold exactly (0.29 × 100 is
// 28.999999999999996) counts as written, not one lower; the product's
// own rounding error is thousands of times smaller.
func scaleLimit(limit int, share float64) int {
	v := float64(limit) * share
	return min(limit, max(1, int(math.Floor(v+v*1e-12))))
}

// setTier gives the fallback's tier name the scaled policies.
func (f *fallback) setTier(name string, policies []keyrate.Policy) error {
	if err := f.lim.SetTier(name, f.scale(policies)); err != nil {
		return fmt.Errorf("redislimit: local fallback: %w", err)
	}
	return nil
}

// fallbackTake decides a request of weight n for key, bounded as id, in
// the fallback, under the tier the Limiter's tier function names for it
// under ctx, which is the caller's and not done.
func (l *Limiter) fallbackTake(ctx context.Context, key, id string, n int) keyrate.Decision {
	d := l.fallback.lim.Take(l.fallbackKey(ctx, key, id), n)
	d.Fallback = true
	return d
}

// fallbackKey returns the fallback's key for the bounded key id, whose
// tier the tier function names for the request of key under ctx: the
// length of the tier's name (a uvarint), the name and id, so that a name
// of any bytes reads back whole; id alone without tiers.
func (l *Limiter) fallbackKey(ctx context.Context, key, id string) string {
	if l.tierOf == nil {
		return id
	}
	name := backend.TierOf(ctx, l.tierOf, key)
	if _, ok := l.tiers.Load().named[name]; !ok {
		name = "" // the default tier, as tierFor finds it
	}
	b := make([]byte, 0, binary.MaxVarintLen64+len(name)+len(id))
	b = binary.AppendUvarint(b, uint64(len(name)))
	return string(append(append(b, name...), id...))
}

// fallbackTier is the fallback's tier function: the name fallbackKey put
// in front of the key.
func fallbackTier(key string) string {
	n, k := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
	if k <= 0 || uint64(len(key)-k) < n {
		return "" // not a key fallbackKey made
	}
	return key[k : k+int(n)]
}
