package redislimit_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backendtest"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// prefixes makes each limiter's keys unique on the shared server, so that
// scenarios and shuffled tests never see each other's events.
var prefixes atomic.Int64

func uniquePrefix() string { return fmt.Sprintf("test%d:", prefixes.Add(1)) }

// TestBackendSuite runs the behavioural suite shared by every backend
// against the sliding log in Redis, with the suite's manual clock standing
// in for the server's TIME.
func TestBackendSuite(t *testing.T) {
	srv := redistest.Shared(t)
	client := srv.Client(t)
	backendtest.Run(t, func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := redislimit.New(client, limit, window,
			redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// TestBackendPoliciesSuite runs the shared multi-policy scenarios against
// the sliding log in Redis: several policies per key, one script run.
func TestBackendPoliciesSuite(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	backendtest.RunPolicies(t, newPoliciesBackend(client))
}

// TestBackendTiersSuite runs the shared tier scenarios against the sliding
// log in Redis.
func TestBackendTiersSuite(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	backendtest.RunTiers(t, func(t *testing.T, policies []keyrate.Policy, tier func(string) string, tiers map[string][]keyrate.Policy, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := redislimit.NewPolicies(client, policies, redislimit.WithTiers(tier, tiers),
			redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// newPoliciesBackend makes the multi-policy suite's backends on client.
func newPoliciesBackend(client redis.UniversalClient) backendtest.NewPoliciesBackend {
	return func(t *testing.T, policies []keyrate.Policy, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := redislimit.NewPolicies(client, policies,
			redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}
