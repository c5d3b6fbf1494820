// Package identity carries the client's identity in a context, for the
// tier functions of the core and of every backend: package backend exports
// it (backend.ContextWithIdentity, backend.IdentityFromContext).
package identity

import "context"

// With returns ctx carrying identity, in one allocation.
func With(ctx context.Context, identity string) context.Context {
	return &identityContext{Context: ctx, identity: identity}
}

// From returns the identity ctx carries, and whether it does.
func From(ctx context.Context) (string, bool) {
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
