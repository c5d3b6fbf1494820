package promlimit

import (
	"time"

	"github.com/keyrate/keyrate"
)

// maxObservedRoutes bounds the routes ObserveDecision and ObserveError give
// series of their own. Their routes come from the middleware at run time
// (grpclimit's are method names, which a client chooses behind
// grpc.UnknownServiceHandler); past the bound, further routes are counted
// under route="(other)", so that no client can grow the series without
// end.
const maxObservedRoutes = 1000

// otherRoute labels the routes past maxObservedRoutes.
const otherRoute = "(other)"

// ObserveDecision counts a request of route that the backend decided in
// took: allowed, limited, or shadow_limited when shadow says a refusal was
// served anyway; its source, fallback when d.Fallback says a local
// fallback decided it, else store; and, for a refusal, each policy of d
// that refused it. With ObserveError it makes *Metrics a
// grpclimit.Observer; middleware of your own can call it too.
func (m *Metrics) ObserveDecision(route string, d keyrate.Decision, shadow bool, took time.Duration) {
	m.observedRoute(route).decided(d, shadow, took)
}

// ObserveError counts a request of route for which the backend gave no
// decision within took, and classifies err: invalid when it wraps
// keyrate.ErrInvalidKey; oom when it wraps keyrate.ErrOutOfMemory;
// unavailable when it holds a network error that is not a timeout (a
// refused or reset connection, as *net.OpError), even if it also matches
// context.DeadlineExceeded, as the Redis backend's error does when the
// budget ran out while Redis refused connections; timeout when it matches
// context.DeadlineExceeded (as a call over its time budget does);
// unavailable otherwise, keyrate.ErrUnavailable included (the Redis
// backend's error for a call its open circuit breaker answered at once). A request whose client had gone before it was
// decided (grpclimit.ErrClientGone) counts as result="client_gone", and
// nowhere else: it says nothing of the store. Another cancellation
// (context.Canceled) counts as result="error" but not as a backend error,
// for the same reason.
func (m *Metrics) ObserveError(route string, err error, took time.Duration) {
	m.observedRoute(route).failed(err, took, true)
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
	if m.nobs >= maxObservedRoutes {
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
