package promlimit

import (
	"github.com/keyrate/keyrate/httplimit"
)

// HTTP returns the httplimit options that count the requests of one
// Middleware under route: pass them to httplimit.New, with route the name
// given to httplimit.WithRoute.
//
//	search, err := httplimit.New(l, append(m.HTTP("search"), httplimit.WithRoute("search"))...)
//
// They set the OnDecision, OnLimited and OnError hooks. A hook of your own
// set after them replaces theirs: to keep both, call ObserveDecision (from
// OnDecision for admissions, from OnLimited for refusals, with
// Event.Shadow) and ObserveError (from OnError) in your hooks instead.
func (m *Metrics) HTTP(route string) []httplimit.Option {
	r := m.route(route)
	return []httplimit.Option{
		httplimit.WithOnDecision(func(ev httplimit.Event) {
			if ev.Decision.Allowed {
				r.decided(ev.Decision, false, ev.Duration)
			}
		}),
		// Refusals are counted here, where Event.Shadow is set.
		httplimit.WithOnLimited(func(ev httplimit.Event) {
			r.decided(ev.Decision, ev.Shadow, ev.Duration)
		}),
		// An error with no key and no duration came from the KeyFunc,
		// before the backend was asked.
		httplimit.WithOnError(func(ev httplimit.Event) {
			r.failed(ev.Err, ev.Duration, ev.Key != "" || ev.Duration > 0)
		}),
	}
}
