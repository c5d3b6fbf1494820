package grpclimit

import (
	"context"
	"time"

	"github.com/keyrate/keyrate"
)

// Event describes one call the Limiter decided, or failed to; the hooks
// receive it.
type Event struct {
	// Context is the call's context: its peer, its metadata.
	Context context.Context
	// Method is the full method name, "/pkg.Service/Method": the route.
	Method string
	// Identity is the client the call was counted against: "name=value" for
	// a metadata key (the value bounded as WithMetadataKey says), else the
	// peer's address.
	Identity string
	// Key is the key the backend was asked about: Method + "\x00" +
	// Identity.
	Key string
	// Cost is the call's weight.
	Cost int
	// Decision is the backend's answer; zero when Err is set.
	Decision keyrate.Decision
	// Err is set for OnError: the backend's error, one matching
	// ErrBudgetExceeded, or, for a call whose client had gone before it was
	// decided, one matching ErrClientGone.
	Err error
	// Duration is how long the backend took to answer or fail. It is
	// measured only when a hook or an Observer is set.
	Duration time.Duration
	// Shadow reports a refusal that WithShadow let through: the call was
	// decided, recorded and reported as limited, then served. It is set for
	// every hook that sees such a call.
	Shadow bool
}

// Observer is told of every call a Limiter asked its backend about. It is
// the interface metrics plug into: github.com/keyrate/keyrate/promlimit's
// *Metrics satisfies it. Its methods take only standard and keyrate types,
// so that a module implementing it need not import gRPC, and grpclimit need
// not import Prometheus.
//
// The methods run on the call's goroutine, concurrently for concurrent
// calls: keep them quick and safe for concurrent use.
type Observer interface {
	// ObserveDecision is told that the backend decided a call of route (the
	// full method name) in took: d says whether it was admitted, and shadow
	// whether a refusal was served anyway (WithShadow).
	ObserveDecision(route string, d keyrate.Decision, shadow bool, took time.Duration)
	// ObserveError is told that no decision could be had for a call of route
	// within took: err says why (the backend's error, one matching
	// ErrBudgetExceeded, or one matching ErrClientGone for a call whose
	// client had gone, which says nothing about the store).
	ObserveError(route string, err error, took time.Duration)
}
