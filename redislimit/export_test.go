package redislimit

import (
	"context"

	"github.com/keyrate/keyrate/clientkey"
	"github.com/redis/go-redis/v9"
)

// WithClock makes decisions at the clock's instants instead of the Redis
// server's TIME, so that the shared behavioural suite's manual clock drives
// this backend too. It exists only in this package's tests.
var WithClock = withClock

// EventsStored returns how many events the sliding log at Redis key k
// holds: its by-time entries, the ones with positive scores.
func EventsStored(ctx context.Context, c redis.UniversalClient, k string) (int64, error) {
	return c.ZCount(ctx, k, "(0", "+inf").Result()
}

// StoreKey returns the Redis key that holds key's state.
func (l *Limiter) StoreKey(key string) string {
	id := clientkey.Bound(key)
	return l.storeKey(id, l.tags.of(id))
}
