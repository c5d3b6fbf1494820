package keyrate

import "time"

// Decision is the answer to one request, with the numbers behind it. Every
// backend (the in-process Limiter, the Redis one) answers with the same
// fields, exact against its clock; rounding them (for example to whole
// seconds for Retry-After) is left to the caller.
type Decision struct {
	// Allowed reports whether the request was admitted (and, for Take,
	// recorded).
	Allowed bool
	// Limit is the most events admitted per key in any window.
	Limit int
	// Remaining is how many more events the key could have admitted at this
	// instant, after this decision.
	Remaining int
	// RetryAfter is 0 when allowed. When refused, it is exactly how long until
	// the request would fit, as far as the events already admitted go. Refused
	// with RetryAfter 0 means the request can never fit: its weight is
	// negative or above the limit.
	RetryAfter time.Duration
	// ResetAfter is how long until the key's window holds no events, so that
	// its whole limit is available again. 0 when it holds none.
	ResetAfter time.Duration
	// RefillAfter is how long until the oldest event in the key's window
	// leaves it, after this decision: the soonest any quota comes back. It
	// is what the IETF RateLimit field's t parameter means ("seconds until
	// additional quota is made available"). 0 when the window holds no
	// events. RefillAfter <= ResetAfter, and a refused request of weight 1
	// has RetryAfter == RefillAfter.
	RefillAfter time.Duration
	// Overflow reports a refusal because the limiter already tracks as many
	// keys as WithMaxKeys allows and this key is not one of them. Such a
	// Decision says nothing about the key's own budget; its RetryAfter,
	// RefillAfter and ResetAfter are the window, an estimate of when idle
	// keys will have been evicted.
	Overflow bool
}
