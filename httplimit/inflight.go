package httplimit

import (
	"errors"
	"net/http"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// WithInFlight holds the route to a number of requests per client in
// flight at once, beside its rate policies: a request takes one of its
// key's slots in s (a *keyrate.Concurrency, or the Redis backend's
// Concurrency, shared by replicas) before anything else, and gives it back
// when the handler returns, whether it returns normally, panics, or ends
// because the client hung up. The key is the rate limit's (the route and
// the identity), and a store's tier function sees the identity, as the
// backend's does.
//
// When the key holds its limit, the request waits up to wait for a slot
// (0, the default: not at all), within its own context, first come first
// served; then it is refused with 429 Too Many Requests, Retry-After of a
// second (middleware.SlotRetryAfter: nothing knows when a request in flight
// will end) and the problem body naming the in-flight policy, without
// asking the rate backend, so that the refusal costs the client no rate
// budget. A request whose client hangs up while it waits is never served
// (middleware.ErrClientGone, as for the rate limit).
//
// RateLimit-Policy lists the in-flight limit beside the rate policies, as
// a policy named route + "-inflight" ("inflight" without a route) with the
// key's number of slots and the draft's unit, with no window:
//
//	RateLimit-Policy: "search-inflight";q=3;qu="concurrent-requests", "search";q=20;w=60
//
// The hooks and the Observer get one Event per request: a request refused
// for want of a slot is a refusal whose Decision names that policy
// (middleware.SlotRefusal); an admitted one is reported by its rate
// decision. A store that cannot answer is reported to OnError and answered
// per the failure mode: FailOpen goes on without a slot (the rate limit
// still applies), FailClosed refuses with 503. In shadow mode a request is
// never held up: a full key is reported as a refusal with Event.Shadow
// set, and the request is served without a slot and without a rate
// decision, as enforcing would have refused it before one.
//
// A nil s or a negative wait make New return an error wrapping
// keyrate.ErrConfig. Default: no in-flight limit.
func WithInFlight(s middleware.InFlight, wait time.Duration) Option {
	return func(c *config) { c.inFlight, c.inFlightWait, c.inFlightSet = s, wait, true }
}

// newSlots returns the Slots of WithInFlight, or nil without it.
func newSlots(c *config) (*middleware.Slots, error) {
	if !c.inFlightSet {
		return nil, nil
	}
	return middleware.NewSlots(c.inFlight, c.inFlightWait)
}

// holdSlot takes the request's slot. It returns the slot's release, and
// whether the request goes on; when it does not, the request has been
// answered. A request that goes on without a slot (FailOpen, shadow) gets
// a release that does nothing.
func (m *Middleware) holdSlot(w http.ResponseWriter, r *http.Request, next http.Handler, ev middleware.Event, sent string) (func(), bool) {
	var began time.Time
	if m.timed {
		began = time.Now()
	}
	release, limit, err := m.slots.Acquire(r.Context(), ev.Key, sent, m.shadow)
	if m.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		failOpen := !errors.Is(err, middleware.ErrClientGone) && !errors.Is(err, keyrate.ErrInvalidKey) &&
			(m.failure == middleware.FailOpen || m.shadow)
		if !failOpen {
			m.fail(w, r, next, ev, err)
			return nil, false
		}
		ev.Err = err
		ev.Shadow = m.shadow && m.failure == middleware.FailClosed
		report(m.onError, ev)
		m.observe(ev)
		return func() {}, true
	}
	h := w.Header()
	if m.headers&DraftHeaders != 0 {
		p := middleware.SlotPolicy(m.route, limit)
		h[hPolicy] = append(h[hPolicy], string(ratelimitfield.AppendPolicies(nil, []keyrate.Policy{p}, m.route, middleware.SlotUnit)))
	}
	if release != nil {
		return release, true
	}
	ev.Decision = middleware.SlotRefusal(m.route, limit)
	ev.Shadow = m.shadow
	report(m.onDecision, ev)
	report(m.onLimited, ev)
	m.observe(ev)
	m.setPolicy(h)
	if m.shadow {
		next.ServeHTTP(w, r)
		return nil, false
	}
	setRetryAfter(h, ratelimitfield.Seconds(ev.Decision.RetryAfter))
	m.limited(w, r, ev)
	return nil, false
}
