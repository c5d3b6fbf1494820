package backend

import (
	"context"

	"github.com/keyrate/keyrate/internal/identity"
)

// ContextWithIdentity returns ctx carrying the client's identity as sent (an
// API key, an address), without the route middleware adds to the key, for
// the tier function (keyrate.WithTiers) to choose the key's plan by; the
// budget is still the key's. httplimit and grpclimit set it. It costs one
// small allocation.
func ContextWithIdentity(ctx context.Context, id string) context.Context {
	return identity.With(ctx, id)
}

// IdentityFromContext returns the identity ctx carries, and whether it does.
func IdentityFromContext(ctx context.Context) (string, bool) {
	return identity.From(ctx)
}
