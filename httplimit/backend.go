package httplimit

import (
	"context"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/call"
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
var ErrBudgetExceeded = call.ErrBudgetExceeded
