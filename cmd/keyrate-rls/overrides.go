package main

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/keyrate/keyrate"
)

// defaultOverridesPerDomain is how many distinct limit overrides each
// domain keeps a tier for at once. Envoy takes an override from its route
// configuration, a handful, or from a request's dynamic metadata, which a
// client may be able to vary.
const defaultOverridesPerDomain = 64

// overrideStat labels every override's metrics: its descriptor's values
// come from the request, and stay out of metrics.
const overrideStat = "(override)"

// overridePrefix starts the tier part of every override budget's key (see
// overrideShape); rule tiers start with 'r'.
const overridePrefix = 'o'

// overrides holds the rules made for descriptors that carry their own
// limit (RateLimitDescriptor.limit), which, as in envoyproxy/ratelimit,
// applies instead of any configured rule, outside shadow mode, in the
// configured domains.
//
// A store's tiers cannot be taken back, so overrides share a bounded set
// of them, slots, maxPerDomain per domain, and none is ever refused one: a
// new override takes a free slot, else the least recently used slot of
// its window, else of a shorter window, else the least recently used one.
// An override's budgets are keyed by the domain and the override itself,
// not by its slot (see tierNames), so an override moved out of its slot
// and back into another keeps its counts. The in-process janitor keeps a
// budget's events as long as its tier's longest window: a slot given to
// an override of a shorter window than budgets it decided may still hold
// events of keeps that longer window too, as a policy no request reaches
// (keeperPolicy), until those have left it.
type overrides struct {
	store        store
	log          *slog.Logger
	clock        keyrate.Clock // the store's, whose windows tell a slot idle
	maxPerDomain int
	rules        sync.Map // overrideKey -> *override
	mu           sync.Mutex
	domains      map[string]*overrideDomain // under mu
}

// keeperPolicy names the policy that makes a slot keep its budgets' events
// for an earlier holder's longer window; its limit is the largest a policy
// takes, and it never binds a decision that a real limit would not.
const keeperPolicy = "(retention)"

// overrideKey is an override as a request gives it, in its domain.
type overrideKey struct {
	domain     string
	perUnit    uint32
	unit       rlspb.RateLimitResponse_RateLimit_Unit
	multiplier uint32
}

// override is an override with a slot, and its rule.
type override struct {
	rule *rule
	slot *overrideSlot
}

// overrideDomain is a domain's slots.
type overrideDomain struct {
	tag   string // the domain's part of tier names: a digest, whatever bytes it holds
	slots []*overrideSlot
}

// overrideSlot is a tier of the store that overrides take turns in.
type overrideSlot struct {
	name   string        // the store's tier
	window time.Duration // of the override that holds it
	keep   time.Duration // how long its budgets' events must stay: window or longer
	holder overrideKey
	shape  string // the holder's tier part of its budgets' keys
	held   bool
	used   atomic.Int64 // when an override in it was last matched, in UnixNano
}

func (o *overrides) init(st store, log *slog.Logger, clock keyrate.Clock, maxPerDomain int) {
	o.store, o.log, o.clock, o.maxPerDomain = st, log, clock, maxPerDomain
	if o.maxPerDomain <= 0 {
		o.maxPerDomain = defaultOverridesPerDomain
	}
	o.domains = map[string]*overrideDomain{}
}

// match returns the rule for a descriptor's override and the key of its
// budget: one per domain, override and list of entries, every key and
// value of them.
func (o *overrides) match(domain string, desc *rlv3.RateLimitDescriptor) (*rule, string) {
	lim := desc.GetLimit()
	k := overrideKey{
		domain:     domain,
		perUnit:    lim.GetRequestsPerUnit(),
		unit:       rlspb.RateLimitResponse_RateLimit_Unit(lim.GetUnit()),
		multiplier: max(lim.GetUnitMultiplier().GetValue(), 1),
	}
	r, shape := o.rule(k)
	if r.blocked {
		return r, ""
	}
	var scratch [64]byte
	values := appendValue(scratch[:0], domain)
	for _, e := range desc.GetEntries() {
		values = appendValue(values, e.GetKey())
		values = appendValue(values, e.GetValue())
	}
	return r, storeKey(shape, values)
}

