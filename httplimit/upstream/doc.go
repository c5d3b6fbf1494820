// Package upstream holds the calls a service makes to someone else's API
// to that API's limits. NewTransport returns an http.RoundTripper for an
// http.Client: each upstream (by host, or WithUpstreamKey) has a budget in
// a keyrate.Backend, the in-process *keyrate.Limiter or the Redis one that
// replicas share, and a request waits for its budget, within its context,
// before it is sent (WithFailFast refuses instead).
//
// It learns from the answers. A 429 or 503 with a Retry-After (seconds, or
// an HTTP date read against the answer's Date) pauses the upstream for
// every caller until then. The IETF RateLimit field (the member with the
// least remaining), RateLimit-Remaining and RateLimit-Reset, and
// X-RateLimit-Remaining and X-RateLimit-Reset (seconds, or a Unix time
// when it reads as one, as GitHub's does) hold it to what is left: with r
// remaining until a reset, at most r more requests before it. No answer
// holds an upstream back longer than WithMaxPause, a minute by default.
//
// The answers, a 429 included, are returned to the caller as they came: a
// request that may not be idempotent is never sent twice (WithRetries
// retries those that are). What the transport learns stays in its process,
// per upstream key, until it lapses: over Redis, each replica learns from
// its own answers, at the cost of one refused request per replica when a
// pause begins. See the README, "Outbound calls", for the argument.
package upstream
