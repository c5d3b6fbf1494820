package redislimit

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialWatch remembers how the client's latest attempts to connect went, so
// that a call that runs out of its budget can say why Redis did not answer.
// go-redis retries a refused connection with backoff for longer than a
// budget lasts (about 1.7s with its defaults), then reports the budget's
// deadline alone: without this, a Redis that is down would look like a
// slow one.
type dialWatch struct {
	base   time.Time                  // the origin of the instants below, on the monotonic clock
	failed atomic.Pointer[dialFailed] // the latest failed attempt; nil before the first
	ok     atomic.Int64               // the instant of the latest successful one
	// onFail is told of each failed attempt: Redis cannot be reached, so
	// the Limiter's breaker opens without waiting for a call's budget.
	onFail func(at int64, err error)
}

type dialFailed struct {
	err error
	at  int64
}

// watchDials adds a dialWatch to client, as a go-redis hook on every
// connection it makes (each node's, for a cluster or a ring), and returns
// it; nil for a client it cannot hook. onFail is told of each failed
// attempt, at its instant since base.
func watchDials(client redis.UniversalClient, base time.Time, onFail func(at int64, err error)) *dialWatch {
	w := &dialWatch{base: base, onFail: onFail}
	switch c := client.(type) {
	case *redis.Client:
		c.AddHook(w)
	case interface{ OnNewNode(func(*redis.Client)) }: // *redis.ClusterClient, *redis.Ring
		c.OnNewNode(func(node *redis.Client) { node.AddHook(w) })
	default:
		return nil
	}
	return w
}

// DialHook records the outcome of each attempt to connect.
func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		now := int64(time.Since(w.base))
		if err != nil {
			w.failed.Store(&dialFailed{err: err, at: now})
			if !errors.Is(err, context.Canceled) { // a caller gave up: that says nothing of Redis
				w.onFail(now, err)
			}
		} else {
			w.ok.Store(now)
		}
		return conn, err
	}
}

// ProcessHook leaves commands alone.
func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook leaves pipelines alone.
func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failedSince returns the error of the latest attempt to connect when it
// failed at or after since, with no attempt succeeding after it: Redis
// refused or dropped connections while a call waited. nil otherwise, and
// for a nil w.
func (w *dialWatch) failedSince(since int64) error {
	if w == nil {
		return nil
	}
	f := w.failed.Load()
	if f == nil || f.at < since || w.ok.Load() > f.at {
		return nil
	}
	return f.err
}
