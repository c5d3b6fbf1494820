package keyrate

import "context"

// ContextWithIdentity returns ctx carrying the client's identity as sent (an
// API key, an address), without the route middleware adds to the key, for
// the tier function to choose the key's plan by; the budget is still the
// key's. httplimit and grpclimit set it. It costs one small allocation.
func ContextWithIdentity(ctx context.Context, identity string) context.Context {
	return &identityContext{Context: ctx, identity: identity}
}

// IdentityFromContext returns the identity ctx carries, and whether it does.
func IdentityFromContext(ctx context.Context) (string, bool) {
	if c, ok := ctx.(*identityContext); ok { // what middleware passes, unless it adds a budget
		return c.identity, true
	}
	if c, ok := ctx.Value(identityKey{}).(*identityContext); ok {
		return c.identity, true
	}
	return "", false
}

// identityKey finds an identityContext among a context's parents.
type identityKey struct{}

// identityContext is ctx with an identity: one allocation, where
// context.WithValue would take a second to box the string.
type identityContext struct {
	context.Context
	identity string
}

func (c *identityContext) Value(key any) any {
	if key == (identityKey{}) {
		return c
	}
	return c.Context.Value(key)
}
