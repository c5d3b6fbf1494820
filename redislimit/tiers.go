package redislimit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// WithTiers gives keys different policies, such as one set for a free plan
// and another for a paid one: tier(key) names the key's tier and tiers maps
// each name to its policies. A key whose tier is not in the map, or whose
// tier is "", gets the default tier: the policies given to NewPolicies (or
// New). SetTier changes or adds tiers later. The semantics are the
// in-process keyrate.WithTiers'.
//
// tier is called on every decision, before the deny cache and Redis are
// consulted, so a key that changes plan is decided under its new policies
// from its next request on. It sees the client's identity as the client
// sent it, as the in-process tier function does: the identity TakeContext's
// context carries (backend.ContextWithIdentity), which httplimit and
// grpclimit put there (an API key as its header or metadata holds it,
// whatever its length; never a route, a header name or a digest), and the
// key as given to TakeContext when the context carries none. It must be
// safe for concurrent use, and cheap: a map lookup or a prefix test, not a
// database query. If it panics, the panic is recovered and the key gets the
// default tier: a failing tier function never crashes the limiter and never
// leaves a key unlimited.
//
// Every tier of a key shares its one Redis key, so a key that changes tier
// keeps its events. In the sliding log they count against the new policies
// at once, except those older than the longest window of the tier that
// last admitted an event for the key, which that admission dropped (or
// which expired with the key). A refusal under a tier with a longer
// window keeps the key in Redis for that window. The fixed window keeps a
// count per window length: a policy whose window length the key has not
// been under lately starts from 0.
//
// Each tier has 1 to backend.MaxPolicies policies, validated as
// NewPolicies'. A nil tier function, an invalid policy or a tier named ""
// (the default tier is NewPolicies') make the constructor return an error
// wrapping keyrate.ErrConfig. Default: no tiers, every key under the
// default tier.
func WithTiers(tier func(key string) string, tiers map[string][]keyrate.Policy) Option {
	return func(cfg *config) {
		cfg.tierSet = true
		cfg.tierOf = tier
		cfg.tiers = maps.Clone(tiers)
	}
}

// tierTable is every tier of a Limiter, immutable once published: SetTier
// builds a new table and swaps it in, so a decision reads tiers with one
// atomic load and no lock.
type tierTable struct {
	def   *tier            // the default tier
	named map[string]*tier // by name, the default as ""
}

// newTierTable builds the table of the default tier def and the tiers
// WithTiers gave, validating each, and each against the resolution res
// (0: none).
func newTierTable(def *tier, tiers map[string][]keyrate.Policy, res time.Duration) (*tierTable, error) {
	if err := def.checkResolution(res); err != nil {
		return nil, err
	}
	tab := &tierTable{def: def, named: map[string]*tier{"": def}}
	for _, name := range slices.Sorted(maps.Keys(tiers)) { // the first error in a fixed order
		field := fmt.Sprintf("tiers[%q]", name)
		if name == "" {
			return nil, fmt.Errorf("%w: %s: the default tier is the limiter's own policies", keyrate.ErrConfig, field)
		}
		t, err := newTier(field, tiers[name])
		if err != nil {
			return nil, err
		}
		if err := t.checkResolution(res); err != nil {
			return nil, err
		}
		tab.named[name] = t
	}
	return tab, nil
}

// SetTier replaces the policies of the tier called name, or adds the tier;
// name "" is the default tier. It is safe to call while the limiter is in
// use: each decision sees either the old policies or the new ones, whole.
//
// Keys keep their recorded events in Redis, and the new policies count them
// from each key's next decision on (see WithTiers for the events that have
// already gone). Refusals the deny cache holds under the old policies are
// no longer used: the next call for such a key asks Redis.
//
// SetTier changes this Limiter alone: replicas sharing the Redis each hold
// their own tiers, and each must be told. It changes the local fallback's
// tier too (WithLocalFallback), scaled by its share.
//
// It returns an error wrapping keyrate.ErrConfig, and changes nothing, for
// policies NewPolicies would refuse, a window shorter than the resolution
// (WithResolution), a calendar policy under FixedWindow, GCRA or
// WithLeases, or a name other than "" on a limiter made without WithTiers
// (no key could ever be in that tier).
func (l *Limiter) SetTier(name string, policies []keyrate.Policy) error {
	field, err := backend.TierField(name, l.tierOf != nil)
	if err != nil {
		return err
	}
	t, err := newTier(field, policies)
	if err != nil {
		return err
	}
	if err := t.checkResolution(time.Duration(l.res) * time.Microsecond); err != nil {
		return err
	}
	if l.script != slidingLogScript {
		if err := t.checkAlgorithm(FixedWindow); err != nil { // FixedWindow or GCRA: either refuses alike
			return err
		}
	}
	if l.leases != nil {
		if err := t.checkLease(time.Duration(l.leases.d)); err != nil {
			return err
		}
		t.lengthen(time.Duration(l.leases.d))
	}
	l.setTier.Lock()
	defer l.setTier.Unlock()
	if l.fallback != nil {
		if err := l.fallback.setTier(name, policies); err != nil {
			return err
		}
	}
	old := l.tiers.Load()
	next := &tierTable{def: old.def, named: maps.Clone(old.named)}
	next.named[name] = t
	if name == "" {
		next.def = t
	}
	l.tiers.Store(next)
	return nil
}

// tierFor returns the tier that decides key now, under ctx.
func (l *Limiter) tierFor(ctx context.Context, key string) *tier {
	tab := l.tiers.Load()
	if l.tierOf == nil {
		return tab.def
	}
	if t, ok := tab.named[backend.TierOf(ctx, l.tierOf, key)]; ok {
		return t
	}
	return tab.def
}
