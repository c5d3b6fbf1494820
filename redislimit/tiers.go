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

// WithTiers gives keys different policies by plan, as keyrate.WithTiers
// does: tier names a key's tier, tiers maps each name to 1 to
// backend.MaxPolicies policies, and a key in no tier (or "") gets the
// default, New's or NewPolicies'. tier runs on every decision, on the
// identity the context carries (backend.ContextWithIdentity), else the key;
// it must be cheap and safe for concurrent use, and a panic in it gives the
// default tier. A key keeps its one Redis key, and its events, across
// tiers ("Several policies and tiers" in the README). Default: no tiers.
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
		t.name = name
		tab.named[name] = t
	}
	return tab, nil
}

// SetTier replaces the policies of the tier called name, or adds the tier
// ("" is the default tier), safely while the Limiter is in use: a decision
// sees the old policies or the new ones, whole. Keys keep their events in
// Redis, and the deny cache and the local fallback follow. It changes this
// Limiter alone: each replica must be told. It returns an error wrapping
// keyrate.ErrConfig, and changes nothing, for policies NewPolicies would
// refuse, ones the options rule out (WithResolution, the algorithm,
// WithLeases), or a name other than "" without WithTiers.
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
		if err := t.checkAlgorithm(keyrate.FixedWindow); err != nil { // FixedWindow or GCRA: either refuses alike
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
	t.name = name
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
