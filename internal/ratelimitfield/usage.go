package ratelimitfield

import (
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
)

// AppendUsage appends p's RateLimit member under route (see AppendName):
// its name, what remains r (never below 0), and t unless no quota is to
// come back (see T).
func AppendUsage(b []byte, route string, p *keyrate.PolicyDecision) []byte {
	b = AppendName(b, route, p.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(p.Remaining, 0)), 10)
	if t, ok := T(p); ok {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return b
}

// AppendUsages appends the RateLimit list of parts: one member for each, in
// order, separated by ", ".
func AppendUsages(b []byte, route string, parts []keyrate.PolicyDecision) []byte {
	for i := range parts {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendUsage(b, route, &parts[i])
	}
	return b
}

// T returns the t parameter of p's RateLimit member: the whole seconds,
// rounded up, until more of p's quota is made available, and false when
// none will be because p's window holds no events.
//
// For a policy that refused the request and that waiting can cure, it is
// when the request would fit the policy (its RetryAfter): for a request of
// weight 1 the soonest any quota comes back, for a heavier one when enough
// has. The binding policy's t is then the request's Retry-After. Otherwise
// it is when the oldest event in the window leaves it (RefillAfter), not
// when the window is empty: a sliding log gives quota back one event at a
// time. A backend that leaves RefillAfter 0 while events are held gets
// ResetAfter, later but never early.
func T(p *keyrate.PolicyDecision) (int64, bool) {
	if !p.Allowed && p.RetryAfter > 0 {
		return CeilSeconds(p.RetryAfter), true
	}
	refill := p.RefillAfter
	if refill <= 0 {
		refill = p.ResetAfter
	}
	if refill <= 0 {
		return 0, false
	}
	return CeilSeconds(refill), true
}

// CeilSeconds rounds d up to whole seconds: a client told to wait that long
// is never early.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
