package otellimit

import "github.com/keyrate/keyrate/middleware"

// otherRoute names the routes past the bound of WithMaxRoutes.
const otherRoute = "(other)"

// Observe counts one request of ev.Route, as a middleware.Observer: pass
// the Metrics to httplimit.WithObserver or grpclimit.WithObserver, or call
// it from middleware of your own. It counts as promlimit's Observe does:
//
// A decision (ev.Err nil) counts as allowed, limited, or shadow_limited
// when ev.Shadow says a refusal was served anyway; under its source,
// fallback when ev.Decision.Fallback says a local fallback decided it,
// else store; a refusal also counts once for each policy of ev.Decision
// that refused it (an Overflow refusal, for none); and the backend's time
// is recorded.
//
// An error counts as result error, and, when the backend was asked (a
// request that could not be identified has no ev.Key, and was not), as a
// backend error of a kind: invalid (keyrate.ErrInvalidKey), oom
// (backend.ErrOutOfMemory), unavailable for a network error that is not a
// timeout (a refused or reset connection), even when the time budget ran
// out while a client retried it, timeout for a deadline or the time
// budget, unavailable otherwise (keyrate.ErrUnavailable included). A
// request whose client had gone (middleware.ErrClientGone) counts as
// client_gone, and nowhere else; another cancellation counts as error but
// not as a backend error: neither says anything of the store. A refund
// that failed (middleware.ErrRefundFailed), for a request counted already,
// counts only as a backend error of kind refund.
func (m *Metrics) Observe(ev middleware.Event) {
	r := m.observedRoute(ev.Route)
	if ev.Err != nil {
		r.failed(m, ev.Err, ev.Duration, ev.Key != "")
		return
	}
	r.decided(m, &ev.Decision, ev.Shadow, ev.Duration)
}

// observedRoute returns the attribute sets of the route named name, making
// them on its first request, or those of "(other)" past the bound.
func (m *Metrics) observedRoute(name string) *route {
	if r, ok := m.observed.Load(name); ok {
		return r.(*route)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.observed.Load(name); ok {
		return r.(*route)
	}
	if len(m.routes) >= m.maxRoutes {
		name = otherRoute
		if r, ok := m.observed.Load(name); ok {
			return r.(*route)
		}
	}
	r := m.route(name)
	m.observed.Store(name, r)
	m.routes = append(m.routes, r)
	return r
}
