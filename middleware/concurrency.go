package middleware

import "context"

// Concurrency is a store of concurrency limits (requests in flight) per
// key, as httplimit.WithConcurrency and grpclimit.WithConcurrency take it:
// *keyrate.Concurrency keeps them in process, and *redislimit.Concurrency
// across replicas.
//
// AcquireSlot takes one of key's slots: with wait, waiting for one until
// ctx is done; without, only if one is free now. It returns the function
// that gives the slot back (idempotent, safe from any goroutine), or a nil
// release and a nil error when key holds its limit (and, with wait, ctx
// ended first: ctx's error then). limit is the number of slots of key's
// tier, which middleware advertises; it comes with every answer. An error
// means no answer could be had: ctx was done before the call (ctx's
// error; no slot is taken for a caller that has gone), the store was
// unavailable (wrapping keyrate.ErrUnavailable) or closed
// (keyrate.ErrClosed), or key could not be placed (keyrate.ErrInvalidKey).
// The tier function of a store with tiers sees the identity ctx carries
// (backend.ContextWithIdentity).
type Concurrency interface {
	AcquireSlot(ctx context.Context, key string, wait bool) (release func(), limit int, err error)
	// Tiered reports whether the store chooses a key's limit by the
	// client's identity: then the middleware hands it the identity in the
	// context (backend.ContextWithIdentity), and otherwise spares the
	// allocation.
	Tiered() bool
}
