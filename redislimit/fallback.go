package redislimit

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/keyrate/keyrate"
)

// WithLocalFallback decides in this process while Redis cannot answer (see
// TakeContext), instead of returning an error: an in-process
// keyrate.Limiter with the same policies and tiers, each limit scaled by
// share (rounded down, at least 1), counting on the exact sliding log. Its
// Decisions have Fallback set and a nil error. What it admits is not
// written to Redis: give each of N replicas 1/N. Default: none; share is
// more than 0 and at most 1. Cost: up to 100,000 keys (see
// WithLocalFallbackMaxKeys) and no goroutine ("When Redis is down", README).
func WithLocalFallback(share float64) Option {
	return func(cfg *config) { cfg.fallbackShare, cfg.fallbackSet = share, true }
}

// defaultFallbackKeys is how many keys the local fallback tracks at most,
// unless WithLocalFallbackMaxKeys sets another bound.
const defaultFallbackKeys = 100_000

// WithLocalFallbackMaxKeys bounds the keys the local fallback
// (WithLocalFallback) tracks, about 127 bytes each plus 4 per event held.
// Default: 100,000. Past n, a new key evicts those decided least recently,
// which forget their events and may get their share again within a window:
// size it a sixteenth above the clients active in the longest window. n
// must be positive, and the option needs WithLocalFallback.
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
	keys := defaultFallbackKeys
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
		// The Limiter chooses a key's tier once, for Redis and the
		// fallback alike, and puts its name in front of the fallback's key
		// (fallbackKey), which fallbackTier reads back.
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

// fallbackTake decides a request of weight n for the bounded key id in the
// fallback, under tr, the tier the Limiter chose for it: the tier function
// runs once per decision, whoever decides.
func (l *Limiter) fallbackTake(tr *tier, id string, n int) keyrate.Decision {
	d := l.fallback.lim.Take(l.fallbackKey(tr, id), n)
	d.Fallback = true
	return d
}

// fallbackKey returns the fallback's key for the bounded key id under tr:
// the length of the tier's name (a uvarint), the name and id, so that a
// name of any bytes reads back whole (fallbackTier) and each tier keeps
// its own keys, as documented; id alone without tiers. The name travels
// in the key because the fallback's TakeAll, like keyrate.Limiter's, names
// a key's tier from the key alone.
func (l *Limiter) fallbackKey(tr *tier, id string) string {
	if l.tierOf == nil {
		return id
	}
	b := make([]byte, 0, binary.MaxVarintLen64+len(tr.name)+len(id))
	b = binary.AppendUvarint(b, uint64(len(tr.name)))
	return string(append(append(b, tr.name...), id...))
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
