package ratelimitfield

import (
	"strconv"

	"github.com/keyrate/keyrate"
)

// Revision selects the parameters of the RateLimit field, as a revision of
// the draft (or a proposal for the next one) names them. RateLimit-Policy
// is the same in every Revision: q, qu and w. The zero Revision, Draft10,
// is what AppendRateLimit writes; a server moves to another only once its
// clients read it.
type Revision uint8

const (
	// Draft10 is the RateLimit field as draft-ietf-httpapi-ratelimit-headers-10
	// defines it, and as keyrate has written it for -10 and -11: what
	// remains, r, and the seconds until more quota comes back, t.
	//
	//	RateLimit: "second";r=9;t=1
	Draft10 Revision = iota
	// Proposal166 is the RateLimit field as the working group's pull
	// request 166 proposes it for a revision after -11: r renamed a (the
	// quota available), t renamed w (the effective window, the same
	// seconds t gives), and a new c, the quota units this request
	// consumed: its weight when admitted, 0 when refused, since a refusal
	// records nothing.
	//
	//	RateLimit: "second";a=9;w=1;c=1
	//
	// A proposal, not a revision: whether -12 took it, as it stands, is
	// for its text to say. Its partition field, RateLimit-Partition, has
	// no counterpart here, as no partition key (pk) is sent: it would
	// disclose or hash the client's identity.
	Proposal166
)

// Known reports whether v is one of the Revisions above.
func (v Revision) Known() bool { return v <= Proposal166 }

// String names v: "draft-10", "proposal-166".
func (v Revision) String() string {
	switch v {
	case Draft10:
		return "draft-10"
	case Proposal166:
		return "proposal-166"
	}
	return "revision(" + strconv.Itoa(int(v)) + ")"
}

// AppendRateLimit appends the RateLimit value for d, with v's parameters:
// a member for each policy d was decided under, in order, as the package's
// AppendRateLimit lists them, whose numbers are the same in every
// Revision. cost is the request's weight, which Proposal166 reports as c;
// Draft10 has no c and ignores it. An unknown v writes Draft10's.
func (v Revision) AppendRateLimit(b []byte, d *keyrate.Decision, route string, cost int) []byte {
	remaining, reset := ";r=", ";t="
	if v == Proposal166 {
		remaining, reset = ";a=", ";w="
	}
	consumed := 0
	if d.Allowed && cost > 0 {
		consumed = cost
	}
	var one [1]keyrate.PolicyDecision
	for i, p := range parts(d, &one) {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendName(b, p.Name, route)
		b = append(b, remaining...)
		b = strconv.AppendInt(b, int64(max(p.Remaining, 0)), 10)
		if t, ok := t(p.Allowed, p.RetryAfter, p.RefillAfter, p.ResetAfter); ok {
			b = append(b, reset...)
			b = strconv.AppendInt(b, t, 10)
		}
		if v == Proposal166 {
			b = append(b, ";c="...)
			b = strconv.AppendInt(b, int64(consumed), 10)
		}
	}
	return b
}
