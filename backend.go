package keyrate

import (
	"context"
	"errors"
	"time"
)

// Backend is the one call every store answers: decide a request of weight n
// for key and record it if admitted, in one atomic step. *Limiter is one, in
// memory; redislimit's another; package backend has the rest of their
// contract. TakeContext fails only when no decision could be had (ctx done,
// the store unavailable, a key it cannot place); a refusal is a Decision. A
// tiered backend reads ctx's identity.
type Backend interface {
	TakeContext(ctx context.Context, key string, n int) (Decision, error)
}

// ErrInvalidKey is wrapped by a backend's error for a key it cannot place:
// the request's fault, so middleware refuses it in every failure mode.
var ErrInvalidKey = errors.New("keyrate: invalid key")

// ErrUnavailable is wrapped by a backend's error when its store could not be
// asked or did not answer (unreachable, past the budget, known to be down):
// with context.DeadlineExceeded if it waited out the budget.
var ErrUnavailable = errors.New("keyrate: store unavailable")

// TimeBudget returns 0: a Limiter never waits (backend.Bounded).
func (l *Limiter) TimeBudget() time.Duration { return 0 }

// Tiered reports whether the limiter has a tier function (WithTiers), as
// backend.Described asks.
func (l *Limiter) Tiered() bool { return l.tierOf != nil }

var _ Backend = (*Limiter)(nil)
