package main

import (
	"fmt"

	"github.com/keyrate/keyrate"
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
	redis redis.UniversalClient // nil: in process
	clock keyrate.Clock         // the in-process limiters' clock; nil is the system clock
}

// backend returns rt's budget. local is the in-process Limiter behind it,
// nil for a Redis one, so that its keys can be counted; close releases it.
func (s store) backend(rt route) (b keyrate.Backend, local *keyrate.Limiter, err error) {
	if len(rt.Policies) != 1 {
		return nil, nil, fmt.Errorf("route %s: %d policies; this build limits a route by one", rt.Name, len(rt.Policies))
	}
	p := rt.Policies[0]
	if s.redis != nil {
		// One prefix per route: each route has its own limit, so its own keys.
		l, err := redislimit.New(s.redis, p.Limit, p.Window,
			redislimit.WithPrefix(redisPrefix+rt.Name+":"),
			redislimit.WithDenyCache(denyCacheKeys))
		return l, nil, err
	}
	opts := []keyrate.Option{keyrate.WithMaxKeys(maxKeys)}
	if s.clock != nil {
		opts = append(opts, keyrate.WithClock(s.clock))
	}
	l, err := keyrate.New(p.Limit, p.Window, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, l, nil
}
