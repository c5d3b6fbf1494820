package ratelimitfield

import (
	"time"

	"github.com/keyrate/keyrate"
)

// Parts returns the policies d speaks for, each with its own numbers:
// d.Policies(), or, for a Decision that carries none (a backend that fills
// in the fields by hand rather than with keyrate.Combine), one part made
// of d's own fields (see Binding), stored in one. window stands in for
// that part's window when d leaves it 0. It allocates nothing.
func Parts(d *keyrate.Decision, window time.Duration, one *[1]keyrate.PolicyDecision) []keyrate.PolicyDecision {
	if parts := d.Policies(); len(parts) > 0 {
		return parts
	}
	one[0] = Binding(d)
	if one[0].Window == 0 {
		one[0].Window = window
	}
	return one[:]
}

// Binding returns the binding policy's part of d, from d's own fields.
func Binding(d *keyrate.Decision) keyrate.PolicyDecision {
	return keyrate.PolicyDecision{
		Policy:      keyrate.Policy{Name: d.Policy, Limit: d.Limit, Window: d.Window},
		Allowed:     d.Allowed,
		Remaining:   d.Remaining,
		RetryAfter:  d.RetryAfter,
		ResetAfter:  d.ResetAfter,
		RefillAfter: d.RefillAfter,
	}
}

// Same reports whether parts are of policies, in order: then a
// RateLimit-Policy value written ahead of time for policies serves for
// them.
func Same(parts []keyrate.PolicyDecision, policies []keyrate.Policy) bool {
	if len(parts) != len(policies) {
		return false
	}
	for i := range parts {
		if parts[i].Policy != policies[i] {
			return false
		}
	}
	return true
}
