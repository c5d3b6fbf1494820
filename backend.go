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
// refuses it.
//
// *Limiter satisfies it in memory, and the Redis backend
// (github.com/keyrate/keyrate/redislimit) across processes. Middleware
// (httplimit and others) depends on Backend alone, plus the optional
// interfaces Quota, PolicyLister, NonBlocking and Bounded, which it discovers
// with a type assertion.
//
// TakeContext returns an error only when no decision could be had: ctx was
// done, the store was unavailable or closed, or the request could not be
// placed (an invalid key). A refusal is not an error: it is a Decision with
// Allowed false.
type Backend interface {
	TakeContext(ctx context.Context, key string, n int) (Decision, error)
}

// ErrInvalidKey is wrapped by a backend's error for a key it cannot place
// (the Redis backend refuses an empty key). The request caused it, not the
// store: middleware answers it as a client error and never lets the request
// through, whatever its failure mode.
var ErrInvalidKey = errors.New("keyrate: invalid key")

// ErrOutOfMemory is wrapped by a backend's error when its store is out of
// memory and refuses to record (a Redis at maxmemory under the noeviction
// policy). It is a store failure like an outage, so middleware fails open
// or closed on it as configured; it has a sentinel of its own because its
// remedy differs (the store's memory settings, see the Redis backend's
// README), and because under fail-open a flood of new keys that fills the
// store would otherwise pass for an outage while it serves every new
// client unlimited.
var ErrOutOfMemory = errors.New("keyrate: store out of memory")

// ErrUnavailable is wrapped by a backend's error when its store could not
// be asked or did not answer: unreachable, refusing connections, past the
// time budget, or known to be down (the Redis backend's circuit breaker,
// which then answers at once without asking). Middleware fails open or
// closed on it as configured. An error that also wraps
// context.DeadlineExceeded waited out the budget; one that does not was
// answered at once.
var ErrUnavailable = errors.New("keyrate: store unavailable")

// Quota is implemented by backends that know their limit and window, as
// *Limiter and the Redis backend do. Middleware reads it once to advertise
// the policy (the IETF RateLimit-Policy field). Under several policies it
// describes the first; PolicyLister lists them all.
type Quota interface {
	Limit() int
	Window() time.Duration
}

// PolicyLister is implemented by backends that know their policies, as
// *Limiter does. Policies returns a copy of the default tier's, in the
// order they were given, so that middleware can advertise every one of them
// before it has a Decision (a Decision lists the policies of its key's own
// tier).
type PolicyLister interface {
	Policies() []Policy
}

// NonBlocking is implemented by backends whose TakeContext decides in memory
// and returns at once, as *Limiter does. Middleware calls them directly,
// without the goroutine and timer that bound a call to a store that might
// hang.
type NonBlocking interface {
	NonBlocking() bool
}

// Bounded is implemented by backends that bound every call by a time budget
// of their own and return by its end whatever the store does, as the Redis
// backend does. Middleware calls them directly and adds no budget on top:
// one budget, in one place, the backend's. A backend that is neither
// Bounded nor NonBlocking gets the middleware's budget, enforced from
// outside.
type Bounded interface {
	TimeBudget() time.Duration
}

// NonBlocking reports true: a Limiter decides in memory and never waits.
func (l *Limiter) NonBlocking() bool { return true }

var (
	_ Backend      = (*Limiter)(nil)
	_ Quota        = (*Limiter)(nil)
	_ PolicyLister = (*Limiter)(nil)
	_ NonBlocking  = (*Limiter)(nil)
)
