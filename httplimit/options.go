package httplimit

import (
	"net/http"
	"time"

	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// Option configures a Middleware; pass options to New.
type Option func(*config)

type config struct {
	route     string
	key       KeyFunc
	cost      func(*http.Request) int
	skip      func(*http.Request) bool
	window    time.Duration
	budget    time.Duration
	budgetSet bool // WithTimeBudget was given
	failure   middleware.FailureMode
	headers   HeaderSet
	revision  ratelimitfield.Revision
	hooks     middleware.Hooks // WithOnDecision, WithOnLimited, WithOnError, WithObserver
	shadow    bool
	unit      string
	limited   func(http.ResponseWriter, *http.Request, middleware.Event)
	refund    func(status int) bool
	tokens    bool // WithTokenBudget

	inFlight middleware.SlotConfig // WithInFlight's
}

// HeaderSet selects the response fields that carry the limit. Combine them
// with |.
type HeaderSet uint8

const (
	// DraftHeaders are the fields of the IETF draft
	// draft-ietf-httpapi-ratelimit-headers (the default), as its revision
	// -10 defines them (and keyrate writes them for -11), with a member
	// for every policy of the Decision, in the backend's order (see
	// WithFieldRevision for other parameters):
	//
	//	RateLimit-Policy: "second";q=10;w=1, "day";q=1000;w=86400
	//	RateLimit: "second";r=9;t=1, "day";r=990;t=51840
	//
	// A policy's name is its keyrate.Policy.Name, as it is; an unnamed
	// policy (New's single one) takes the route's name (WithRoute), and one
	// with neither is "default". Middlewares nested on one handler each
	// append their members, so give their policies distinct names (a global
	// "second" and a per-route "search-second"). q is the limit; w is the window,
	// left out when it is not a whole number of seconds (w cannot say 500ms,
	// and a rounded w would advertise a limit the middleware does not
	// enforce); qu is added by WithQuotaUnit. r is what remains after this
	// request. t is the seconds, rounded up, until more of the policy's quota
	// comes back: when the oldest request in its window leaves it (a sliding
	// window gives quota back one request at a time; limit 5 per 60s with a
	// request every 10s, the fifth response says r=0;t=20), or, for a policy
	// that refused the request, when the request would fit it. The binding
	// policy's t on a refusal is Retry-After, when the request fits every
	// policy. t is left out when nothing is held, so nothing is to come back.
	//
	// Both fields are lists: each middleware adds its members beside those
	// of any other on the same response (a per-route budget inside a
	// global one gives both), never replacing them. Give nested middlewares
	// different route names, so that their members can be told apart. No
	// partition key (pk) is sent: it would disclose or hash the client's
	// identity, and a client knows who it is.
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

// WithKeyFunc sets how a request is mapped to the identity it is limited
// by. Default: ClientIP() with no trusted proxies, the socket's address
// (IPv6 grouped by /64). See ClientIP, HeaderKey and Join.
//
// An identity over 128 bytes is limited under its SHA-256 digest,
// "sha256:" and 43 base64url characters, as is one that starts with
// "sha256:": every backend then gets keys of bounded length, whatever a
// client sends, and two identities share a budget only if they are equal
// (save for a SHA-256 collision). An empty identity, or an error, means the
// request cannot be placed: it is answered 400 and reported to OnError,
// never served, never counted against a shared "" budget.
// A KeyFunc that wants one budget for all anonymous clients returns a fixed
// name for them, such as "anonymous".
//
// A backend's tier function sees the identity as the client sent it (see
// backend.ContextWithIdentity), before the 128-byte bound: the address for
// ClientIP; the header's value alone for HeaderKey; what your own KeyFunc
// returns, whole, for it and for Join (save an identity in HeaderKey's
// form, "name=value" for a header a HeaderKey reads and the request
// carries with that value, which counts as HeaderKey's).
func WithKeyFunc(f KeyFunc) Option { return func(c *config) { c.key = f } }

// WithCost sets the weight of a request, for routes where some requests
// cost more than others (a batch, a large export). Default: 1 for every
// request. A weight of 0 is always admitted and consumes nothing; a weight
// that can never be admitted (negative, or above a policy's limit) is
// refused with no wait that would help: 413 Content Too Large (see
// DefaultLimitedHandler).
//
// With weights, q and r in the RateLimit fields count cost units, not
// requests, and the draft's default unit is requests. When the weight
// measures something the draft has a unit for (content-bytes, say), name
// it with WithQuotaUnit. An abstract cost has no registered unit, so none
// is claimed: document what a unit costs for your clients.
func WithCost(f func(*http.Request) int) Option { return func(c *config) { c.cost = f } }

// WithQuotaUnit adds the quota unit, qu, to RateLimit-Policy: the unit that
// q and r count, one of the draft's registered units ("requests",
// "content-bytes", "concurrent-requests"). Default: none sent, which means
// requests. Set it with WithCost when the cost measures such a unit. Must
// be printable ASCII.
func WithQuotaUnit(unit string) Option { return func(c *config) { c.unit = unit } }

// WithSkip sets a function that exempts requests from the limit: health
// checks, allow-listed clients. Skipped requests reach the handler with no
// RateLimit fields, consume nothing and are reported to no hook. Default:
// none.
func WithSkip(f func(*http.Request) bool) Option { return func(c *config) { c.skip = f } }

// WithWindow sets the window reported in RateLimit-Policy for a backend
// that reports none: a backend.Func whose decisions leave
// Decision.Window 0. A backend's own windows win: those of each Decision
// and of its Policies method (see New). Default: none; New then needs one
// from the backend. A window that is not a whole number of seconds is
// enforced as it is but not advertised (see DraftHeaders).
func WithWindow(d time.Duration) Option { return func(c *config) { c.window = d } }

// WithTimeBudget bounds each call to a backend that is not backend.Bounded.
// A call that outlives it is a store failure (an error matching
// middleware.ErrBudgetExceeded, answered per the failure mode), and the
// request waits no longer, even for a backend that ignores its context:
// the call runs on a goroutine of its own, under a timer. Default: 250ms.
// Must be positive.
//
// A Bounded backend is called on the request's goroutine under its own
// budget alone: one budget, in one place, and no goroutine hand-off per
// request. The Redis backend bounds its calls by its own timeout (set the
// budget there); *keyrate.Limiter never waits. New refuses WithTimeBudget
// for a Bounded backend rather than let a budget look like it applies.
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

// WithShadow puts the middleware in shadow mode: it decides and records
// every request as usual, writes RateLimit-Policy and RateLimit with what
// enforcing would say (r=0 and t on what it would refuse), and reports to
// the hooks and the Observer as usual, with Event.Shadow set on what it
// would have refused; but it refuses nothing. Roll a new limit out this
// way and watch what it would refuse before enforcing it.
//
// A shadowed refusal records nothing, as a refusal never does, so the
// budget moves exactly as it would under enforcement; it gets no
// Retry-After, as the response is no refusal. Errors are served too (the
// middleware limits no one yet, so serving them lifts no limit) and
// reported to OnError, with Event.Shadow set where enforcing would have
// refused (a request that cannot be placed, a store failure under
// FailClosed); save a request whose client has gone, which is never
// served. Default: off.
func WithShadow() Option { return func(c *config) { c.shadow = true } }

// WithRefund counts only the requests whose responses should count: after
// the handler has served an admitted request, a response status for which
// refund returns true gives the request's events back (see
// keyrate.Limiter.Refund), exactly, as if it had never been made. With
// func(status int) bool { return status < 400 }, only failures count, as a
// login endpoint that limits failed attempts wants; with
// func(status int) bool { return status >= 500 }, the server's own errors
// are not held against the client.
//
// The status is what the handler wrote first (200 when it wrote no
// header). The backend must be able to refund: *keyrate.Limiter and the
// Redis backend can; New refuses another with an error wrapping
// keyrate.ErrConfig. A refund that fails (the store went away meanwhile)
// leaves the request counted, and is reported to OnError and the Observer
// with an Err wrapping middleware.ErrRefundFailed. Default: every decided
// request counts.
func WithRefund(refund func(status int) bool) Option {
	return func(c *config) { c.refund = refund }
}

// WithInFlight holds the route to a number of requests per client in
// flight at once, beside its rate policies: a request takes one of its
// key's slots in s (a *keyrate.Concurrency, or the Redis backend's
// Concurrency, shared by replicas) before anything else, and gives it back
// when the handler returns, whether it returns normally, panics, or ends
// because the client hung up. The key is the rate limit's (the route and
// the identity), and a store's tier function sees the identity, as the
// backend's does.
//
// When the key holds its limit, the request waits up to wait for a slot
// (0, the default: not at all), within its own context, first come first
// served; then it is refused with 429 Too Many Requests, Retry-After of a
// second (middleware.SlotRetryAfter: nothing knows when a request in flight
// will end) and the problem body naming the in-flight policy, without
// asking the rate backend, so that the refusal costs the client no rate
// budget. A request whose client hangs up while it waits is never served
// (middleware.ErrClientGone, as for the rate limit).
//
// RateLimit-Policy lists the in-flight limit beside the rate policies, as
// a policy named route + "-inflight" ("inflight" without a route) with the
// key's number of slots and the draft's unit, with no window:
//
//	RateLimit-Policy: "search-inflight";q=3;qu="concurrent-requests", "search";q=20;w=60
//
// The hooks and the Observer get one Event per request: a request refused
// for want of a slot is a refusal whose Decision names that policy
// (middleware.SlotRefusal); an admitted one is reported by its rate
// decision. A store that cannot answer is reported to OnError and answered
// per the failure mode: FailOpen goes on without a slot (the rate limit
// still applies), FailClosed refuses with 503. In shadow mode a request is
// never held up: a full key is reported as a refusal with Event.Shadow
// set, and the request is served without a slot and without a rate
// decision, as enforcing would have refused it before one.
//
// A nil s or a negative wait make New return an error wrapping
// keyrate.ErrConfig. Default: no in-flight limit.
func WithInFlight(s middleware.InFlight, wait time.Duration) Option {
	return func(c *config) { c.inFlight.Set(s, wait) }
}
