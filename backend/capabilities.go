package backend

import (
	"context"
	"time"

	"github.com/keyrate/keyrate"
)

// Refunder is a Backend that gives back n of the weight an admitted decision
// *d has left for key, exactly, from the decision's own events, lowering
// d's Receipt by n; errors as keyrate.Limiter.RefundN's, each changing
// nothing. Middleware refunds through it.
type Refunder interface {
	RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error
}

// Described is a Backend that tells middleware what it enforces: its default
// tier's policies, to advertise before a Decision, and whether it chooses a
// key's policies by the client's identity (Tiered), which middleware then
// hands it (ContextWithIdentity) at the cost of an allocation.
type Described interface {
	Policies() []keyrate.Policy
	Tiered() bool
}

// Bounded is a Backend whose every call returns within a budget of its own
// (0: it never waits): middleware calls it inline and adds no budget.
type Bounded interface {
	TimeBudget() time.Duration
}

// AllTaker is a Backend that decides a request against several keys at
// once, all or nothing, each hit at its own weight and each key under the
// tier its tier function names for the key itself; it fails only when no
// decision could be had. *keyrate.Limiter and the Redis backend are ones.
type AllTaker interface {
	TakeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error)
}

var (
	_ keyrate.Backend = (*keyrate.Limiter)(nil)
	_ Refunder        = (*keyrate.Limiter)(nil)
	_ Described       = (*keyrate.Limiter)(nil)
	_ Bounded         = (*keyrate.Limiter)(nil)
	_ AllTaker        = (*keyrate.Limiter)(nil)
)