// rule returns the rule of k and the tier part of its budgets' keys,
// giving it a slot if it has none. An override that cannot be a limit (an
// unknown unit, a period too long, a limit above what a policy takes) or
// for which no slot is free refuses: never let through unlimited.
func (o *overrides) rule(k overrideKey) (*rule, string) {
	if v, ok := o.rules.Load(k); ok {
		ov := v.(*override)
		ov.slot.used.Store(o.now().UnixNano())
		return ov.rule, ov.rule.tier
	}
	l := limit{unit: k.unit, multiplier: k.multiplier, perUnit: int(min(k.perUnit, math.MaxInt32))}
	r := &rule{domain: k.domain, stat: overrideStat, limits: []limit{l}}
	var unitLen time.Duration
	for _, u := range units {
		if u.unit == k.unit && u.unit != rlspb.RateLimitResponse_RateLimit_WEEK { // envoy.type.v3.RateLimitUnit has no week
			unitLen = u.len
		}
	}
	if unitLen == 0 || time.Duration(k.multiplier) > math.MaxInt64/unitLen || k.perUnit == 0 || k.perUnit > math.MaxInt32 {
		// Refused without a tier, and not kept: such rules cost nothing
		// to make again, and keeping them would let requests grow the map.
		r.blocked = true
		return r, ""
	}
	window := unitLen * time.Duration(k.multiplier)
	r.limits[0].window = window

	o.mu.Lock()
	defer o.mu.Unlock()
	if v, ok := o.rules.Load(k); ok {
		ov := v.(*override)
		ov.slot.used.Store(o.now().UnixNano())
		return ov.rule, ov.rule.tier
	}
	d := o.domains[k.domain]
	if d == nil {
		sum := sha256.Sum256([]byte(k.domain))
		d = &overrideDomain{tag: base64.RawURLEncoding.EncodeToString(sum[:9])}
		o.domains[k.domain] = d
	}
	now := o.now()
	slot := d.free(o.maxPerDomain, window, now)
	// The tier part of the budgets' keys names the override, not the
	// slot: the domain's tag, the limit and the window.
	r.tier = string(overridePrefix) + d.tag + "/" + strconv.FormatUint(uint64(k.perUnit), 10) + "/" + window.String()
	names := o.store.tierNames()
	if slot.held {
		// Out of the map first, then out of the tier: a decision that still
		// finds the old override's slot finds its policies too (see
		// tierNames).
		o.rules.Delete(slot.holder)
		names.slots.Delete(slot.shape)
	}
	keep := window
	if idle := now.UnixNano()-slot.used.Load() > int64(slot.keep); slot.held && !idle {
		keep = max(keep, slot.keep)
	}
	policies := r.policies()
	if keep > window {
		policies = []keyrate.Policy{
			{Name: "limit", Limit: policies[0].Limit, Window: window},
			{Name: keeperPolicy, Limit: math.MaxInt32, Window: keep},
		}
	}
	if err := o.store.SetTier(slot.name, policies); err != nil {
		slot.held = false
		o.log.Warn("refusing descriptors with a limit override the store does not take", "err", err)
		r.blocked = true
		return r, ""
	}
	slot.keep = keep
	slot.window, slot.holder, slot.held = window, k, true
	slot.used.Store(now.UnixNano())
	slot.shape = r.tier
	names.slots.Store(r.tier, slot.name)
	o.rules.Store(k, &override{rule: r, slot: slot})
	return r, r.tier
}

// now reads the store's clock.
func (o *overrides) now() time.Time {
	if o.clock != nil {
		return o.clock.Now()
	}
	return time.Now()
}

// free returns the slot for a new override of window at now, of n slots
// at most: a slot never used, else the least recently used of the same
// window, else of a shorter one, else the least recently used.
func (d *overrideDomain) free(n int, window time.Duration, now time.Time) *overrideSlot {
	if len(d.slots) < n {
		s := &overrideSlot{name: fmt.Sprintf("%c%s#%d", overridePrefix, d.tag, len(d.slots))}
		d.slots = append(d.slots, s)
		return s
	}
	var same, shorter, any *overrideSlot
	older := func(a, b *overrideSlot) bool { return b == nil || a.used.Load() < b.used.Load() }
	for _, s := range d.slots {
		switch {
		case s.window == window && older(s, same):
			same = s
		case s.keep <= window && older(s, shorter):
			shorter = s
		}
		if older(s, any) {
			any = s
		}
	}
	switch {
	case same != nil:
		return same
	case shorter != nil:
		return shorter
	}
	return any
}
