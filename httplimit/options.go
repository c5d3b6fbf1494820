package httplimit

import (
	"net/http"
	"time"

	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/middleware/adapter"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// Option configures a Middleware; pass options to New.
type Option func(*config)

type config struct {
	route     string
	key       KeyFunc
	weight    func(*http.Request) int
	skip      func(*http.Request) bool
	budget    time.Duration
	budgetSet bool // WithTimeBudget was given
	failure   middleware.FailureMode
	headers   HeaderSet
	revision  ratelimitfield.Revision
	hooks     adapter.Hooks // WithOnDecision, WithOnLimited, WithOnError, WithObserver
	shadow    bool
	unit      string
	limited   func(http.ResponseWriter, *http.Request, middleware.Event)
	refund    func(status int) bool
	tokens    bool // WithTokenBudget

	// WithConcurrency's
	concurrency     middleware.Concurrency
	concurrencyWait time.Duration
	concurrencySet  bool
}

// HeaderSet selects the response fields that carry the limit. Combine them
// with |.
type HeaderSet uint8

const (
	// DraftHeaders are the fields of the IETF draft
	// draft-ietf-httpapi-ratelimit-headers (the default), as its revision
	// -10 defines them, with a member for every policy of the Decision, in
	// the backend's order, named after it (an unnamed policy after the
	// route, or "default"), appended beside any other middleware's:
	//
	//	RateLimit-Policy: "second";q=10;w=1, "day";q=1000;w=86400
	//	RateLimit: "second";r=9;t=1, "day";r=990;t=51840
	//
	// Give nested middlewares' policies distinct names. The README, "The
	// draft, field by field", says what each parameter holds.
	DraftHeaders HeaderSet = 1 << iota
	// LegacyHeaders are the older draft's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (t, or 0). Each holds one
	// policy: the Decision's binding one (keyrate.Decision), and of nested
	// middlewares the one with the least remaining.
	LegacyHeaders
	// XHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, the last as a Unix time in seconds (now + t), as
	// GitHub and most older middleware send it. One policy, as for
	// LegacyHeaders.
	XHeaders
	// TokenHeaders, with WithTokenBudget alone (else New fails with
	// keyrate.ErrConfig), are the fields model-API clients read, as OpenAI
	// sends them: x-ratelimit-limit-requests, x-ratelimit-remaining-requests
	// and x-ratelimit-reset-requests, and the same three for -tokens, each
	// trio from its budget's binding policy (the least remaining, as
	// Decision's fields are). A reset is the time until the policy's window
	// is empty, rounded up to the millisecond, as time.Duration prints it:
	// 1s, 6m0s, 12ms. Cost: one string for the six values.
	TokenHeaders
)

// WithRoute names the limited route. The name prefixes every key sent to
// the backend (name + "\x00" + identity), so routes that share a backend
// keep separate budgets, and it names the policies in the RateLimit fields
// (see DraftHeaders). Default: "" (keys are the identity alone; the fields
// name the policies alone, or "default"). Give every route its own name
// when routes share a backend. At most 256 bytes of printable ASCII.
func WithRoute(name string) Option { return func(c *config) { c.route = name } }

// WithKeyFunc sets how a request maps to the identity it is limited by.
// Default: ClientIP of the zero IPConfig, the socket's address (IPv6
// grouped by /64); see ClientIP, HeaderKey and Join. An identity over 128
// bytes, or one that starts with "sha256:", is limited under its SHA-256
// digest, so every key stays bounded. An empty identity, or an error, is
// answered 400 and reported to OnError, never served. What a backend's
// tier function sees of it: see the README, "Identity".
func WithKeyFunc(f KeyFunc) Option { return func(c *config) { c.key = f } }

// WithWeight sets the weight of a request, for routes where some requests
// cost more than others (a batch, an upload, a model call's max tokens).
// Default: 1. A weight of 0 is always admitted and consumes nothing; one
// that can never fit (negative, or above a policy's limit) is refused 413
// with no wait that would help. q and r in the RateLimit fields then count
// weight units: name a registered unit with WithQuotaUnit.
// middleware.ReportWeight gives back what a request did not use. Cost: f,
// once per request.
func WithWeight(f func(*http.Request) int) Option { return func(c *config) { c.weight = f } }

// WithQuotaUnit adds the quota unit, qu, to RateLimit-Policy: the unit that
// q and r count, one of the draft's registered units ("requests",
// "content-bytes", "concurrent-requests"). Default: none sent, which means
// requests. Set it with WithWeight when the weight measures such a unit. Must
// be printable ASCII.
func WithQuotaUnit(unit string) Option { return func(c *config) { c.unit = unit } }

// WithSkip sets a function that exempts requests from the limit: health
// checks, allow-listed clients. Skipped requests reach the handler with no
// RateLimit fields, consume nothing and are reported to no hook. Default:
// none.
func WithSkip(f func(*http.Request) bool) Option { return func(c *config) { c.skip = f } }

// WithTimeBudget bounds each call to a backend that is not backend.Bounded:
// a call that outlives it is a store failure (middleware.ErrBudgetExceeded,
// answered per the failure mode), and the request waits no longer, even
// for a backend that ignores its context. A Bounded backend
// (*keyrate.Limiter, which never waits; the Redis one, under its own
// timeout) is called inline under its own budget, and New refuses the
// option for one. Default: 250ms. Must be positive. Cost: a goroutine and
// a timer per call to an unbounded backend.
func WithTimeBudget(d time.Duration) Option {
	return func(c *config) { c.budget, c.budgetSet = d, true }
}

// WithFailureMode sets what happens when the store is unavailable: the
// backend failed or outlived the time budget. Default:
// middleware.FailOpen, which serves the request; middleware.FailClosed
// answers 503. See middleware.FailureMode for the trade-off.
func WithFailureMode(m middleware.FailureMode) Option { return func(c *config) { c.failure = m } }

// WithHeaders selects the fields written on every decided response.
// Default: DraftHeaders. Retry-After is always written on a 429.
func WithHeaders(h HeaderSet) Option { return func(c *config) { c.headers = h } }

// WithOnDecision sets a hook called for every request the backend decided,
// admitted or refused, before the request is served or refused. It runs on
// the request's goroutine, so keep it quick. Default: none.
func WithOnDecision(f func(middleware.Event)) Option {
	return func(c *config) { c.hooks.OnDecision = f }
}

// WithOnLimited sets a hook called for every refused request, after
// OnDecision and before the refusal is written. Default: none.
func WithOnLimited(f func(middleware.Event)) Option { return func(c *config) { c.hooks.OnLimited = f } }

// WithOnError sets a hook called when no decision could be had: the store
// was unavailable (answered per the failure mode), the request could not
// be placed (Event.Err matches keyrate.ErrInvalidKey; answered 400), or
// its client had gone (Event.Err matches middleware.ErrClientGone; never
// served, answered 503). Default: none; errors then pass silently, which
// under FailOpen means unnoticed.
func WithOnError(f func(middleware.Event)) Option { return func(c *config) { c.hooks.OnError = f } }

// WithObserver sets an Observer told of every decision and every error,
// as metrics need: github.com/keyrate/keyrate/promlimit's *Metrics is one.
// It is called after the hooks, in addition to them, never in their place:
// set both as needed. Default: none.
func WithObserver(o middleware.Observer) Option { return func(c *config) { c.hooks.Observer = o } }

// WithLimitedHandler replaces the response to a refused request. When it
// runs, the RateLimit fields (and Retry-After, when waiting helps) are
// already set; it writes the status and the body. The Event is the one the
// hooks get (Route, Identity, Decision). Default: DefaultLimitedHandler.
func WithLimitedHandler(f func(http.ResponseWriter, *http.Request, middleware.Event)) Option {
	return func(c *config) { c.limited = f }
}

// WithShadow puts the middleware in shadow mode: it decides, records and
// reports every request as usual, with Event.Shadow set on what enforcing
// would have refused, and writes the RateLimit fields enforcing would, but
// refuses nothing, save a request whose client has gone (see package
// middleware). Roll a new limit out this way and watch before enforcing
// it. A shadowed refusal records nothing, as a refusal never does, and
// gets no Retry-After. Default: off.
func WithShadow() Option { return func(c *config) { c.shadow = true } }

// WithRefund counts only the requests whose responses should count: once
// an admitted request is served, a status (the first written; 200 without
// one) for which refund returns true gives its events back, exactly.
// status < 400 counts only failures (a login form); status >= 500 spares
// clients the server's own errors. The backend must refund
// (*keyrate.Limiter, Redis), else New fails with keyrate.ErrConfig; a
// failed refund leaves the request counted and reaches OnError as
// middleware.ErrRefundFailed. Default: every request counts. Cost: one
// backend call per refund.
func WithRefund(refund func(status int) bool) Option {
	return func(c *config) { c.refund = refund }
}

// WithConcurrency sets a concurrency limit (requests in flight) per key,
// beside the rate policies: a request takes one of its key's slots in c
// (*keyrate.Concurrency, or redislimit's, which replicas share) before
// anything else, and gives it back when the handler returns or panics. A
// full key waits up to wait (0: not at all) within the request's context,
// then is refused 429 with a Retry-After of 1s, spending no rate budget.
// A store failure is answered per the failure mode. Default: none; a nil c
// or a negative wait is a keyrate.ErrConfig. Cost: one store call per
// request. See the README, "Concurrency limits".
func WithConcurrency(c middleware.Concurrency, wait time.Duration) Option {
	return func(cfg *config) { cfg.concurrency, cfg.concurrencyWait, cfg.concurrencySet = c, wait, true }
}
