package keyrate

import (
	"fmt"
	"maps"
	"math"
)

// WithTiers gives keys different policies, such as a free plan's and a paid
// one's: tier names a key's tier and tiers maps names to policies (1 to
// MaxPolicies each, validated as NewPolicies'). A key in no tier of the map,
// or in tier "", gets the default tier: NewPolicies' (or New's) policies.
// SetTier changes or adds tiers later.
//
// tier is called on every decision, outside any lock, so a key that changes
// plan gets its new policies from its next request. It must be safe for
// concurrent use and cheap (a map lookup, a prefix test). A panic in it is
// recovered, and the key gets the default tier, never no limit.
//
// tier sees the client's identity as sent: TakeContext and WaitN pass it the
// identity in their context (ContextWithIdentity), which httplimit and
// grpclimit set to the API key or address, never the route, a header name or
// a digest; so strings.HasPrefix(key, "pro-") works behind them too. Other
// calls pass the key.
//
// A key's log keeps the events of the longest window of the tier that last
// decided it; moved to a tier with a longer window, it counts those that
// remain (see SetTier). The limiter's tick comes from the longest window of
// all its tiers; SetTier may add longer ones up to WithMaxWindow. A nil
// tier function, an invalid policy or a tier named "" is an error wrapping
// ErrConfig. Default: no tiers.
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

// SetTier replaces the policies of the tier called name, or adds the tier;
// name "" is the default tier. It is safe to call while the limiter is in
// use: each decision sees either the old policies or the new ones, whole.
//
// Keys keep their recorded events, and the new policies count them from
// each key's next decision on. Events that had already left the longest
// window of a key's old tier are gone, and do not count against a new,
// longer window. Under FixedWindow and GCRA each policy keeps its count or
// bucket by its place among the tier's policies; a place the old policies
// did not have starts empty. The same holds for a key the tier function
// moves to another tier.
//
// It returns an error wrapping ErrConfig, and changes nothing, for policies
// New or NewPolicies would refuse, a window not longer than WithCoarseClock's
// resolution, a window longer than the limiter holds (WithMaxWindow), or a
// name other than "" on a limiter made without WithTiers (no key could
// ever be in that tier).
func (l *Limiter) SetTier(name string, policies []Policy) error {
	field, err := TierField(name, l.tierOf != nil)
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

// TierField returns how SetTier names the policies of the tier called name
// in its errors: "policies" for the default tier (""), `tiers["pro"]` for
// another; or an error wrapping ErrConfig for a named tier of a backend
// without a tier function (tiered false), as no key could ever be in it.
// Every backend's SetTier checks with it.
func TierField(name string, tiered bool) (string, error) {
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
	name := TierName(l.tierOf, key)
	tab := l.tiers.Load()
	if t, ok := tab.named[name]; ok {
		return t
	}
	return tab.def
}

// TierName returns the answer of the tier function tier for as, the
// client's identity (see TierKey), or "", the default tier, when tier
// panics: a failing tier function never crashes a backend and never leaves
// a key unlimited. Every backend with tiers asks through it.
func TierName(tier func(string) string, as string) (name string) {
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
