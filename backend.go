package keyrate

import (
	"context"
	"errors"
	"time"
)

// Backend is the one call every store answers: decide a request of weight n
// for key and record it if admitted, in one atomic step. *Limiter is one, in
// memory; redislimit's another. More promises a backend makes are the other
// interfaces here: Refunder, Bounded, Described. TakeContext fails only when no
// decision could be had (ctx done, the store unavailable, a key it cannot
// place); a refusal is a Decision. A tiered backend reads ctx's identity.
type Backend interface {
	TakeContext(ctx context.Context, key string, n int) (Decision, error)
}

// Refunder is a Backend that gives back n of the weight an admitted decision
// *d has left for key, exactly, from the decision's own events, lowering
// d's Receipt by n; errors as Limiter.RefundN's, each changing nothing.
// Middleware refunds through it (WithRefund, ReportWeight).
type Refunder interface {
	RefundContext(ctx context.Context, key string, d *Decision, n int) error
}

// BackendFunc adapts a function to Backend. It lists no policies and bounds
// no call, so middleware needs a window and a budget of its own for it.
type BackendFunc func(ctx context.Context, key string, n int) (Decision, error)

// TakeContext calls f(ctx, key, n).
func (f BackendFunc) TakeContext(ctx context.Context, key string, n int) (Decision, error) {
	return f(ctx, key, n)
}

// ErrInvalidKey is wrapped by a backend's error for a key it cannot place:
// the request's fault, so middleware refuses it in every failure mode.
var ErrInvalidKey = errors.New("keyrate: invalid key")

// ErrOutOfMemory is wrapped by a backend's error when its store is out of
// memory and cannot record (a Redis at maxmemory): a store failure.
var ErrOutOfMemory = errors.New("keyrate: store out of memory")

// ErrUnavailable is wrapped by a backend's error when its store could not be
// asked or did not answer (unreachable, past the budget, known to be down):
// with context.DeadlineExceeded if it waited out the budget.
var ErrUnavailable = errors.New("keyrate: store unavailable")

// Described is a Backend that tells middleware what it enforces: its default
// tier's policies, to advertise before a Decision, and whether it chooses a
// key's policies by the client's identity (Tiered), which middleware then
// hands it (ContextWithIdentity) at the cost of an allocation.
type Described interface {
	Policies() []Policy
	Tiered() bool
}

// Bounded is a Backend whose every call returns within a budget of its own
// (0: it never waits): middleware calls it inline and adds no budget.
type Bounded interface {
	TimeBudget() time.Duration
}

// TimeBudget returns 0: a Limiter never waits.
func (l *Limiter) TimeBudget() time.Duration { return 0 }

// Tiered reports whether the limiter has a tier function (WithTiers).
func (l *Limiter) Tiered() bool { return l.tierOf != nil }

// RefundContext is RefundN, as Refunder names it.
func (l *Limiter) RefundContext(ctx context.Context, key string, d *Decision, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.RefundN(key, d, n)
}

var (
	_ Backend   = (*Limiter)(nil)
	_ Refunder  = (*Limiter)(nil)
	_ Described = (*Limiter)(nil)
	_ Bounded   = (*Limiter)(nil)
	_ Backend   = BackendFunc(nil)
)
