package grpclimit

import (
	"context"
	"time"

	"github.com/keyrate/keyrate"
)

// Option configures a Limiter; pass options to New.
type Option func(*config)

type config struct {
	mdKey      string
	methods    map[string]keyrate.Backend
	cost       func(ctx context.Context, method string, req any) int
	budget     time.Duration
	failure    FailureMode
	shadow     bool
	onDecision func(Event)
	onLimited  func(Event)
	onError    func(Event)
	observer   Observer
}

// FailureMode says what the Limiter does with a call when it cannot get a
// decision: the backend returned an error or outlived the time budget.
//
//   - FailOpen (the default) serves the call as if it were allowed, with no
//     ratelimit metadata (only ratelimit-policy), and reports the error to
//     OnError. A store outage then costs the limits, not the service: choose
//     it when availability matters more than the limit, and alert on OnError.
//   - FailClosed fails the call with codes.Unavailable and reports the error
//     to OnError. A store outage then takes the limited methods down: choose
//     it when the limit protects something that must not be overrun.
//
// A backend with a local fallback (the Redis backend's WithLocalFallback)
// answers an outage with decisions, not errors: a share of each limit,
// decided in process, with Decision.Fallback set. The Limiter serves and
// refuses those like any other decision, and the Observer sees them, so
// the failure mode applies only when even the fallback cannot decide.
//
// Either way, an error the call itself caused (keyrate.ErrInvalidKey) fails
// it with codes.InvalidArgument, and a call whose client has gone before it
// was decided (ErrClientGone) fails with its context's status,
// codes.Canceled or codes.DeadlineExceeded: neither is a store outage, and
// serving either would let a client go over its limit at will.
type FailureMode int

const (
	// FailOpen serves the call when no decision can be had.
	FailOpen FailureMode = iota
	// FailClosed fails the call with codes.Unavailable when no decision can
	// be had.
	FailClosed
)

// WithMetadataKey identifies a client by the first value of the named
// request metadata key (an API key, say), sent to the backend as
// "name=value", and by its peer address when the key is absent or empty.
// Names are case-insensitive; New rejects one that is not a valid metadata
// key. Values over 128 bytes are replaced by their SHA-256 digest, so a
// client cannot make the store hold a large key; a backend's tier function
// still sees the value itself, as sent (see keyrate.ContextWithIdentity).
// Default: the peer address alone.
//
// The value is taken as given: validate API keys before this interceptor
// runs (chain an authenticating interceptor first), or a client can mint
// fresh budgets by sending new values (bound the damage with
// keyrate.WithMaxKeys).
func WithMetadataKey(name string) Option { return func(c *config) { c.mdKey = name } }

// WithMethod gives the method named fullMethod ("/pkg.Service/Method") its
// own backend, with its own limit and window, instead of the one passed to
// New. Every method keeps its own budget either way; this changes its size.
// Default: every method uses New's backend. For a method named twice, the
// last WithMethod wins.
func WithMethod(fullMethod string, b keyrate.Backend) Option {
	return func(c *config) {
		if c.methods == nil {
			c.methods = make(map[string]keyrate.Backend)
		}
		c.methods[fullMethod] = b
	}
}

// WithCost sets the weight of a call, for methods where some calls cost more
// than others (a batch write, say). f receives the call's context, its full
// method name and, for a unary call, its request message (nil for a
// stream, which is weighed once, when it opens). Default: 1 for every call.
// A weight of 0 is always admitted and consumes nothing; a weight that can
// never be admitted (negative, or above the limit) fails with
// codes.InvalidArgument.
func WithCost(f func(ctx context.Context, fullMethod string, req any) int) Option {
	return func(c *config) { c.cost = f }
}

// WithTimeBudget bounds each backend call. A call that outlives it counts as
// a failure (wrapping ErrBudgetExceeded, answered per the FailureMode), and
// the gRPC call waits no longer, even for a backend that ignores its
// context. Default: 250ms. Backends that never block (*keyrate.Limiter) or
// bound their own calls (the Redis backend) are called directly and keep
// their own budget. Must be positive.
func WithTimeBudget(d time.Duration) Option { return func(c *config) { c.budget = d } }

// WithFailureMode sets what happens when the backend fails. Default:
// FailOpen. See FailureMode for the trade-off.
func WithFailureMode(m FailureMode) Option { return func(c *config) { c.failure = m } }

// WithShadow decides and records every call as usual, sets the ratelimit
// metadata and reports refusals to OnDecision, OnLimited and the Observer
// (with Event.Shadow set), but serves refused calls instead of failing them.
// Roll a new limit out this way and watch what it would have refused before
// enforcing it. Errors are still answered per the failure mode, and a call
// whose client has gone is still never served. Default: off.
func WithShadow() Option { return func(c *config) { c.shadow = true } }

// WithOnDecision sets a hook called for every call the backend decided,
// admitted or refused, before the call is served or failed. It runs on the
// call's goroutine, so keep it quick. Default: none.
func WithOnDecision(f func(Event)) Option { return func(c *config) { c.onDecision = f } }

// WithOnLimited sets a hook called for every refused call, after OnDecision.
// Default: none.
func WithOnLimited(f func(Event)) Option { return func(c *config) { c.onLimited = f } }

// WithOnError sets a hook called when no decision could be had: the backend
// failed or the budget ran out, or the call's client had gone (Event.Err
// matches ErrClientGone). Event.Err says why. Default: none; errors then
// pass silently, which under FailOpen means unnoticed.
func WithOnError(f func(Event)) Option { return func(c *config) { c.onError = f } }

// WithObserver sets an Observer told of every decision and every error, as
// metrics need: github.com/keyrate/keyrate/promlimit's *Metrics is one. It
// is independent of the hooks; both can be set. Default: none.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }
