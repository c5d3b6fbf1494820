package ratelimitfield

import "github.com/keyrate/keyrate"

// BackendPolicies returns the policies b says it enforces, to advertise
// when there is no Decision at hand: its keyrate.PolicyLister policies
// (with tiers, the default tier's); nil when it says nothing.
func BackendPolicies(b keyrate.Backend) []keyrate.Policy {
	if l, ok := b.(keyrate.PolicyLister); ok {
		if ps := l.Policies(); len(ps) > 0 {
			return ps
		}
	}
	return nil
}

// PolicyParts returns policies as the parts of a Decision that carries
// nothing but them, for AppendPolicies.
func PolicyParts(policies []keyrate.Policy) []keyrate.PolicyDecision {
	parts := make([]keyrate.PolicyDecision, len(policies))
	for i, p := range policies {
		parts[i].Policy = p
	}
	return parts
}
