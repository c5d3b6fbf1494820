package keyrate

import "context"

// ContextWithIdentity returns a copy of ctx that carries the client's
// identity as the client sent it: the API key from its header or metadata,
// or its address, without the route and the names that middleware
// composes into the key it limits. TakeContext and WaitN hand it to the
// tier function (WithTiers) in place of the key, so that a tier function
// written for API keys ("pro-" keys get the pro plan) works unchanged
// behind httplimit and grpclimit, which put it there, and on any backend
// that reads it, the Redis one included.
//
// The identity only chooses the tier; the budget is still the key's. It
// costs one small allocation.
func ContextWithIdentity(ctx context.Context, identity string) context.Context {
	return &identityContext{Context: ctx, identity: identity}
}

// IdentityFromContext returns the identity ContextWithIdentity put in ctx,
// or ctx's parents, and whether there was one.
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

// tierKey returns what the tier function decides key by under ctx: the
// identity ctx carries, else key. Without tiers it looks for nothing.
func (l *Limiter) tierKey(ctx context.Context, key string) string {
	if l.tierOf == nil {
		return key
	}
	return TierKey(ctx, key)
}

// TierKey returns what a tier function decides the request of key under
// ctx by: the identity ctx carries (ContextWithIdentity), else key itself.
func TierKey(ctx context.Context, key string) string {
	if id, ok := IdentityFromContext(ctx); ok {
		return id
	}
	return key
}
