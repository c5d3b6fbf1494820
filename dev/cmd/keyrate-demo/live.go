package main

import (
	"net/http"

	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
	"github.com/keyrate/keyrate/httplimit"
)

// newLive returns the visualiser for the demo's routes. Its page shows the
// decisions of every client, each as shownIdentity shows it. Its event
// streams are capped per client address, read as the limiters read it
// (from X-Forwarded-For behind cfg.TrustedProxies), so that behind a proxy
// each client has its own streams rather than all sharing the proxy's.
func newLive(cfg config) (*live.Hub, error) {
	rs := make([]live.Route, len(routes))
	for i, rt := range routes {
		rs[i] = live.Route{Name: rt.Name, Method: rt.Method, Path: rt.Path, Policies: rt.Policies, Form: rt.Form, Note: rt.Note,
			Unit: rt.Unit, Burst: rt.Burst}
		if rt.FailuresOnly {
			rs[i].Refunds = true
			rs[i].Note += " Only failed attempts count: one answered below 400 is given back."
		}
		if rt.Cost != nil {
			// A request that used nothing is given back whole.
			rs[i].Refunds = true
		}
	}
	ip, err := httplimit.ClientIP(httplimit.IPConfig{TrustHops: cfg.TrustedProxies})
	if err != nil {
		return nil, err
	}
	return live.New(live.Config{
		Routes:    rs,
		KeyHeader: keyHeader,
		ShowKey:   shownKey,
		ClientOf: func(r *http.Request) string {
			if a, err := ip(r); err == nil {
				return a
			}
			return r.RemoteAddr // not an IP address, as on an in-memory listener
		},
	})
}

// withLive serves the visualiser at "/" and under "/live/", and api
// everywhere else.
func withLive(api http.Handler, hub *live.Hub) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.Handle("GET /{$}", hub.Handler())
	mux.Handle("GET /live/", hub.Handler())
	return mux
}

// recordTo is the decision subscriber that feeds the visualiser. Failed
// decisions have no Decision to draw and are left to the log.
func recordTo(hub *live.Hub) func(decision) {
	return func(d decision) {
		switch {
		case d.Err != nil:
		case d.Refund != nil:
			hub.RecordRefundN(d.Route, d.Key, *d.Refund, d.Given, d.Decision, d.At, d.Budgets...)
		default:
			hub.RecordN(d.Route, d.Key, d.Cost, d.Decision, d.At, d.Budgets...)
		}
	}
}
