package grpclimit

import (
	"slices"

	"google.golang.org/grpc/metadata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/ratelimitfield"
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
// back; left out when the window holds none. Those are Draft10's
// parameters; rev chooses another Revision's (see WithFieldRevision), for
// a call of weight cost.
func (r *route) fields(d *keyrate.Decision, rev ratelimitfield.Revision, cost int) metadata.MD {
	if d.Window == 0 && len(d.Policies()) == 0 {
		d.Window = r.window // a Decision filled in by hand, without its window
	}
	var buf [128]byte
	md := metadata.MD{mdRateLimit: {string(rev.AppendRateLimit(buf[:0], d, r.method, cost))}}
	if p := r.policyFor(d); p != "" {
		md[mdPolicy] = []string{p}
	}
	return md
}

// policyFor returns the ratelimit-policy value for d: the one a kept route
// wrote ahead for the backend's own policies when d was decided under
// them, else one written from d (a tier's policies, or those of a backend
// that reports none); "" when no limit is known.
func (r *route) policyFor(d *keyrate.Decision) string {
	if r.policy != "" && samePolicies(d, r.policies) {
		return r.policy
	}
	var buf [128]byte
	return string(ratelimitfield.AppendPolicy(buf[:0], d, r.method, ""))
}

// samePolicies reports whether d was decided under policies, in order.
func samePolicies(d *keyrate.Decision, policies []keyrate.Policy) bool {
	if parts := d.Policies(); len(parts) > 0 {
		return slices.EqualFunc(parts, policies, func(p keyrate.PolicyDecision, q keyrate.Policy) bool { return p.Policy == q })
	}
	return len(policies) == 1 && policies[0] == keyrate.Policy{Name: d.Policy, Limit: d.Limit, Window: d.Window}
}
