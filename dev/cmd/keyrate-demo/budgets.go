package main

import (
	"context"
	"strings"
	"sync"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
	"github.com/keyrate/keyrate/middleware"
)

// The tiers of a token budget's limiter (route.Requests): the requests
// policies are the default tier's, the tokens policies
// middleware.TokensTier's, and a "pro-" key's tokens policies proTokens'.
const proTokens = proTier + "-" + middleware.TokensTier

// tokenTierOf is the tier function of a token budget's limiter. It sees
// the keys TakeAll is given, route + "\x00" + identity + a budget's
// suffix (middleware.TokenTier), the identity in HeaderKey's form for an
// API key: "x-api-key=pro-…".
func tokenTierOf(key string) string {
	tier := middleware.TokenTier(key)
	if tier != "" && strings.Contains(key, "\x00"+strings.ToLower(keyHeader)+"=pro-") {
		return proTokens
	}
	return tier
}

// tokenTiers returns the tiers of rt's token budget.
func tokenTiers(rt route) map[string][]keyrate.Policy {
	tiers := map[string][]keyrate.Policy{middleware.TokensTier: rt.Policies}
	if rt.Pro != nil {
		tiers[proTokens] = rt.Pro
	}
	return tiers
}

// tokensVerdict returns the decision the page and the log show for a
// token budget's request: the tokens budget's, which it reserved and
// settles, refused when the request was, with the wait of the budget that
// refused it.
func tokensVerdict(e middleware.Event) keyrate.Decision {
	d := e.Budgets[1]
	if !e.Decision.Allowed && d.Allowed {
		d.Allowed, d.RetryAfter = false, e.Decision.RetryAfter
	}
	return d
}

// budgetsOf returns each budget of the request e describes, as it stands
// after the decision: requests and tokens (each its sliding policy's
// numbers, then each calendar quota's, a day's and a month's), then the
// slots in flight.
func budgetsOf(e middleware.Event, slots *countedSlots) []live.Budget {
	var out []live.Budget
	units := [2]string{"requests", "tokens"}
	for i := range e.Budgets {
		d := &e.Budgets[i]
		var quotas []live.Budget
		sliding := *d
		for _, p := range d.Policies() {
			if p.Calendar == (keyrate.Calendar{}) {
				continue
			}
			quotas = append(quotas, live.Budget{Name: p.Name, Unit: units[i], Limit: p.Limit, Remaining: max(p.Remaining, 0),
				Allowed: p.Allowed, WindowMs: float64(p.Period.Milliseconds()), ResetAfterMs: float64(p.ResetAfter.Microseconds()) / 1000})
			if d.Policy == p.Name { // a quota binds: the budget's row is its sliding policy's
				sliding = slidingOf(d)
			}
		}
		out = append(out, live.Budget{Name: units[i], Unit: units[i], Limit: sliding.Limit, Remaining: max(sliding.Remaining, 0),
			Allowed: sliding.Allowed, WindowMs: float64(sliding.Window.Milliseconds()),
			ResetAfterMs: float64(sliding.ResetAfter.Microseconds()) / 1000})
		out = append(out, quotas...)
	}
	if slots != nil {
		limit, running := slots.held(e.Key)
		out = append(out, live.Budget{Name: "in flight", Unit: "requests", Limit: limit, Remaining: max(limit-running, 0), Allowed: true})
	}
	return out
}

// slotStore is an in-flight store the demo closes once its server stops:
// *keyrate.Concurrency or *redislimit.Concurrency.
type slotStore interface {
	middleware.Concurrency
	Close() error
}

// countedSlots is an in-flight store that counts the slots each key holds
// in this process, for the page; the store decides.
type countedSlots struct {
	slotStore
	mu      sync.Mutex
	running map[string]int // keys holding slots
	limits  map[string]int // the limit of each key holding slots
}

func newCountedSlots(s slotStore) *countedSlots {
	return &countedSlots{slotStore: s, running: make(map[string]int), limits: make(map[string]int)}
}

// AcquireSlot takes one of key's slots in the store and counts it until
// it is given back.
func (c *countedSlots) AcquireSlot(ctx context.Context, key string, wait bool) (func(), int, error) {
	release, limit, err := c.slotStore.AcquireSlot(ctx, key, wait)
	if err != nil || release == nil {
		return release, limit, err
	}
	c.mu.Lock()
	c.running[key]++
	c.limits[key] = limit
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.running[key]--; c.running[key] <= 0 {
				delete(c.running, key)
				delete(c.limits, key)
			}
			c.mu.Unlock()
			release()
		})
	}, limit, nil
}

// held returns key's limit and the slots it holds in this process.
func (c *countedSlots) held(key string) (limit, running int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limits[key], c.running[key]
}

// slidingOf returns the Decision of d's sliding policies alone.
func slidingOf(d *keyrate.Decision) keyrate.Decision {
	var parts []keyrate.PolicyDecision
	for _, p := range d.Policies() {
		if p.Calendar == (keyrate.Calendar{}) {
			parts = append(parts, p)
		}
	}
	return backend.Combine(parts...)
}
