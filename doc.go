// Package keyrate is a per-key rate limiter with an exact sliding window.
//
// A Limiter admits at most limit events per key in any span of time as long
// as its window: exactly, not per calendar window. Where a fixed window of
// 10 per 10s lets 10 requests through at 00:09 and 10 more at 00:11, keyrate
// admits the first 10 and refuses the rest until 00:19, when the first of
// them leaves the window.
//
// A key may be under several limits at once, such as 10 a second and 1,000
// a day (NewPolicies), and keys may have limits by plan (WithTiers). A
// request is admitted only when every limit has room for it, and is then
// recorded against all of them, atomically.
//
// Per key, a ring buffer holds the instants of the admitted events: 4 bytes
// an event of weight 1, 8 bytes a decision of any weight (a request of a
// million tokens is one entry). Instants are kept in ticks fine enough for
// 2^31 of them to span the limiter's longest window (5ns for a 10s window,
// 2µs for an hour, 50µs for a day), one tick for the limiter's life
// (WithMaxWindow), rounded up: an event may count as up to a tick later
// than it happened, never earlier, so no window ever holds more than its
// limit, whatever changes of policies, refunds and evictions come between.
// WithResolution bounds a key's memory by its windows instead of its
// limits, and WithAlgorithm trades exactness for O(1) memory (FixedWindow,
// GCRA). A janitor evicts idle keys, and WithMaxKeys bounds how many are
// tracked.
//
// Most callers use Allow, or Take for the numbers behind the answer (for
// RateLimit and Retry-After headers). Wait blocks until a request fits, for
// guarding outbound calls. Close a Limiter when done with it.
//
// A Concurrency limits how many requests of a key run at once rather than
// how often they come: a request takes a slot (TryAcquire, or Acquire,
// which waits for one, first come first served) and gives it back when it
// ends.
package keyrate
