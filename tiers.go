package keyrate

import (
	"context"
	"fmt"
	"maps"
	"math"

	"github.com/keyrate/keyrate/internal/identity"
)

// WithTiers gives keys their plan's policies: tier names a key's tier, tiers
// maps names to policies; a key in no tier of the map gets the default. tier
// runs on every decision, so it must be cheap and safe for concurrent use; a
// panic in it means the default tier. It sees the client's identity as sent
// (backend.ContextWithIdentity, as httplimit and grpclimit set it), else
// the key.
// Default: no tiers.
func WithTiers(tier func(key string) string, tiers map[string][]Policy) Option {
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
	def   *tier            // the default tier, byID[0]
	named map[string]*tier // by name, the default as ""
	byID  []*tier          // by tier.id; ids are never reused
	// longest is the longest window of every tier: how long any log may
	// need to keep its events.
	longest int64
}

func newTierTable(def *tier) *tierTable {
	return &tierTable{def: def, named: map[string]*tier{"": def}, byID: []*tier{def}, longest: def.longest}
}

// with returns a copy of tab in which name's policies are t's. A name keeps
// its id when replaced, so logs it decided stay attributed to it.
func (tab *tierTable) with(name string, t *tier) (*tierTable, error) {
	next := &tierTable{named: maps.Clone(tab.named), byID: append([]*tier(nil), tab.byID...)}
	if old, ok := tab.named[name]; ok {
		t.id = old.id
		next.byID[t.id] = t
	} else {
		if len(tab.byID) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: %d tiers, want at most %d", ErrConfig, len(tab.byID)+1, math.MaxUint16+1)
		}
		t.id = uint16(len(tab.byID))
		next.byID = append(next.byID, t)
	}
	next.named[name] = t
	next.def = next.byID[0]
	for _, t := range next.byID {
		next.longest = max(next.longest, t.longest)
	}
	return next, nil
}

// SetTier replaces or adds the policies of the tier called name ("" is the
// default) while the limiter is in use; a decision sees old or new, whole.
// Keys keep their events, counted by the new policies from then on (under
// FixedWindow and GCRA each policy keeps its count by its place); so does a key
// the tier function moves. It refuses, changing nothing, policies New would,
// a window the coarse clock or the ticks cannot tell (WithMaxWindow), a
// calendar policy on a limiter made without one, and a named tier without
// WithTiers.
func (l *Limiter) SetTier(name string, policies []Policy) error {
	field, err := tierField(name, l.tierOf != nil)
	if err != nil {
		return err
	}
	t, err := newTier(field, policies)
	if err != nil {
		return err
	}
	if err := checkCoarse(l.coarseResolution, t); err != nil {
		return err
	}
	if t.cals != 0 && !l.keys.counts {
		return fmt.Errorf("%w: %s has a calendar policy, but the limiter was made without one, so its keys have no room for the counts; give one to NewPolicies or WithTiers", ErrConfig, field)
	}
	if err := t.setup(l.scale, l.algorithm, l.base.UnixNano()); err != nil {
		return err
	}
	l.setTier.Lock()
	defer l.setTier.Unlock()
	next, err := l.tiers.Load().with(name, t)
	if err != nil {
		return err
	}
	l.publish(next)
	return nil
}

// tierField returns SetTier's name for tier name's policies in errors, or why
// a backend without tiers (tiered false) cannot have that tier.
func tierField(name string, tiered bool) (string, error) {
	switch {
	case name == "":
		return "policies", nil
	case !tiered:
		return "", fmt.Errorf("%w: tier %q: the limiter has no tier function (WithTiers)", ErrConfig, name)
	}
	return fmt.Sprintf("tiers[%q]", name), nil
}

// publish makes tab the limiter's tiers.
func (l *Limiter) publish(tab *tierTable) {
	l.tiers.Store(tab)
	if l.tierOf == nil {
		l.only.Store(tab.def)
	}
}

// tierFor returns the tier that decides key now. A limiter without tiers
// pays one load for it; Allow and Take spell it out, as the compiler would
// not inline it.
func (l *Limiter) tierFor(key string) *tier {
	t := l.only.Load()
	if t == nil {
		t = l.namedTier(key)
	}
	return t
}

// namedTier returns the tier the tier function names for key, or the
// default tier when there is no such tier.
func (l *Limiter) namedTier(key string) *tier {
	name := tierName(l.tierOf, key)
	tab := l.tiers.Load()
	if t, ok := tab.named[name]; ok {
		return t
	}
	return tab.def
}

// tierOfContext returns the tier the tier function tier names for the
// request of key under ctx: for the identity ctx carries, else key; "" (the
// default) when tier panics (backend.TierOf).
func tierOfContext(ctx context.Context, tier func(string) string, key string) string {
	if id, ok := identity.From(ctx); ok {
		key = id
	}
	return tierName(tier, key)
}

// tierName returns tier's answer for as, or "" when it panics.
func tierName(tier func(string) string, as string) (name string) {
	defer func() {
		if recover() != nil {
			name = ""
		}
	}()
	return tier(as)
}

// retention returns the tier whose longest window g keeps its events for:
// the tier that last decided it. Called with g.mu held.
func (l *Limiter) retention(g *eventLog) *tier {
	tab := l.tiers.Load()
	if int(g.tier) < len(tab.byID) {
		return tab.byID[g.tier]
	}
	return tab.def // unreachable: ids are published before logs get them
}

// tierKey returns what the tier function decides key by under ctx: the
// identity ctx carries, else key. Without tiers it looks for nothing.
func (l *Limiter) tierKey(ctx context.Context, key string) string {
	if l.tierOf == nil {
		return key
	}
	if id, ok := identity.From(ctx); ok {
		return id
	}
	return key
}
