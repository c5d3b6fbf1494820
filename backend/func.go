package backend

import (
	"context"
	"errors"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/access"
)

// MaxPolicies is the most policies a keyrate.Limiter or one of its tiers
// enforces together: a Decision carries each one's numbers inline.
const MaxPolicies = access.MaxPolicies

// ErrOutOfMemory is wrapped by a backend's error when its store is out of
// memory and cannot record (a Redis at maxmemory): a store failure.
var ErrOutOfMemory = errors.New("keyrate: store out of memory")

// Func adapts a function to keyrate.Backend. It lists no policies and bounds
// no call, so middleware needs a window and a budget of its own for it.
type Func func(ctx context.Context, key string, n int) (keyrate.Decision, error)

// TakeContext calls f(ctx, key, n).
func (f Func) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}

var _ keyrate.Backend = Func(nil)
