package keyrate

import (
	"context"
	"errors"
	"time"
)

// Backend is the one call every store answers: decide a request of weight n
// for key and record it if admitted, atomically, as one step. A
// check-then-record split would let concurrent requests through together,
// and stacking two stores would record an event in one while the other
// refuses it. *Limiter satisfies it in memory, the Redis backend
// (github.com/keyrate/keyrate/redislimit) across processes.
//
// A backend may promise more, each promise an interface of this file that
// middleware discovers with a type assertion: Refunder (it gives back what
// a decision recorded), Bounded (its calls end within a budget of its own)
// and Described (it tells its policies, and whether it chooses them by the
// client's identity).
//
// TakeContext returns an error only when no decision could be had: ctx was
// done, the store was unavailable or closed, or the request could not be
// placed (an invalid key). A refusal is not an error: it is a Decision with
// Allowed false. When ctx carries the client's identity
// (ContextWithIdentity), a backend that chooses policies by it (Described's
// Tiered) reads it there.
type Backend interface {
	TakeContext(ctx context.Context, key string, n int) (Decision, error)
}

// Refunder is a Backend that gives back what its admitted decisions
// recorded: n of the weight the decision *d has left for key
// (d.Receipt.N()), exactly, from the decision's own instant, never another
// request's; d's Receipt falls by n. Its errors are those of
// Limiter.RefundN: ErrExceedsLimit for an n of 0 or more than is left,
// ErrNothingToRefund when nothing can be given back; every error changes
// nothing. *Limiter and the Redis backend are Refunders; middleware gives
// back refused-to-count responses (WithRefund) and unused reservations
// (ReportCost) through it.
type Refunder interface {
	RefundContext(ctx context.Context, key string, d *Decision, n int) error
}

// BackendFunc adapts a function to Backend, as http.HandlerFunc adapts one
// to http.Handler. It lists no policies and bounds no call of its own, so
// middleware needs a window for it (httplimit.WithWindow) unless its
// Decisions carry one, and bounds its calls by a time budget of its own.
type BackendFunc func(ctx context.Context, key string, n int) (Decision, error)

// TakeContext calls f(ctx, key, n).
func (f BackendFunc) TakeContext(ctx context.Context, key string, n int) (Decision, error) {
	return f(ctx, key, n)
}

// ErrInvalidKey is wrapped by a backend's error for a key it cannot place
// (the Redis backend refuses an empty key). The request caused it, not the
// store: middleware answers it as a client error and never lets the request
// through, whatever its failure mode.
var ErrInvalidKey = errors.New("keyrate: invalid key")

// ErrOutOfMemory is wrapped by a backend's error when its store is out of
// memory and refuses to record (a Redis at maxmemory under noeviction). It is
// a store failure, answered per the failure mode, with a sentinel of its own
// because the remedy is the store's memory settings (see redislimit's
// README).
var ErrOutOfMemory = errors.New("keyrate: store out of memory")

// ErrUnavailable is wrapped by a backend's error when its store could not
// be asked or did not answer: unreachable, refusing connections, past the
// time budget, or known to be down (the Redis backend's circuit breaker,
// which then answers at once without asking). Middleware fails open or
// closed on it as configured. An error that also wraps
// context.DeadlineExceeded waited out the budget; one that does not was
// answered at once.
var ErrUnavailable = errors.New("keyrate: store unavailable")

// Described is a Backend that tells middleware what it enforces, as
// *Limiter and the Redis backend do. Policies returns a copy of the default
// tier's policies, in the order they were given, so that middleware can
// advertise every one of them before it has a Decision (a Decision lists the
// policies of its key's own tier). Tiered reports whether the backend
// chooses a key's policies by the client's identity (WithTiers): then
// middleware hands it the identity in the call's context
// (ContextWithIdentity), which costs an allocation, and otherwise spares
// it. A backend that is not Described gets the identity always.
type Described interface {
	Policies() []Policy
	Tiered() bool
}

// Bounded is implemented by backends whose every call returns within a time
// budget of their own, whatever the store does; TimeBudget returns it.
// Middleware calls them on the request's goroutine and adds no budget on
// top: one budget, in one place, the backend's. The Redis backend bounds
// each call by its timeout; *Limiter decides in memory and never waits,
// which a TimeBudget of 0 says. A backend that is not Bounded gets the
// middleware's budget, enforced from outside.
type Bounded interface {
	TimeBudget() time.Duration
}

// TimeBudget returns 0: a Limiter decides in memory and never waits, so
// middleware calls it inline and gives it no budget.
func (l *Limiter) TimeBudget() time.Duration { return 0 }

// Tiered reports whether the limiter has a tier function (WithTiers): its
// decisions then depend on the identity a context carries.
func (l *Limiter) Tiered() bool { return l.tierOf != nil }

// RefundContext is RefundN under Refunder's name, for middleware: it
// returns ctx's error when ctx is done, and never waits.
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
