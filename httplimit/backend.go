package httplimit

import (
	"context"
	"errors"
	"time"

	"github.com/keyrate/keyrate"
)

// Backend is the one call the middleware needs from a store: decide a
// request of weight n for key and record it if admitted, atomically. Any
// check-then-record split would let concurrent requests through together.
//
// Take should return promptly once ctx is done; the middleware bounds each
// call by its time budget either way (see WithTimeBudget).
type Backend interface {
	Take(ctx context.Context, key string, n int) (keyrate.Decision, error)
}

// BackendFunc adapts a function to Backend. A BackendFunc knows neither its
// window nor whether it blocks, so New needs WithWindow for it, and its calls
// run under the time budget.
type BackendFunc func(ctx context.Context, key string, n int) (keyrate.Decision, error)

// Take calls f.
func (f BackendFunc) Take(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}

// Policy is implemented by backends that know their quota. New reads it once
// to write the RateLimit-Policy field. *keyrate.Limiter has these methods.
type Policy interface {
	Limit() int
	Window() time.Duration
}

// NonBlocking is implemented by backends whose Take decides in memory and
// returns at once. The middleware calls them directly, without the goroutine
// and timer that enforce the time budget on a backend that might hang.
type NonBlocking interface {
	NonBlocking() bool
}

// Local returns the Backend for an in-process limiter. It reports the
// limiter's policy and that it never blocks, so the middleware calls it
// inline. After l is closed, Take fails with keyrate.ErrClosed and the
// middleware applies its failure mode.
func Local(l *keyrate.Limiter) Backend { return local{l} }

type local struct{ l *keyrate.Limiter }

func (b local) Take(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return b.l.TakeContext(ctx, key, n)
}
func (b local) Limit() int            { return b.l.Limit() }
func (b local) Window() time.Duration { return b.l.Window() }
func (local) NonBlocking() bool       { return true }

// ErrBudgetExceeded is reported to OnError when a backend call outlives the
// time budget. The error also matches context.DeadlineExceeded.
var ErrBudgetExceeded = errors.New("httplimit: backend exceeded its time budget")

type takeResult struct {
	d   keyrate.Decision
	err error
}

// take asks the backend, bounded by the time budget unless the backend
// never blocks.
func (m *Middleware) take(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	if m.inline {
		return m.backend.Take(ctx, key, n)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, m.budget, m.budgetErr)
	defer cancel()
	// The call runs in its own goroutine so that a backend that ignores ctx
	// costs the request no more than the budget. Such a backend keeps the
	// goroutine until it returns; the buffer lets it exit then.
	done := make(chan takeResult, 1)
	go func() {
		d, err := m.backend.Take(ctx, key, n)
		done <- takeResult{d, err}
	}()
	select {
	case res := <-done:
		if res.err != nil && ctx.Err() != nil && errors.Is(res.err, ctx.Err()) {
			res.err = context.Cause(ctx) // say whether the budget or the request ran out
		}
		return res.d, res.err
	case <-ctx.Done():
		return keyrate.Decision{}, context.Cause(ctx)
	}
}
