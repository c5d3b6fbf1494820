package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// Option configures a Limiter; pass options to New.
type Option func(*config)

type config struct {
	mdKey     string
	methods   map[string]keyrate.Backend
	cost      func(ctx context.Context, method string, req any) int
	budget    time.Duration
	budgetSet bool // WithTimeBudget was given
	failure   middleware.FailureMode
	shadow    bool
	hooks     middleware.Hooks // WithOnDecision, WithOnLimited, WithOnError, WithObserver
	refund    func(codes.Code) bool
	revision  ratelimitfield.Revision
	tokens    bool // WithTokenBudget

	inFlight middleware.SlotConfig // WithInFlight's
}

// WithMetadataKey identifies a client by the first value of the named
// request metadata key (an API key, say) when present and not empty, as
// "name=value" with the name in lower case ("x-api-key=alice", as
// httplimit.HeaderKey gives the same key in a header), and by its peer
// address otherwise. Names are case-insensitive; New rejects one that is
// not a valid metadata key. An identity over 128 bytes is limited under
// its SHA-256 digest (clientkey.Bound), as httplimit limits one, so a
// client cannot make the store hold a large key; a backend's tier function
// still sees the value itself, as sent (see backend.ContextWithIdentity).
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

// WithCost sets the weight of a call, for methods where some calls cost
// more than others (a batch write, say). f receives the call's context,
// its full method name and, for a unary call, its request message (nil
// for a stream, which is weighed once, when it opens). Default: 1 for
// every call. A weight of 0 is always admitted and consumes nothing; a
// weight that can never be admitted (negative, or above a policy's limit)
// is refused with no wait that would help: codes.InvalidArgument, without
// RetryInfo.
func WithCost(f func(ctx context.Context, fullMethod string, req any) int) Option {
	return func(c *config) { c.cost = f }
}

// WithTimeBudget bounds each call to a backend that is not backend.Bounded.
// A call that outlives it is a store failure (an error matching
// middleware.ErrBudgetExceeded, answered per the failure mode), and the
// gRPC call waits no longer, even for a backend that ignores its context:
// the backend call runs on a goroutine of its own, under a timer. Default:
// 250ms. Must be positive.
//
// A Bounded backend is called on the call's goroutine under its own budget
// alone: one budget, in one place, and no goroutine hand-off per call. The
// Redis backend bounds its calls by its own timeout (set the budget
// there); *keyrate.Limiter never waits. New refuses WithTimeBudget when
// every backend of the Limiter (New's and WithMethod's) is Bounded, rather
// than let a budget look like it applies; with some that are not, it
// bounds those alone.
func WithTimeBudget(d time.Duration) Option {
	return func(c *config) { c.budget, c.budgetSet = d, true }
}

// WithFailureMode sets what happens when the store is unavailable: the
// backend failed or outlived the time budget. Default:
// middleware.FailOpen, which serves the call; middleware.FailClosed fails
// it with codes.Unavailable. See middleware.FailureMode for the trade-off.
func WithFailureMode(m middleware.FailureMode) Option { return func(c *config) { c.failure = m } }

// WithShadow puts the Limiter in shadow mode: it decides and records every
// call as usual, sets the ratelimit metadata with what enforcing would say
// (r=0 and t on what it would refuse), and reports to the hooks and the
// Observer as usual, with Event.Shadow set on what it would have refused;
// but it refuses nothing. Roll a new limit out this way and watch what it
// would refuse before enforcing it.
//
// A shadowed refusal records nothing, as a refusal never does, so the
// budget moves exactly as it would under enforcement; the call is served,
// so no RetryInfo is sent. Errors are served too (the Limiter limits no
// one yet, so serving them lifts no limit) and reported to OnError, with
// Event.Shadow set where enforcing would have failed the call (a call that
// cannot be placed, a store failure under FailClosed); save a call whose
// client has gone, which is never served. Default: off.
func WithShadow() Option { return func(c *config) { c.shadow = true } }

// WithOnDecision sets a hook called for every call the backend decided,
// admitted or refused, before the call is served or refused. It runs on
// the call's goroutine, so keep it quick. Default: none.
func WithOnDecision(f func(middleware.Event)) Option {
	return func(c *config) { c.hooks.OnDecision = f }
}

// WithOnLimited sets a hook called for every refused call, after
// OnDecision and before the call is failed. Default: none.
func WithOnLimited(f func(middleware.Event)) Option { return func(c *config) { c.hooks.OnLimited = f } }

// WithOnError sets a hook called when no decision could be had: the store
// was unavailable (answered per the failure mode), the call could not be
// placed (Event.Err matches keyrate.ErrInvalidKey; codes.InvalidArgument),
// or its client had gone (Event.Err matches middleware.ErrClientGone;
// never served, failed with its own context's status). Default: none;
// errors then pass silently, which under FailOpen means unnoticed.
func WithOnError(f func(middleware.Event)) Option { return func(c *config) { c.hooks.OnError = f } }

