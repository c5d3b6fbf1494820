package middleware

import (
	"context"
	"net/http"
	"time"

	"github.com/keyrate/keyrate"
)

// Event describes one request that a middleware decided, or failed to: its
// hooks (OnDecision, OnLimited, OnError) and its Observer receive it.
type Event struct {
	// Route names the budget: the name given to httplimit.WithRoute, or
	// the full gRPC method name, "/pkg.Service/Method".
	Route string
	// Identity is the client the request counts against, as limited:
	// "name=value" for an API key read from a header (httplimit.HeaderKey)
	// or a metadata key (grpclimit.WithMetadataKey), the name in lower
	// case ("x-api-key=alice"); the client's address ("192.0.2.1",
	// "2001:db8:1:2::/64"); or what an httplimit.KeyFunc returned. One over
	// 128 bytes is its "sha256:" digest (clientkey.Bound), in both
	// middlewares alike. "" when the request carries no identity.
	Identity string
	// Key is the key the backend was asked about: Route + "\x00" +
	// Identity, or Identity alone when Route is "". "" when the request
	// could not be identified, so that the backend was not asked.
	Key string
	// Weight is the request's weight (httplimit.WithWeight,
	// grpclimit.WithWeight): 1 by default.
	Weight int
	// Decision is the backend's answer; zero when Err is set. Under a
	// token budget, the one that stands for both.
	Decision keyrate.Decision
	// Budgets, under a token budget (httplimit.WithTokenBudget,
	// grpclimit.WithTokenBudget), are both budgets' Decisions: the
	// requests budget's, then the tokens budget's, Weight being the tokens
	// weight; nil otherwise, and when Err is set.
	Budgets []keyrate.Decision
	// Err says why no decision could be had; nil for a decision. It
	// matches ErrBudgetExceeded for a backend call that outlived the time
	// budget, keyrate.ErrInvalidKey for a request that could not be
	// placed, ErrClientGone for a request whose client had gone; otherwise
	// it is the backend's own error.
	Err error
	// Duration is how long asking the backend took, answer or failure; 0
	// when the request could not be identified. It is measured only when a
	// hook or an Observer is set.
	Duration time.Duration
	// Shadow reports a request that shadow mode served although enforcing
	// would have refused it: a refusal (with Err nil), or an error that
	// enforcing would have answered with a refusal.
	Shadow bool
	// Context is the request's context: for a gRPC call, it carries the
	// peer and the metadata.
	Context context.Context
	// Request is the HTTP request, in httplimit's events; nil in
	// grpclimit's.
	Request *http.Request
}

// Observer is told of every request a middleware decided or failed to
// decide, as metrics need: github.com/keyrate/keyrate/promlimit's *Metrics
// is one. httplimit.WithObserver and grpclimit.WithObserver take it. It is
// called in addition to the hooks, after them, never in their place.
//
// Observe runs on the request's goroutine, before the request is served or
// refused, concurrently for concurrent requests: keep it quick and safe
// for concurrent use.
type Observer interface {
	Observe(ev Event)
}
