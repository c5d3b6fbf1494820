// Package upstream holds the calls a service makes to someone else's API
// to that API's limits. NewTransport returns an http.RoundTripper that
// gives each upstream (by host, or WithUpstreamKey) a budget in a
// keyrate.Backend, which the Redis one shares across replicas, and makes
// a request wait for it, within its context, before it is sent. It learns
// from the answers: a 429 or 503 with a Retry-After pauses the upstream
// for every caller, and the RateLimit and X-RateLimit fields hold it to
// what is left, neither for longer than WithMaxPause. The answers, a 429
// included, are returned as they came: a request that may not be
// idempotent is never sent twice. See the README, "Outbound calls".
package upstream
