package httplimit

import (
	"context"
	"errors"

	"github.com/keyrate/keyrate"
)

// BackendFunc adapts a function to keyrate.Backend. A BackendFunc knows
// neither its window nor whether it blocks, so New needs WithWindow for it,
// and its calls run under the time budget.
type BackendFunc func(ctx context.Context, key string, n int) (keyrate.Decision, error)

// TakeContext calls f.
func (f BackendFunc) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}

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
		return m.backend.TakeContext(ctx, key, n)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, m.budget, m.budgetErr)
	defer cancel()
	// The call runs in its own goroutine so that a backend that ignores ctx
	// costs the request no more than the budget. Such a backend keeps the
	// goroutine until it returns; the buffer lets it exit then.
	done := make(chan takeResult, 1)
	go func() {
		d, err := m.backend.TakeContext(ctx, key, n)
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
