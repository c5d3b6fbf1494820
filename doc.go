// Package keyrate is a per-key rate limiter with an exact sliding window.
//
// A Limiter admits at most limit events per key in any span as long as its
// window: exactly, not per calendar window. Where a fixed window of 10 per
// 10s lets 10 through at 00:09 and 10 more at 00:11, keyrate refuses the
// second ten until the first leave, at 00:19. A key may be under several
// limits at once (NewPolicies: 10 a second and 1,000 a day), all or nothing,
// and keys may have plans (WithTiers). A policy may count per calendar period
// instead (Policy.Calendar: a day, a week, or a month from a billing day, in a
// time zone), with a counter per key rather than a log.
//
// Per key a ring buffer holds the admitted events' instants, 4 bytes an
// event of weight 1 or 8 a decision of any weight, rounded up to a tick
// fixed for the limiter's life: an event may count a tick late, never
// early, so no window ever holds more than its limit. WithResolution bounds
// a key's memory by its windows; WithAlgorithm trades exactness for O(1).
//
// Most callers use Allow, or Take for the numbers behind the answer; Wait
// blocks until a request fits; Close when done. A Concurrency limits how
// many requests of a key run at once, rather than how often they come.
package keyrate
