package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
)

// SlotRetryAfter is the Retry-After of a request refused for want of a
// slot of a concurrency limit. When a slot comes back depends on how long
// the requests holding them run, which nothing knows beforehand; a second
// is what clients are commonly told to wait for a busy server.
const SlotRetryAfter = time.Second

// SlotUnit is the quota unit of a concurrency limit in the
// RateLimit-Policy field, registered by the IETF draft.
const SlotUnit = "concurrent-requests"

// slots asks a middleware.Concurrency store for slots as httplimit and
// grpclimit do: never for a request whose client has gone, with the client's
// identity in the context for the store's tier function, and waiting at most
// a bounded time. It is safe for concurrent use.
type slots struct {
	store    middleware.Concurrency
	wait     time.Duration
	identity bool // the store may read the identity: pass it
}

// newSlots returns slots over s that wait up to wait for a slot (0: not at
// all) within each request's context. A nil s or a negative wait gives an
// error wrapping keyrate.ErrConfig.
func newSlots(s middleware.Concurrency, wait time.Duration) (*slots, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: middleware: in-flight store is nil", keyrate.ErrConfig)
	case wait < 0:
		return nil, fmt.Errorf("%w: middleware: in-flight wait is %v, want >= 0", keyrate.ErrConfig, wait)
	}
	return &slots{store: s, wait: wait, identity: s.Tiered()}, nil
}

// errWaited is the cause of a wait for a slot that ran out of its bound.
var errWaited = errors.New("middleware: no slot came free within the wait")

// acquire takes a slot of key for a request made by the client identity
// names as it sent it; ctx is the request's. It returns the slot's release,
// or, when key holds its limit until the wait is over, a nil release and a
// nil error; limit is key's number of slots either way. A request whose ctx
// is done, before the call or while it waits, fails with an error wrapping
// middleware.ErrClientGone; a store that cannot answer, with the store's
// error. With shadow set, it does not wait: a request that is only watched
// is not held up.
func (s *slots) acquire(ctx context.Context, key, identity string, shadow bool) (release func(), limit int, err error) {
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

// slotPolicy returns the policy of a concurrency limit of limit slots on
// route, as the RateLimit fields name it: route + "-inflight", or
// "inflight" without a route, with no window.
func slotPolicy(route string, limit int) keyrate.Policy {
	name := "inflight"
	if route != "" {
		name = route + "-inflight"
	}
	return keyrate.Policy{Name: name, Limit: limit}
}

// slotRefusal returns the Decision reported for a request refused for want
// of one of limit slots on route: refused by slotPolicy(route, limit),
// none remaining, with a RetryAfter of SlotRetryAfter.
func slotRefusal(route string, limit int) keyrate.Decision {
	return backend.Combine(keyrate.PolicyDecision{Policy: slotPolicy(route, limit), RetryAfter: SlotRetryAfter})
}
