package main

import (
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

// redisPrefix starts every Redis key the demo writes, so that its budgets
// are easy to find (redis-cli --scan --pattern 'keyrate-demo:*') and stay
// apart from another program's on the same server.
const redisPrefix = "keyrate-demo:"

// denyCacheKeys bounds each Redis limiter's local cache of refused keys
// (see redislimit.WithDenyCache): a client that keeps hammering a route
// past its limit is refused without a round trip, and nothing is ever
// admitted locally, so replicas still share one exact budget.
const denyCacheKeys = 10_000

// store makes each route's backend: in this process, or in the Redis that
// client reaches.
type store struct {
	redis    redis.UniversalClient // nil: in process
	clock    keyrate.Clock         // the in-process limiters' clock; nil is the system clock
	fallback float64               // with Redis: the local fallback's share; 0: none
}

// backend returns rt's budget. local is the in-process Limiter behind it,
// nil for a Redis one, so that its keys can be counted; close releases it.
// Both stores decide all of a route's policies in one atomic step, and give
// "pro-" keys the route's Pro policies.
func (s store) backend(rt route) (b keyrate.Backend, local *keyrate.Limiter, err error) {
	var tiers map[string][]keyrate.Policy
	if rt.Pro != nil {
		tiers = map[string][]keyrate.Policy{proTier: rt.Pro}
	}
	if s.redis != nil {
		// One prefix per route: each route has its own limit, so its own keys.
		opts := []redislimit.Option{
			redislimit.WithPrefix(redisPrefix + rt.Name + ":"),
			redislimit.WithDenyCache(denyCacheKeys),
		}
		if tiers != nil {
			opts = append(opts, redislimit.WithTiers(tierOf, tiers))
		}
		if s.fallback > 0 {
			opts = append(opts, redislimit.WithLocalFallback(s.fallback))
		}
		l, err := redislimit.NewPolicies(s.redis, rt.Policies, opts...)
		return l, nil, err
	}
	opts := []keyrate.Option{keyrate.WithMaxKeys(maxKeys)}
	if s.clock != nil {
		opts = append(opts, keyrate.WithClock(s.clock))
	}
	if tiers != nil {
		opts = append(opts, keyrate.WithTiers(tierOf, tiers))
	}
	l, err := keyrate.NewPolicies(rt.Policies, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, l, nil
}

// newIdentities returns the budget of new API keys per address that guards
// the in-process limiters, or nil with Redis: a Redis limiter bounds no map
// (its keys expire in Redis once idle for a window) and has no Peek to
// tell a new key from a known one.
func (s store) newIdentities(identity, address httplimit.KeyFunc) (*newIdentities, error) {
	if s.redis != nil {
		return nil, nil
	}
	opts := []keyrate.Option{keyrate.WithMaxKeys(maxKeys)}
	if s.clock != nil {
		opts = append(opts, keyrate.WithClock(s.clock))
	}
	budget, err := keyrate.New(newIdentityLimit, newIdentityWindow, opts...)
	if err != nil {
		return nil, err
	}
	charged, err := keyrate.New(1, newIdentityWindow, opts...)
	if err != nil {
		budget.Close()
		return nil, err
	}
	return &newIdentities{budget: budget, charged: charged, identity: identity, address: address}, nil
}
