// Package adapter is for packages that put a keyrate.Backend behind a
// protocol, as httplimit (net/http) and grpclimit (gRPC) do; applications
// do not import it. It holds what both share, so that they bound, classify
// and report alike: a Caller that asks the backend under a time budget and
// never for a client that has gone, the Hooks that tell of an Event, the
// SlotGate of a concurrency limit, a request's Reservation of weight, and
// the two keys of a token budget.
//
// What a user of those packages configures (FailureMode, Event, Observer,
// Concurrency, ReportWeight, TokenTier) is in package middleware.
package adapter
