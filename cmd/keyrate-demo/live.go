package main

import (
	"net/http"

	"github.com/keyrate/keyrate/cmd/keyrate-demo/internal/live"
)

// newLive returns the visualiser for the demo's routes. Its page shows the
// decisions of every client, each as shownIdentity shows it.
func newLive() (*live.Hub, error) {
	rs := make([]live.Route, len(routes))
	for i, rt := range routes {
		rs[i] = live.Route{Name: rt.Name, Method: rt.Method, Path: rt.Path, Policies: rt.Policies}
	}
	return live.New(live.Config{
		Routes:    rs,
		KeyHeader: keyHeader,
		ShowKey:   shownKey,
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
		if d.Err == nil {
			hub.Record(d.Route, d.Key, d.Decision, d.At)
		}
	}
}