// WithObserver sets an Observer told of every decision and every error,
// as metrics need: github.com/keyrate/keyrate/promlimit's *Metrics is one.
// It is called after the hooks, in addition to them, never in their place:
// set both as needed. Default: none.
func WithObserver(o middleware.Observer) Option { return func(c *config) { c.hooks.Observer = o } }

// WithRefund counts only the calls whose outcome should count: after the
// handler has served an admitted call, a status code for which refund
// returns true gives the call's events back (see keyrate.Limiter.Refund),
// exactly, as if it had never been made: with
// func(c codes.Code) bool { return c == codes.OK }, only failed calls count.
// The code is that of the error the handler returned (codes.OK for nil). As
// httplimit.WithRefund: every backend (New's and WithMethod's) must be able
// to refund, or New returns an error wrapping keyrate.ErrConfig; a refund
// that fails leaves the call counted and is reported to OnError and the
// Observer with an Err wrapping middleware.ErrRefundFailed. Default: every
// decided call counts.
func WithRefund(refund func(codes.Code) bool) Option {
	return func(c *config) { c.refund = refund }
}

// WithFieldRevision chooses the parameters of the ratelimit metadata, as
// httplimit.WithFieldRevision does for its field:
// ratelimitfield.Draft10's r and t, the default, or
// ratelimitfield.Proposal166's a, w and c, the call's weight when it was
// admitted (0 for a refusal). ratelimit-policy is the same in both. An
// unknown revision gives New an error wrapping keyrate.ErrConfig.
func WithFieldRevision(v ratelimitfield.Revision) Option {
	return func(c *config) { c.revision = v }
}

// WithInFlight holds every method to a number of calls per client in
// flight at once, beside its rate policies, as httplimit.WithInFlight
// holds a route: a call takes one of its key's slots in s (a
// *keyrate.Concurrency, or the Redis backend's Concurrency, shared by
// replicas) before anything else, and gives it back when its handler
// returns, whether it returns normally, panics, or ends because the client
// cancelled; a stream holds its slot until it ends. The key is the rate
// limit's (the full method and the identity), so each method has slots of
// its own, and a store's tier function sees the identity.
//
// When the key holds its limit, the call waits up to wait for a slot (0,
// the default: not at all), within its own context, first come first
// served; then it fails with ResourceExhausted and a RetryInfo of a second
// (middleware.SlotRetryAfter: nothing knows when a call in flight will
// end), without asking the rate backend, so that the refusal costs the
// client no rate budget. A call whose client goes while it waits is never
// served, and fails with its own context's status.
//
// ratelimit-policy lists the in-flight limit beside the rate policies, as
// a policy named method + "-inflight", with the key's number of slots and
// the draft's unit, with no window:
//
//	ratelimit-policy: "/pkg.Service/Method-inflight";q=3;qu="concurrent-requests"
//
// The hooks, the Observer, the failure mode and shadow mode treat it as
// httplimit does: one Event per call, a refusal for want of a slot being
// one whose Decision names the in-flight policy (middleware.SlotRefusal);
// a store that cannot answer goes to OnError, then FailOpen goes on
// without a slot and FailClosed fails the call with Unavailable; shadow
// mode holds no call up, and serves one for a full key without a slot and
// without a rate decision. A nil s or a negative wait make New return an
// error wrapping keyrate.ErrConfig. Default: no in-flight limit.
func WithInFlight(s middleware.InFlight, wait time.Duration) Option {
	return func(c *config) { c.inFlight.Set(s, wait) }
}

// WithTokenBudget decides each call against two budgets of its backend at
// once, requests and tokens, as httplimit.WithTokenBudget decides a
// request: at a weight of 1 against key + middleware.RequestsSuffix and at
// its cost (WithCost: its max_tokens) against key +
// middleware.TokensSuffix, in one TakeAll, all or nothing. ReportCost gives
// back what the call did not use from the tokens alone; WithRefund gives
// back both. Every backend (New's and WithMethod's) must take all
// (*keyrate.Limiter, or a backend.AllTaker such as the Redis backend),
// else New fails with keyrate.ErrConfig; each picks a key's policies with
// middleware.TokenTier. The metadata lists both budgets' policies, and
// adds what httplimit.TokenHeaders adds as fields:
// x-ratelimit-limit-requests, x-ratelimit-remaining-requests,
// x-ratelimit-reset-requests and the same for -tokens. Cost: the TakeAll,
// one key string per budget, six more metadata keys. Default: off.
func WithTokenBudget() Option { return func(c *config) { c.tokens = true } }
