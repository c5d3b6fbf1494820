package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/middleware/adapter"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// A middleware of one's own, for a job queue say, asks its backend through
// a Caller, as httplimit and grpclimit do: the in-process Limiter is
// called inline, and a request whose client has gone is not decided at
// all.
func ExampleCaller() {
	l, err := keyrate.New(1, time.Minute, keyrate.WithClock(keyrate.NewManualClock(start)))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	c, err := adapter.NewCaller(l, 250*time.Millisecond)
	if err != nil {
		panic(err)
	}
	const key, identity = "jobs\x00x-api-key=alice", "alice"
	d, err := c.Take(context.Background(), key, identity, 1)
	fmt.Println(d.Allowed, err)
	d, err = c.Take(context.Background(), key, identity, 1)
	fmt.Println(d.Allowed, d.RetryAfter, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client hung up
	_, err = c.Take(ctx, key, identity, 1)
	fmt.Println(errors.Is(err, middleware.ErrClientGone), errors.Is(err, context.Canceled))
	// Output:
	// true <nil>
	// false 1m0s <nil>
	// true true
}
