package httplimit_test

import (
	"context"
	"sync"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// model is a backend with several policies per key for tests: it keeps the
// instant of every admitted event, counts each policy's window naively from
// them, and combines the policies' parts with backend.Combine, as every
// backend does. It stands in for keyrate.NewPolicies, with the same
// semantics: a request is recorded only when every policy admits it.
type model struct {
	clock    *keyrate.ManualClock
	policies []keyrate.Policy

	mu     sync.Mutex
	events map[string][]time.Time // admitted events, oldest first; weight n is n events
}

func newModel(clock *keyrate.ManualClock, policies ...keyrate.Policy) *model {
	return &model{clock: clock, policies: policies, events: make(map[string][]time.Time)}
}

func (m *model) Policies() []keyrate.Policy { return m.policies }
func (*model) Tiered() bool                 { return false }

func (m *model) TimeBudget() time.Duration { return 0 }

func (m *model) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	parts := make([]keyrate.PolicyDecision, len(m.policies))
	allowed := true
	for i, p := range m.policies {
		in := m.window(key, p, now)
		parts[i].Policy = p
		parts[i].Allowed = n >= 0 && len(in)+n <= p.Limit
		if !parts[i].Allowed && n >= 0 && n <= p.Limit {
			// The request fits once the oldest len(in)+n-Limit events have left.
			parts[i].RetryAfter = in[len(in)+n-p.Limit-1].Add(p.Window).Sub(now)
		}
		allowed = allowed && parts[i].Allowed
	}
	if allowed {
		for range n {
			m.events[key] = append(m.events[key], now)
		}
	}
	for i, p := range m.policies {
		in := m.window(key, p, now)
		parts[i].Remaining = p.Limit - len(in)
		if len(in) > 0 {
			parts[i].RefillAfter = in[0].Add(p.Window).Sub(now)
			parts[i].ResetAfter = in[len(in)-1].Add(p.Window).Sub(now)
		}
	}
	return backend.Combine(parts...), nil
}

// window returns key's events in p's window at now: those in (now-Window, now].
func (m *model) window(key string, p keyrate.Policy, now time.Time) []time.Time {
	evs := m.events[key]
	for len(evs) > 0 && !evs[0].After(now.Add(-p.Window)) {
		evs = evs[1:]
	}
	return evs
}

// combined is a backend that answers every request with the Decision its
// parts make, and lists policies as its own: a stand-in for any state of a
// backend with several policies.
type combined struct {
	policies []keyrate.Policy
	parts    []keyrate.PolicyDecision
}

func (b combined) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return backend.Combine(b.parts...), nil
}
func (b combined) Policies() []keyrate.Policy { return b.policies }
func (combined) Tiered() bool                 { return false }

func (b combined) TimeBudget() time.Duration { return 0 }
