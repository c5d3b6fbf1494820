package backend_test

import (
	"context"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// A function is a Backend, as a function is an http.Handler: here one that
// lets an internal caller through and asks a Limiter about every other key.
func ExampleFunc() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := keyrate.New(1, time.Minute, keyrate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	b := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		if key == "internal" {
			return keyrate.Decision{Allowed: true}, nil
		}
		return limiter.TakeContext(ctx, key, n)
	})

	for _, key := range []string{"internal", "internal", "alice", "alice"} {
		d, err := b.TakeContext(context.Background(), key, 1)
		fmt.Println(key, d.Allowed, err)
	}
	// Output:
	// internal true <nil>
	// internal true <nil>
	// alice true <nil>
	// alice false <nil>
}
