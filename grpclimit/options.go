package grpclimit

import (
	"context"
	"github.com/keyrate/keyrate/middleware/adapter"
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
	weight    func(ctx context.Context, method string, req any) int
	budget    time.Duration
	budgetSet bool // WithTimeBudget was given
	failure   middleware.FailureMode
	shadow    bool
	hooks     adapter.Hooks // WithOnDecision, WithOnLimited, WithOnError, WithObserver
	refund    func(codes.Code) bool
	revision  ratelimitfield.Revision
	tokens    bool // WithTokenBudget

	// WithConcurrency's
	concurrency     middleware.Concurrency
	concurrencyWait time.Duration
	concurrencySet  bool
}

// WithMetadataKey identifies a client by the first non-empty value of the
// named request metadata key (an API key, say), as "name=value" with the
// name in lower case ("x-api-key=alice", the key httplimit.HeaderKey gives
// for a header), and by its peer address otherwise. New rejects a name
// that is not a metadata key. An identity over 128 bytes is limited under
// its SHA-256 digest; a backend's tier function sees the value as sent.
// Validate API keys before this interceptor runs (see the README,
// "Identity"). Default: the peer address alone.
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

// WithWeight sets the weight of a call, for methods where some calls cost
// more than others (a batch write, say). f receives the call's context,
// its full method name and, for a unary call, its request message (nil
// for a stream, which is weighed once, when it opens). Default: 1 for
// every call. A weight of 0 is always admitted and consumes nothing; a
// weight that can never be admitted (negative, or above a policy's limit)
// is refused with no wait that would help: codes.InvalidArgument, without
// RetryInfo.
func WithWeight(f func(ctx context.Context, fullMethod string, req any) int) Option {
	return func(c *config) { c.weight = f }
}

// WithTimeBudget bounds each call to a backend that is not backend.Bounded,
// as httplimit.WithTimeBudget does: a call that outlives it is a store
// failure (middleware.ErrBudgetExceeded), and the gRPC call waits no
// longer, the backend call running on a goroutine of its own. A Bounded
// backend (*keyrate.Limiter, the Redis one) is called inline under its own
// budget. New refuses the option when every backend (New's and
// WithMethod's) is Bounded. Default: 250ms. Must be positive. Cost: a
// goroutine and a timer per call to an unbounded backend.
func WithTimeBudget(d time.Duration) Option {
	return func(c *config) { c.budget, c.budgetSet = d, true }
}

// WithFailureMode sets what happens when the store is unavailable: the
// backend failed or outlived the time budget. Default:
// middleware.FailOpen, which serves the call; middleware.FailClosed fails
// it with codes.Unavailable. See middleware.FailureMode for the trade-off.
func WithFailureMode(m middleware.FailureMode) Option { return func(c *config) { c.failure = m } }

// WithShadow puts the Limiter in shadow mode, as httplimit.WithShadow does
// a middleware: it decides, records and reports every call as usual, with
// Event.Shadow set on what enforcing would have refused, and sets the
// ratelimit metadata enforcing would, but refuses nothing, save a call
// whose client has gone (see package middleware). A shadowed refusal
// records nothing and gets no RetryInfo. Default: off.
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

// WithRefund counts only the calls whose outcome should count, as
// httplimit.WithRefund does requests: once an admitted call is served, a
// code (the handler's error's; codes.OK for nil) for which refund returns
// true gives its events back, exactly: c == codes.OK counts only failed
// calls. Every backend (New's and WithMethod's) must refund, else New fails
// with keyrate.ErrConfig; a failed refund leaves the call counted and
// reaches OnError as middleware.ErrRefundFailed. Default: every call
// counts. Cost: one backend call per refund.
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

// WithConcurrency sets a concurrency limit (calls in flight) per key,
// beside the rate policies, as httplimit.WithConcurrency does for a route:
// a call takes one of its key's slots in c before anything else (a stream
// until it ends), and each method has slots of its own. A full key waits
// up to wait (0: not at all), then fails with ResourceExhausted and a
// RetryInfo of 1s, spending no rate budget. Default: none; a nil c or a
// negative wait is a keyrate.ErrConfig. Cost: one store call per call. See
// httplimit's README, "Concurrency limits".
func WithConcurrency(c middleware.Concurrency, wait time.Duration) Option {
	return func(cfg *config) { cfg.concurrency, cfg.concurrencyWait, cfg.concurrencySet = c, wait, true }
}

// WithTokenBudget decides each call against two budgets of its backend at
// once, requests and tokens, as httplimit.WithTokenBudget decides a
// request: key + "/requests" at 1 and key + "/tokens" at its weight, in
// one TakeAll, all or nothing. middleware.ReportWeight gives back unused
// tokens. Every backend must take all (*keyrate.Limiter, the Redis one)
// and pick its policies with middleware.TokenTier, else New fails with
// keyrate.ErrConfig. The metadata adds httplimit.TokenHeaders' six keys.
// Default: off. Cost: the TakeAll, one key string per budget.
func WithTokenBudget() Option { return func(c *config) { c.tokens = true } }
