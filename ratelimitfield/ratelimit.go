package ratelimitfield

import (
	"time"

	"github.com/keyrate/keyrate"
)

// AppendRateLimit appends the RateLimit value for d: a member for each
// policy d was decided under, in order, as AppendPolicy lists them, with
// what remains of it r (never below 0) and, unless its window holds
// nothing, the seconds t until more of its quota comes back (see T). It is
// Draft10's; Revision.AppendRateLimit writes another Revision's.
func AppendRateLimit(b []byte, d *keyrate.Decision, route string) []byte {
	return Draft10.AppendRateLimit(b, d, route, 0)
}

// T returns the t parameter of d's binding policy, the one d's own fields
// describe: the whole seconds, rounded up, until more of its quota is made
// available; false when none will be, because its window holds no events.
// It is what the older drafts' single-policy RateLimit-Reset held.
//
// For a policy that refused the request and that waiting can cure, t is
// when the request would fit it (its RetryAfter): for a request of weight
// 1 the soonest any quota comes back, for a heavier one when enough has;
// the binding policy's is then the request's Retry-After. Otherwise it is
// when the oldest event in the window leaves it (RefillAfter), not when
// the window is empty: a sliding log gives quota back one event at a
// time. A backend that leaves RefillAfter 0 while events are held gets
// ResetAfter, later but never early. Every member of AppendRateLimit
// follows the same rule for its own policy.
func T(d *keyrate.Decision) (int64, bool) {
	return t(d.Allowed, d.RetryAfter, d.RefillAfter, d.ResetAfter)
}

func t(allowed bool, retry, refill, reset time.Duration) (int64, bool) {
	if !allowed && retry > 0 {
		return Seconds(retry), true
	}
	if refill <= 0 {
		refill = reset
	}
	if refill <= 0 {
		return 0, false
	}
	return Seconds(refill), true
}

// Seconds rounds d up to whole seconds, as t and Retry-After give a wait:
// a client told to wait that long is never early. It is 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
