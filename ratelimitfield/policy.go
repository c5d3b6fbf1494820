package ratelimitfield

import (
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
)

// AppendPolicy appends the RateLimit-Policy value for the policies d was
// decided under: a member for each, in order (see Decision.Policies), or,
// for a Decision filled in by hand rather than by backend.Combine, one for
// its binding policy's Limit and Window. unit is the quota unit qu, one
// of the draft's registered units ("content-bytes", say); "" sends none,
// which means requests. A policy whose Limit is not positive has no
// member, as q is required; b comes back as it was when none has one. A
// calendar policy's w is its current period's length (Period).
func AppendPolicy(b []byte, d *keyrate.Decision, route, unit string) []byte {
	var one [1]keyrate.PolicyDecision
	parts := parts(d, &one)
	start := len(b)
	for i := range parts {
		b = appendPolicy(b, start, &parts[i].Policy, window(&parts[i]), route, unit)
	}
	return b
}

// AppendPolicies appends the RateLimit-Policy value for policies, in
// order, as AppendPolicy does for a Decision's: for a response sent
// without a decision (one served while the store is unavailable), from a
// backend's own policies (backend.Described). A calendar policy's member
// has no w: with no decision, no instant says which period's length.
func AppendPolicies(b []byte, policies []keyrate.Policy, route, unit string) []byte {
	start := len(b)
	for i := range policies {
		b = appendPolicy(b, start, &policies[i], policies[i].Window, route, unit)
	}
	return b
}

// window returns the span the w parameter gives for p: its Window, or a
// calendar policy's current period.
func window(p *keyrate.PolicyDecision) time.Duration {
	if p.Calendar != (keyrate.Calendar{}) {
		return p.Period
	}
	return p.Window
}

// appendPolicy appends p's member of a list that started at start in b,
// with w for window, after a separator when it is not the first; nothing
// when p's limit is unknown.
func appendPolicy(b []byte, start int, p *keyrate.Policy, window time.Duration, route, unit string) []byte {
	if p.Limit <= 0 {
		return b
	}
	if len(b) > start {
		b = append(b, ", "...)
	}
	b = AppendName(b, p.Name, route)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(p.Limit), 10)
	if unit != "" {
		b = append(b, ";qu="...)
		b = appendString(b, unit)
	}
	if w := wholeSeconds(window); w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, w, 10)
	}
	return b
}

// wholeSeconds returns window in seconds for the w parameter, or 0 when it
// is not a positive whole number of seconds: w has no fractions, and
// rounding would advertise a policy the limiter does not enforce (10 per
// 500ms is not 10 per second).
func wholeSeconds(window time.Duration) int64 {
	if window <= 0 || window%time.Second != 0 {
		return 0
	}
	return int64(window / time.Second)
}

// parts returns the policies d speaks for: d.Policies(), or, for a
// Decision that carries none, one part made of d's own fields, stored in
// one. It allocates nothing.
func parts(d *keyrate.Decision, one *[1]keyrate.PolicyDecision) []keyrate.PolicyDecision {
	if parts := d.Policies(); len(parts) > 0 {
		return parts
	}
	one[0] = keyrate.PolicyDecision{
		Policy:      keyrate.Policy{Name: d.Policy, Limit: d.Limit, Window: d.Window},
		Allowed:     d.Allowed,
		Remaining:   d.Remaining,
		RetryAfter:  d.RetryAfter,
		ResetAfter:  d.ResetAfter,
		RefillAfter: d.RefillAfter,
	}
	return one[:]
}
