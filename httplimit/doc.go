// Package httplimit is net/http middleware that rate-limits requests per
// client and per route, in front of any keyrate.Backend: the
// in-process *keyrate.Limiter or a networked store such as the Redis
// backend.
//
// A Middleware is one budget. For each request it derives an identity (the
// client's IP address by default; see ClientIP for the trust model behind
// proxies, HeaderKey for API keys), prefixes the route name so routes keep
// separate budgets, asks the backend one atomic question, and either serves
// the request or refuses it. Every decided response carries the fields of
// the IETF draft draft-ietf-httpapi-ratelimit-headers (-10, -11)
//
//	RateLimit-Policy: "search";q=20;w=60
//	RateLimit: "search";r=19;t=60
//
// where r is what remains and t the seconds until more quota comes back:
// when the oldest request in the window leaves it, since a sliding window
// returns quota one request at a time. A window that is not a whole number
// of seconds is left out of w rather than rounded. A backend with several
// policies per key (keyrate.NewPolicies: 10 a second and 1,000 a day) gets
// a member for each, named by the policy's Name:
//
//	RateLimit-Policy: "second";q=10;w=1, "day";q=1000;w=86400
//	RateLimit: "second";r=9;t=1, "day";r=990;t=51840
//
// Both fields are lists, and nested middlewares (a per-route budget inside
// a global one) each add their own members: give their policies distinct
// names. With weighted requests
// (WithWeight) q and r count cost units; WithQuotaUnit names the unit (qu)
// when the draft has one for it. See DraftHeaders; older fields, which hold
// the binding policy alone, are optional (LegacyHeaders, XHeaders).
//
// A weight may be an estimate, reserved before the work and settled after
// it: a model call reserves its maximum tokens, and its handler reports the
// tokens it used with middleware.ReportWeight; the rest goes back to the
// client's budget (keyrate.Limiter.RefundN). WithRefund gives a whole
// request back by its status, the way a login counts only failed attempts.
// Either is settled as the response's status is written, before its header
// goes out, so that the RateLimit fields say what the request left; a cost
// reported later, in a streamed body, is settled when the handler returns,
// and the fields sent said what was reserved.
//
// A refusal is a 429 with Retry-After in whole seconds, rounded up and
// never 0: when the request fits every policy, the refusing policy's t. Its
// RFC 9457 application/problem+json body, of the draft's quota-exceeded
// type, names every violated policy (see DefaultLimitedHandler).
//
// When the store is unavailable (the backend fails, or outlives its time
// budget), the middleware either serves the request (middleware.FailOpen,
// the default) or answers 503 (middleware.FailClosed) with the draft's
// temporary-reduced-capacity problem, and tells the OnError hook and the
// Observer either way. Each call runs under one time
// budget, in one place: a backend.Bounded backend bounds its own calls
// (the Redis one) or never waits (*keyrate.Limiter), and is called inline
// under that budget alone; any other runs on its own goroutine under the
// middleware's budget (WithTimeBudget, 250ms by default), so that even one
// ignoring its context costs a request no more.
//
// A request that cannot be placed is the client's doing, not the store's,
// and is never served, in either mode: a KeyFunc error, an empty identity,
// or a key the backend refuses (keyrate.ErrInvalidKey) gets 400 Bad Request
// with a problem body, and OnError hears of it. Identities longer than 128
// bytes are limited under their SHA-256 digest, so no client can make a
// store hold a large key or be refused for one, and two clients never share
// a budget by accident.
//
// A request whose client has gone before it is decided (the client closed
// the connection, or a deadline on the request's context passed) is not
// decided and never served, in either mode and in shadow mode too: serving
// it would let a client have work done over its limit by giving up on its
// requests. It gets 503 Service Unavailable with a problem body saying the
// request was cancelled or timed out before it could be decided, which a
// client that has hung up never reads, and one still waiting behind a
// server-side deadline can act on; OnError hears of it as
// middleware.ErrClientGone.
//
// A backend's tier function (keyrate.WithTiers) sees the client's identity
// as the client sent it, not the key: the API key for HeaderKey, whatever
// its length, the address for ClientIP, and what your own KeyFunc returns
// (see backend.ContextWithIdentity). The route, the header's name and the
// digest of a long identity stay in the key.
//
// WithShadow tries a limit out without enforcing it: every request is
// decided, reported and given the RateLimit fields, and every request is
// served, save one whose client has gone; middleware.Event.Shadow marks
// what enforcement would have refused.
//
// The options httplimit and grpclimit share (WithWeight, WithTimeBudget,
// WithFailureMode, WithShadow, WithOnDecision, WithOnLimited, WithOnError,
// WithObserver) mean the same in both, the hooks and the Observer get the
// same middleware.Event, and an API key is the same identity in both:
// "x-api-key=alice" from HeaderKey here, from grpclimit.WithMetadataKey
// there, bounded alike.
//
// WithConcurrency adds a limit on the requests of a client in flight at once
// (a keyrate.Concurrency, or the Redis backend's, shared by replicas),
// advertised with the draft's "concurrent-requests" unit.
//
// Package upstream (httplimit/upstream) guards the other direction, the
// calls a service makes to someone else's API: an http.RoundTripper that
// holds each upstream to a keyrate.Backend's policies, waiting for the
// budget rather than sending over it, and pausing when the upstream
// answers 429 or 503 with a Retry-After or says, in its RateLimit fields,
// that nothing is left.
//
// Most callers need three lines per route:
//
//	l, _ := keyrate.New(20, time.Minute)
//	search, _ := httplimit.New(l, httplimit.WithRoute("search"))
//	mux.Handle("GET /api/search", search.Handler(searchHandler))
package httplimit
