package keyrate_test

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/backendtest"
)

// TestBackendSuite runs the behavioural suite shared by every backend
// against the in-process Limiter.
func TestBackendSuite(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) backendtest.Backend {
		l, err := keyrate.New(limit, window, keyrate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}

// TestBackendSuitePolicies runs the suite's multi-policy scenarios against
// the in-process Limiter.
func TestBackendSuitePolicies(t *testing.T) {
	backendtest.RunPolicies(t, func(t *testing.T, policies []keyrate.Policy, clock *keyrate.ManualClock) backendtest.Backend {
		l, err := keyrate.NewPolicies(policies, keyrate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}

// TestBackendSuiteTiers runs the suite's tier scenarios against the
// in-process Limiter.
func TestBackendSuiteTiers(t *testing.T) {
	backendtest.RunTiers(t, func(t *testing.T, policies []keyrate.Policy, tier func(string) string, tiers map[string][]keyrate.Policy, clock *keyrate.ManualClock) backendtest.Backend {
		l, err := keyrate.NewPolicies(policies, keyrate.WithTiers(tier, tiers), keyrate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	})
}
