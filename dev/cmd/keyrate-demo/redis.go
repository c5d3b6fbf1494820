package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialRedis returns a client of the Redis server at addr (host:port) once it
// answers PING, so that a wrong address stops the demo at start-up instead
// of failing every request. Later outages are the limiters' to report: the
// middleware then serves requests unlimited (it fails open) and logs why,
// unless -redis-fallback has them decided in this process.
func dialRedis(ctx context.Context, addr string) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{
		Addr: addr,
		// Lets each call stop at the limiter's time budget by itself, with
		// no goroutine hand-off (see redislimit's package doc).
		ContextTimeoutEnabled: true,
	})
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("no Redis at %s: %w", addr, err)
	}
	return c, nil
}

// checkFallback checks -redis-fallback's share: 0 (off), or in (0, 1]
// and with -redis.
func checkFallback(share float64, redisAddr string) error {
	switch {
	case share == 0:
		return nil
	case !(share > 0 && share <= 1):
		return fmt.Errorf("-redis-fallback is %v, want a share in (0, 1], or 0 for none", share)
	case redisAddr == "":
		return errors.New("-redis-fallback needs -redis: budgets in this process have no outage to fall back from")
	}
	return nil
}
