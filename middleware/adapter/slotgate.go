package adapter

import (
	"context"
	"errors"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
)

// Hooks are what a middleware tells of its Events, as httplimit's and
// grpclimit's WithOnDecision, WithOnLimited, WithOnError and WithObserver
// set them. Any of them may be nil.
type Hooks struct {
	OnDecision, OnLimited, OnError func(middleware.Event)
	Observer                       middleware.Observer
}

// Timed reports whether anything is told of an Event, so that its Duration
// is worth measuring.
func (h Hooks) Timed() bool {
	return h.OnDecision != nil || h.OnLimited != nil || h.OnError != nil || h.Observer != nil
}

// Decided tells OnDecision, then OnLimited when ev's Decision is a
// refusal, then the Observer, of a decision.
func (h Hooks) Decided(ev middleware.Event) {
	if h.OnDecision != nil {
		h.OnDecision(ev)
	}
	if h.OnLimited != nil && !ev.Decision.Allowed {
		h.OnLimited(ev)
	}
	if h.Observer != nil {
		h.Observer.Observe(ev)
	}
}

// Failed tells OnError, then the Observer, of a request that got no
// decision, or whose refund failed: ev.Err says why.
func (h Hooks) Failed(ev middleware.Event) {
	if h.OnError != nil {
		h.OnError(ev)
	}
	if h.Observer != nil {
		h.Observer.Observe(ev)
	}
}

// SlotGate is the concurrency step of a middleware, as
// httplimit.WithConcurrency and grpclimit.WithConcurrency take it: it asks
// the store for a request's slot before anything else, answers for the
// failure mode and shadow mode, and reports what no later step of the
// request will. It is safe for concurrent use.
type SlotGate struct {
	slots   *slots
	failure middleware.FailureMode
	shadow  bool
	hooks   Hooks
	timed   bool
}

// NewSlotGate returns the SlotGate of a concurrency limit over s, waiting
// up to wait for a slot (0: not at all) within each request's context, for
// a middleware with the given failure mode, shadow mode and hooks. A nil s
// or a negative wait give an error wrapping keyrate.ErrConfig.
func NewSlotGate(s middleware.Concurrency, wait time.Duration, failure middleware.FailureMode, shadow bool, hooks Hooks) (*SlotGate, error) {
	slots, err := newSlots(s, wait)
	if err != nil {
		return nil, err
	}
	return &SlotGate{slots: slots, failure: failure, shadow: shadow, hooks: hooks, timed: hooks.Timed()}, nil
}

// SlotHold is what a request got from SlotGate.Hold, and so what the
// middleware does next.
type SlotHold struct {
	// Release gives the request's slot back; call it once the request has
	// been served. It does nothing for a request that goes on without a
	// slot, and is nil for one that does not go on (Full, or Err set).
	Release func()
	// Policy is the in-flight limit's, the concurrency limit's policy with the
	// key's limit, for the RateLimit-Policy field; zero when the store did
	// not answer.
	Policy keyrate.Policy
	// Full reports a key that holds its limit: the request is refused for
	// want of a slot, with no rate decision (so that the refusal costs no
	// rate budget), or, in shadow mode, served without a slot and without
	// a rate decision. It has been reported as a refusal by
	// slotRefusal(ev.Route, limit), with Event.Shadow in shadow mode.
	Full bool
	// Err, when set, says why no slot could be had where the request must
	// be answered as one whose rate decision failed (the client has gone,
	// the request could not be placed, or FailClosed outside shadow mode).
	// It has not been reported: the middleware's answer to a failure does
	// that.
	Err error
}

// Hold takes the slot of the request ev describes (its Key, and its Route
// for the policy's name), made by the client that sent identity; ctx is
// the request's. It sets ev.Duration (when a hook is set), ev.Err,
// ev.Decision and ev.Shadow as it goes. A store that cannot answer is
// reported to OnError and the Observer and the request goes on without a
// slot, under FailOpen or in shadow mode (Event.Shadow set where enforcing
// would have refused it); any other failure is left to the middleware, in
// SlotHold.Err.
func (g *SlotGate) Hold(ctx context.Context, ev *middleware.Event, identity string) SlotHold {
	var began time.Time
	if g.timed {
		began = time.Now()
	}
	release, limit, err := g.slots.acquire(ctx, ev.Key, identity, g.shadow)
	if g.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		ev.Err = err
		goOn := !errors.Is(err, middleware.ErrClientGone) && !errors.Is(err, keyrate.ErrInvalidKey) &&
			(g.failure == middleware.FailOpen || g.shadow)
		if !goOn {
			return SlotHold{Err: err}
		}
		ev.Shadow = g.shadow && g.failure == middleware.FailClosed
		g.hooks.Failed(*ev)
		return SlotHold{Release: noSlot}
	}
	hold := SlotHold{Release: release, Policy: slotPolicy(ev.Route, limit)}
	if release != nil {
		return hold
	}
	ev.Decision = slotRefusal(ev.Route, limit)
	ev.Shadow = g.shadow
	g.hooks.Decided(*ev)
	hold.Full = true
	return hold
}

// noSlot is the release of a request that holds no slot.
func noSlot() {}
