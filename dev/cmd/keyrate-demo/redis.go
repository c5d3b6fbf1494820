package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialRedis returns a client of the Redis server at addr (host:port) once it
// answers PING, so that a wrong address stops the demo at start-up instead
// of failing every request. Later outages are the limiters' to report: the
// middleware then serves requests unlimited (it fails open) and logs why.
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
