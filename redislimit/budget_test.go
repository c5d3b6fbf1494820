package redislimit_test

import (
	"context"
	"errors"
	"github.com/keyrate/keyrate/middleware/adapter"
	"testing"
	"time"

	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestOneBudget checks that a Limiter reports its budget and that the
// middleware's caller (adapter.Caller) relies on it: given a budget of 1ns,
// which no call could meet, the caller still gets the Limiter's answer,
// because it calls a Bounded backend directly and adds no budget of its
// own; against a server that never answers, the Limiter's budget alone
// ends the call.
func TestOneBudget(t *testing.T) {
	srv := redistest.Shared(t)
	l := newLimiter(t, srv.Client(t), 2, time.Hour, redislimit.WithTimeout(budget))
	if got := l.TimeBudget(); got != budget {
		t.Fatalf("TimeBudget() = %v, want the WithTimeout value %v", got, budget)
	}
	if got := newLimiter(t, srv.Client(t), 2, time.Hour).TimeBudget(); got != 250*time.Millisecond {
		t.Fatalf("TimeBudget() without WithTimeout = %v, want the default 250ms", got)
	}
	c, err := adapter.NewCaller(l, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := c.Take(context.Background(), "k", "k", 1)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("call %d through a caller with a 1ns budget: %+v, %v; want the Limiter's decision", i, d, err)
		}
	}

	for _, ctxTimeouts := range []bool{true, false} {
		hole := redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: ctxTimeouts})
		t.Cleanup(func() { hole.Close() })
		lh, err := redislimit.New(hole, 2, time.Hour, redislimit.WithTimeout(budget))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c, err := adapter.NewCaller(lh, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Take(context.Background(), "k", "k", 1)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, middleware.ErrBudgetExceeded) || took < budget || took > budget+slack {
			t.Fatalf("ContextTimeoutEnabled %v: %v after %v; want the Limiter's own %v budget to end the call", ctxTimeouts, err, took, budget)
		}
	}
}
