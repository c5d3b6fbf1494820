package keyrate

import (
	"context"
	"fmt"
	"maps"
	"math"

	"github.com/keyrate/keyrate/internal/identity"
)

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
