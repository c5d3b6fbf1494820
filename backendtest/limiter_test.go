package backendtest_test

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backendtest"
)

// TestLimiter runs the suite against the in-process Limiter.
func TestLimiter(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := keyrate.New(limit, window, keyrate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}

// TestLimiterPolicies runs the multi-policy scenarios against the
// in-process Limiter.
func TestLimiterPolicies(t *testing.T) {
	backendtest.RunPolicies(t, func(t *testing.T, policies []keyrate.Policy, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := keyrate.NewPolicies(policies, keyrate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}

// TestLimiterTiers runs the tier scenarios against the in-process Limiter.
func TestLimiterTiers(t *testing.T) {
	backendtest.RunTiers(t, func(t *testing.T, policies []keyrate.Policy, tier func(string) string, tiers map[string][]keyrate.Policy, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := keyrate.NewPolicies(policies, keyrate.WithTiers(tier, tiers), keyrate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}
