package main

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// maxOverrides bounds the distinct limits that descriptors' overrides may
// bring, each a tier of the store. Envoy takes an override from its route
// configuration or from a request's dynamic metadata; past the bound, a
// descriptor with a new override is refused, never let through unlimited.
const maxOverrides = 256

// overrideStat labels every override's metrics: its descriptor's values
// come from the request, and stay out of metrics.
const overrideStat = "(override)"

// overrides holds the rules made for descriptors that carry their own
// limit (RateLimitDescriptor.limit), which, as in envoyproxy/ratelimit,
// applies instead of any configured rule, outside shadow mode.
type overrides struct {
	store store
	log   *slog.Logger
	rules sync.Map // overrideLimit -> *rule
	mu    sync.Mutex
	n     int // rules made, under mu
}

// overrideLimit is an override as the request gives it.
type overrideLimit struct {
	perUnit    uint32
	unit       rlspb.RateLimitResponse_RateLimit_Unit
	multiplier uint32
}

// match returns the rule for a descriptor's override and the key of its
// budget: one per domain and list of entries, every key and value of them.
func (o *overrides) match(domain string, desc *rlv3.RateLimitDescriptor) (*rule, string) {
	lim := desc.GetLimit()
	ol := overrideLimit{
		perUnit:    lim.GetRequestsPerUnit(),
		unit:       rlspb.RateLimitResponse_RateLimit_Unit(lim.GetUnit()),
		multiplier: max(lim.GetUnitMultiplier().GetValue(), 1),
	}
	r := o.rule(ol)
	if r.blocked {
		return r, ""
	}
	var scratch [64]byte
	values := appendValue(scratch[:0], domain)
	for _, e := range desc.GetEntries() {
		values = appendValue(values, e.GetKey())
		values = appendValue(values, e.GetValue())
	}
	return r, storeKey(r.tier, values)
}

// rule returns the rule of ol, making its tier on first use. An override
// that cannot be a limit (an unknown unit, a period too long, a limit
// above what a policy takes) or past maxOverrides refuses.
func (o *overrides) rule(ol overrideLimit) *rule {
	if r, ok := o.rules.Load(ol); ok {
		return r.(*rule)
	}
	l := limit{unit: ol.unit, multiplier: ol.multiplier, perUnit: int(min(ol.perUnit, math.MaxInt32))}
	r := &rule{stat: overrideStat, limits: []limit{l}}
	var unitLen time.Duration
	for _, u := range units {
		if u.unit == ol.unit && u.unit != rlspb.RateLimitResponse_RateLimit_WEEK { // envoy.type.v3.RateLimitUnit has no week
			unitLen = u.len
		}
	}
	if unitLen == 0 || time.Duration(ol.multiplier) > math.MaxInt64/unitLen || ol.perUnit == 0 || ol.perUnit > math.MaxInt32 {
		// Refused without a tier, and not kept: such rules cost nothing
		// to make again, and keeping them would let requests grow the map.
		r.blocked = true
		return r
	}
	r.limits[0].window = unitLen * time.Duration(ol.multiplier)
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.rules.Load(ol); ok {
		return r.(*rule)
	}
	if o.n >= maxOverrides {
		if o.n == maxOverrides {
			o.log.Warn("refusing descriptors with new limit overrides: the bound of distinct overrides is reached", "max", maxOverrides)
			o.n++ // warn once
		}
		r.blocked = true
		return r
	}
	r.tier = fmt.Sprintf("o%d/%v", l.perUnit, r.limits[0].window)
	if err := o.store.SetTier(r.tier, r.policies()); err != nil {
		o.log.Warn("refusing descriptors with a limit override the store does not take", "err", err)
		r.blocked = true
		return r
	}
	o.n++
	o.rules.Store(ol, r)
	return r
}
