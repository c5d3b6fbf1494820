package promlimit

import "github.com/keyrate/keyrate/middleware"

// otherRoute labels the routes past WithMaxRoutes.
const otherRoute = "(other)"

// Observe counts one request of ev.Route, as a middleware.Observer: pass
// the Metrics to httplimit.WithObserver or grpclimit.WithObserver, or call
// it from middleware of your own.
//
// A decision (ev.Err nil) counts as allowed, limited, or shadow_limited
// when ev.Shadow says a refusal was served anyway; under its source,
// fallback when ev.Decision.Fallback says a local fallback decided it,
// else store; a refusal also counts once for each policy of ev.Decision
// that refused it; and the backend's time is observed.
//
// An error counts as result="error", and, when the backend was asked (a
// request that could not be identified has no ev.Key, and was not), as a
// backend error of a kind: invalid when it wraps keyrate.ErrInvalidKey;
// oom when it wraps backend.ErrOutOfMemory; unavailable when it holds a
// network error that is not a timeout (a refused or reset connection, as
// *net.OpError), even if it also matches context.DeadlineExceeded, as the
// Redis backend's error does when the budget ran out while Redis refused
// connections; timeout when it matches context.DeadlineExceeded (as a
// call over its time budget does); unavailable otherwise, keyrate.ErrUnavailable
// included (the Redis backend's error for a call its open circuit breaker
// answered at once). A request whose
// client had gone before it was decided (middleware.ErrClientGone) counts
// as result="client_gone", and nowhere else: it says nothing of the store.
// Another cancellation (context.Canceled) counts as result="error" but not
// as a backend error, for the same reason. A refund that failed
// (middleware.ErrRefundFailed), for a request counted already, counts only
// as a backend error of kind refund.
func (m *Metrics) Observe(ev middleware.Event) {
	r := m.observedRoute(ev.Route)
	if ev.Err != nil {
		r.failed(ev.Err, ev.Duration, ev.Key != "")
		return
	}
	r.decided(ev.Decision, ev.Shadow, ev.Duration)
}

func (m *Metrics) observedRoute(name string) *route {
	if r, ok := m.observed.Load(name); ok {
		return r.(*route)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.observed.Load(name); ok {
		return r.(*route)
	}
	if m.nobs >= m.maxRoutes {
		name = otherRoute
		if r, ok := m.observed.Load(name); ok {
			return r.(*route)
		}
	}
	r := m.route(name)
	m.observed.Store(name, r)
	m.nobs++
	return r
}
