package otellimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
)

// Once a route's series exist, observing its requests allocates nothing,
// with the SDK behind the Metrics: an admission, a refusal by two
// policies, a backend error and a gone client.
func TestObserveAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	m, _ := newMetrics(t)
	refusal := backend.Combine(part(perSecond, false), part(perDay, false))
	admission := backend.Combine(part(perSecond, true), part(perDay, true))
	down := fmt.Errorf("take: %w", keyrate.ErrUnavailable)
	gone := fmt.Errorf("%w: %w", middleware.ErrClientGone, context.Canceled)
	for name, ev := range map[string]middleware.Event{
		"admitted":    {Route: "r", Key: "k", Decision: admission, Duration: time.Microsecond},
		"refused":     {Route: "r", Key: "k", Decision: refusal, Duration: time.Microsecond},
		"store down":  {Route: "r", Key: "k", Err: down, Duration: time.Millisecond},
		"client gone": {Route: "r", Key: "k", Err: gone},
	} {
		m.Observe(ev) // the route's and the policies' series are made here
		assert.Zero(t, testing.AllocsPerRun(1000, func() { m.Observe(ev) }), name)
	}
}

// Concurrent requests on several routes, collected while they come, add
// up exactly.
func TestConcurrentObserve(t *testing.T) {
	m, r := newMetrics(t)
	const workers, each = 4, 2000
	routes := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d := keyrate.Decision{Allowed: i%4 != 0, Policy: "p"}
				observeDecision(m, routes[(w+i)%len(routes)], d, false, time.Microsecond)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for collecting := true; collecting; {
		select {
		case <-done:
			collecting = false
		default:
			r.collect()
		}
	}
	var allowed, limited, violations float64
	for _, rt := range routes {
		allowed += r.requests(rt, "allowed")
		limited += r.requests(rt, "limited")
		violations += r.violations(rt, "p")
	}
	require.Equal(t, float64(workers*each*3/4), allowed)
	require.Equal(t, float64(workers*each/4), limited)
	require.Equal(t, limited, violations)
}
