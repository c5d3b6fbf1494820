package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// InFlight is a store of in-flight slots: how many requests of a key may
// run at once. *keyrate.Concurrency keeps them in process, and the Redis
// backend's Concurrency (github.com/keyrate/keyrate/redislimit) across
// replicas; httplimit.WithInFlight and grpclimit.WithInFlight take either.
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
type InFlight interface {
	AcquireSlot(ctx context.Context, key string, wait bool) (release func(), limit int, err error)
	// Tiered reports whether the store chooses a key's limit by the
	// client's identity: then Slots hands it the identity in the context
	// (backend.ContextWithIdentity), and otherwise spares the allocation.
	Tiered() bool
}

// SlotRetryAfter is the Retry-After of a request refused for want of a
// slot. When a slot comes back depends on how long the requests holding
// them run, which nothing knows beforehand; a second is what clients are
// commonly told to wait for a busy server.
const SlotRetryAfter = time.Second

// SlotUnit is the quota unit of an in-flight limit in the RateLimit-Policy
// field, registered by the IETF draft.
const SlotUnit = "concurrent-requests"

// Slots asks an InFlight store for slots as httplimit and grpclimit do:
// never for a request whose client has gone, with the client's identity
// in the context for the store's tier function, and waiting at most a
// bounded time. It is safe for concurrent use.
type Slots struct {
	store    InFlight
	wait     time.Duration
	identity bool // the store may read the identity: pass it
}

// NewSlots returns Slots over s that wait up to wait for a slot (0: not at
// all) within each request's context. A nil s or a negative wait gives an
// error wrapping keyrate.ErrConfig.
func NewSlots(s InFlight, wait time.Duration) (*Slots, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: middleware: in-flight store is nil", keyrate.ErrConfig)
	case wait < 0:
		return nil, fmt.Errorf("%w: middleware: in-flight wait is %v, want >= 0", keyrate.ErrConfig, wait)
	}
	return &Slots{store: s, wait: wait, identity: s.Tiered()}, nil
}

// errWaited is the cause of a wait for a slot that ran out of its bound.
var errWaited = errors.New("middleware: no slot came free within the wait")

// Acquire takes a slot of key for a request made by the client identity
// names as it sent it; ctx is the request's. It returns the slot's
// release, or, when key holds its limit until the wait is over, a nil
// release and a nil error; limit is key's number of slots either way. A
// request whose ctx is done, before the call or while it waits, fails
// with an error wrapping ErrClientGone; a store that cannot answer, with
// the store's error. With shadow set, it does not wait: a request that
// is only watched is not held up.
func (s *Slots) Acquire(ctx context.Context, key, identity string, shadow bool) (release func(), limit int, err error) {
	if ctx.Err() != nil {
		return nil, 0, gone(ctx)
	}
	sctx := ctx
	if s.identity && identity != key {
		sctx = backend.ContextWithIdentity(ctx, identity)
	}
	wait := s.wait > 0 && !shadow
	if wait {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeoutCause(sctx, s.wait, errWaited)
		defer cancel()
	}
	release, limit, err = s.store.AcquireSlot(sctx, key, wait)
	switch {
	case err == nil:
		return release, limit, nil
	case ctx.Err() != nil:
		return nil, limit, gone(ctx)
	case wait && context.Cause(sctx) == errWaited && errors.Is(err, context.DeadlineExceeded):
		return nil, limit, nil // the wait is over: full
	}
	return nil, limit, err
}

// SlotPolicy returns the policy of an in-flight limit of limit slots on
// route, as the RateLimit fields name it: route + "-inflight", or
// "inflight" without a route, with no window.
func SlotPolicy(route string, limit int) keyrate.Policy {
	name := "inflight"
	if route != "" {
		name = route + "-inflight"
	}
	return keyrate.Policy{Name: name, Limit: limit}
}

// SlotRefusal returns the Decision reported for a request refused for want
// of one of limit slots on route: refused by SlotPolicy(route, limit),
// none remaining, with a RetryAfter of SlotRetryAfter.
func SlotRefusal(route string, limit int) keyrate.Decision {
	return backend.Combine(keyrate.PolicyDecision{Policy: SlotPolicy(route, limit), RetryAfter: SlotRetryAfter})
}
