package backend

import (
	"context"

	"github.com/keyrate/keyrate"
)

// Func adapts a function to keyrate.Backend. It lists no policies and bounds
// no call, so middleware needs a window and a budget of its own for it.
type Func func(ctx context.Context, key string, n int) (keyrate.Decision, error)

// TakeContext calls f(ctx, key, n).
func (f Func) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}

var _ keyrate.Backend = Func(nil)
