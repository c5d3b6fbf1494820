package promlimit

import "github.com/keyrate/keyrate/middleware"

// otherRoute labels the routes past WithMaxRoutes.
const otherRoute = "(other)"

// Observe counts one request of ev.Route, as a middleware.Observer: pass
// the Metrics to httplimit.WithObserver or grpclimit.WithObserver, or call
// it from middleware of your own. A decision counts as allowed, limited or
// shadow_limited, under its source (store, or fallback when a local
// fallback decided it), a refusal once more for each policy that refused
// it. An error counts as result error and, when the backend was asked, as
// a backend error of a kind (timeout, unavailable, oom, invalid; a failed
// refund only as kind refund); a client gone before the decision counts
// as client_gone and nowhere else. The README's table says what each label
// value means.
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
