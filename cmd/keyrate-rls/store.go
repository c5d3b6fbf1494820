package main

import (
	"context"
	"time"

	"github.com/keyrate/keyrate"
)

// store is what the service needs from where budgets live. Keys start with
// the name of their tier and a zero byte (see storeKey); a tier's policies
// are the limits of one rule, set by SetTier before any key of it is
// decided.
type store interface {
	// TakeAll decides a request for domain that counts against every key
	// of hits, each at its own weight and under its tier's policies:
	// admitted only when every key has room for its weight, and then
	// recorded against all of them, atomically; a refusal records nothing
	// anywhere. A weight of 0 always fits and records nothing. It returns
	// each hit's Decision in the order of hits; a key with room in a
	// refused request is described as it stands (or, refused by the Redis
	// deny cache, not described: a Decision with no policies). An error
	// means no decision could be had. The domain keeps a request's budgets
	// together where a store places them (one Redis Cluster slot).
	TakeAll(ctx context.Context, domain string, hits []keyrate.Hit) ([]keyrate.Decision, bool, error)
	// SetTier makes policies the limits of every key of tier name, from its
	// next decision on, keeping the events already recorded against it: a
	// reload that changes a rule's limits keeps its counts.
	SetTier(name string, policies []keyrate.Policy) error
	// Close releases the store.
	Close() error
	// tierNames returns the names that its tier function reads.
	tierNames() *tierNames
}

// limiterStore keeps budgets in this process: one keyrate.Limiter, a tier
// per rule. Right for a single replica; several replicas each keep their
// own budgets.
type limiterStore struct {
	l     *keyrate.Limiter
	names *tierNames
}

// placeholderPolicy is the limiter's default tier, which no key uses:
// every key names its tier, set before the key is first decided. It is
// one request a minute so that a key that somehow fell to it would be
// held tight, never let through unlimited.
var placeholderPolicy = keyrate.Policy{Limit: 1, Window: time.Minute}

// newLimiterStore returns an in-process store that tracks at most maxKeys
// budgets (0: no bound), deciding on clock (nil: the system clock), whose
// rules have windows of at most maxWindow.
func newLimiterStore(maxKeys int, clock keyrate.Clock, maxWindow time.Duration) (*limiterStore, error) {
	names := &tierNames{}
	opts := []keyrate.Option{
		keyrate.WithTiers(names.tierOf, nil),
		keyrate.WithMaxKeys(maxKeys),
		// The limiter's ticks must hold the longest window a rule or a
		// limit override will have (see maxWindow).
		keyrate.WithMaxWindow(maxWindow),
		// An idle key is swept within a minute of its last event leaving
		// its window; the default would follow the placeholder's window.
		keyrate.WithJanitorInterval(time.Minute),
	}
	if clock != nil {
		opts = append(opts, keyrate.WithClock(clock))
	}
	l, err := keyrate.NewPolicies([]keyrate.Policy{placeholderPolicy}, opts...)
	if err != nil {
		return nil, err
	}
	return &limiterStore{l: l, names: names}, nil
}

// TakeAll decides in memory; it fails only when ctx is already done.
func (s *limiterStore) TakeAll(ctx context.Context, _ string, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	return s.l.TakeAll(ctx, hits)
}

// SetTier sets a rule's policies on the limiter.
func (s *limiterStore) SetTier(name string, policies []keyrate.Policy) error {
	return s.l.SetTier(name, policies)
}

// Close stops the limiter's janitor.
func (s *limiterStore) Close() error { return s.l.Close() }
