package main

import (
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
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
	// A token budget's limiter holds both budgets: the requests policies
	// by default, the tokens policies for the keys of the tokens.
	policies, tier := rt.Policies, tierOf
	if rt.Requests != nil {
		policies, tier, tiers = rt.Requests, tokenTierOf, tokenTiers(rt)
	}
	if s.redis != nil {
		// One prefix per route: each route has its own limit, so its own keys.
		opts := []redislimit.Option{
			redislimit.WithPrefix(redisPrefix + rt.Name + ":"),
			redislimit.WithDenyCache(denyCacheKeys),
		}
		if tiers != nil {
			opts = append(opts, redislimit.WithTiers(tier, tiers))
		}
		if rt.Requests != nil {
			// A client's two budgets in one slot, so that a Redis Cluster
			// decides them in one script run.
			opts = append(opts, redislimit.WithHashTagFunc(middleware.TokenGroup))
		}
		if s.fallback > 0 {
			opts = append(opts, redislimit.WithLocalFallback(s.fallback))
		}
		l, err := redislimit.NewPolicies(s.redis, policies, opts...)
		return l, nil, err
	}
	opts := []keyrate.Option{keyrate.WithMaxKeys(maxKeys)}
	if s.clock != nil {
		opts = append(opts, keyrate.WithClock(s.clock))
	}
	if tiers != nil {
		opts = append(opts, keyrate.WithTiers(tier, tiers))
	}
	l, err := keyrate.NewPolicies(policies, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, l, nil
}

// inFlight returns rt's in-flight slots (route.InFlight): in this process,
// or in Redis, shared by every demo process using it, each slot held at
// most inFlightTTL there should its process die holding it.
func (s store) inFlight(rt route) (*countedSlots, error) {
	if s.redis != nil {
		c, err := redislimit.NewConcurrency(s.redis, rt.InFlight, inFlightTTL,
			redislimit.WithPrefix(redisPrefix+rt.Name+"-inflight:"))
		if err != nil {
			return nil, err
		}
		return newCountedSlots(c), nil
	}
	c, err := keyrate.NewConcurrency(rt.InFlight, nil, nil)
	if err != nil {
		return nil, err
	}
	return newCountedSlots(c), nil
}

// inFlightTTL bounds how long Redis keeps a slot whose process died
// holding it: far longer than a demo request runs.
const inFlightTTL = time.Minute

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
