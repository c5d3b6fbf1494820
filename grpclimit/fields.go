package grpclimit

import (
	"google.golang.org/grpc/metadata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/ratelimitfield"
)

// The metadata keys of the IETF RateLimit fields, lower case as gRPC sends
// them.
const (
	mdPolicy    = "ratelimit-policy"
	mdRateLimit = "ratelimit"
)

// fields returns the header metadata for d, with a member for each of its
// policies, named as httplimit names them: by the policy's Name, or the
// method for an unnamed policy:
//
//	ratelimit-policy: "second";q=10;w=1, "day";q=1000;w=86400
//	ratelimit: "second";r=9;t=1, "day";r=990;t=51840
//
// t is, for a policy that refused the call and that waiting can cure, the
// whole seconds until the call would fit it, rounded up (for the binding
// policy, the RetryInfo delay, rounded); otherwise the whole seconds until
// the oldest event in its window leaves it, the soonest its quota comes
// back; left out when the window holds none.
func (r *route) fields(d *keyrate.Decision) metadata.MD {
	var one [1]keyrate.PolicyDecision
	parts := ratelimitfield.Parts(d, r.window, &one)
	var buf [128]byte
	md := metadata.MD{mdRateLimit: {string(ratelimitfield.AppendUsages(buf[:0], r.method, parts))}}
	if p := r.policyFor(parts); p != "" {
		md[mdPolicy] = []string{p}
	}
	return md
}

// policyFor returns the ratelimit-policy value for parts: the one a kept
// route wrote ahead for the backend's own policies when they are parts'
// policies, else one written from parts (a tier's, or those of a backend
// that reports none); "" when no limit is known.
func (r *route) policyFor(parts []keyrate.PolicyDecision) string {
	if r.policy != "" && ratelimitfield.Same(parts, r.policies) {
		return r.policy
	}
	return string(ratelimitfield.AppendPolicies(nil, r.method, parts, ""))
}
