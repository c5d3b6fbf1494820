package keyrate

import (
	"fmt"
	"time"
)

// MaxPolicies is the most policies one Limiter (or one of its tiers) may
// enforce together. Every Decision carries each policy's numbers inline, so
// that reading them costs no allocation; this bound keeps it small enough to
// copy on every call.
const MaxPolicies = 4

// Decision is the answer to one request, with the numbers behind it. Every
// backend (the in-process Limiter, the Redis one) answers with the same
// fields, exact against its clock; rounding them (for example to whole
// seconds for Retry-After) is left to the caller.
//
// A key may be under several policies at once (NewPolicies): the request is
// admitted only when every one of them has room. The fields below then
// describe the binding policy, the one that decided: when the request is
// refused, the refusing policy with the longest wait (one the request can
// never fit, first); when it is admitted, the policy with the least
// Remaining. Ties go to the policy given first. Policies returns every
// policy's own numbers. With a single policy, it binds.
type Decision struct {
	// Allowed reports whether the request was admitted (and, for Take,
	// recorded): whether every policy had room for it.
	Allowed bool
	// Policy is the binding policy's name ("" for New's single policy).
	Policy string
	// Limit is the binding policy's limit: the most events it admits per key
	// in any window.
	Limit int
	// Window is the binding policy's window.
	Window time.Duration
	// Remaining is how many more events the binding policy would have
	// admitted for the key at this instant, after this decision.
	Remaining int
	// RetryAfter is 0 when allowed. When refused, it is exactly how long until
	// the request would fit every policy, as far as the events already
	// admitted go. Refused with RetryAfter 0 means the request can never fit:
	// its weight is negative or above a policy's limit.
	RetryAfter time.Duration
	// ResetAfter is how long until the binding policy's window holds no
	// events for the key, so that its whole limit is available again. 0 when
	// it holds none; never more than the policy's window.
	ResetAfter time.Duration
	// RefillAfter is how long until the oldest event in the binding policy's
	// window leaves it, after this decision: the soonest any of its quota
	// comes back. It is what the IETF RateLimit field's t parameter means
	// ("seconds until additional quota is made available"). 0 when the window
	// holds no events. RefillAfter <= ResetAfter <= Window. A refused
	// request of weight 1 under a single policy has RetryAfter ==
	// RefillAfter, or up to a tick more when the oldest event is of this
	// very tick: an event counts from the end of its tick (see the package doc),
	// which RetryAfter waits for and RefillAfter, bounded by the window,
	// leaves out.
	RefillAfter time.Duration
	// Overflow reports a refusal because the limiter already tracks as many
	// keys as WithMaxKeys allows, this key is not one of them, and
	// WithRefuseNewKeys keeps new keys out. Such a Decision says nothing
	// about the key's own budget; its RetryAfter, RefillAfter and ResetAfter
	// are the longest window, an estimate of when idle keys will have been
	// evicted. Without WithRefuseNewKeys a full limiter makes room for new
	// keys instead, and never sets it.
	Overflow bool
	// Fallback reports a decision made in this process by a backend's
	// local fallback because its store could not answer (the Redis
	// backend's WithLocalFallback, while Redis is unreachable, paused or
	// out of memory): admitted or refused against a share of each limit,
	// counted for this process alone, and not recorded in the store. Its
	// Limit, Remaining and the policies' numbers are the fallback's. It is
	// false for every decision the store made, so that Decisions compare
	// equal as before; middleware and metrics read it to tell the two
	// apart (promlimit counts it as source="fallback").
	Fallback bool
	// Receipt identifies what an admitted decision recorded, so that the
	// backend that made it can give it back (Refund). It is zero when
	// nothing was recorded: a refusal, a weight of 0, Peek, or a Decision
	// already refunded.
	Receipt Receipt

	parts  [MaxPolicies]PolicyDecision
	nparts int
}

// Receipt identifies the events an admitted decision recorded: how many,
// the instant they were decided at on the backend's clock, and the store
// that holds them, in terms only the backend that made it reads. Backends
// other than *Limiter make theirs with NewReceipt.
type Receipt struct {
	at   int64 // nanoseconds since the Unix epoch: 8 bytes, where a time.Time takes 24
	n    int
	id   uint64
	log  *eventLog // *Limiter's: the log that holds the events
	mark uint32    // *Limiter's under GCRA: the weight its key had given back before
}

// NewReceipt returns the Receipt of n events recorded at instant at, in
// the store a backend calls id.
func NewReceipt(at time.Time, n int, id uint64) Receipt {
	return Receipt{at: at.UnixNano(), n: n, id: id}
}

// At returns the instant the events were decided at, on the backend's
// clock (the Redis server's for the Redis backend).
func (r Receipt) At() time.Time { return time.Unix(0, r.at) }

// N returns how many of the events recorded are left to give back: 0 for
// the zero Receipt.
func (r Receipt) N() int { return r.n }

// ID returns what the backend calls the store that holds them.
func (r Receipt) ID() uint64 { return r.id }

// PolicyDecision is one policy's part of a Decision.
//
// Nothing is recorded against any policy unless every policy admits the
// request, so Remaining, ResetAfter and RefillAfter describe the policy's
// window after the whole decision: with the request's events when it was
// admitted, without them when it was refused, even by another policy.
type PolicyDecision struct {
	Policy
	// Allowed reports whether this policy alone had room for the request.
	Allowed bool
	// Remaining is how many more events this policy would have admitted for
	// the key at this instant, after the decision.
	Remaining int
	// RetryAfter is 0 when this policy had room; otherwise how long until it
	// would have, or 0 when the request can never fit it.
	RetryAfter time.Duration
	// ResetAfter is how long until this policy's window holds no events for
	// the key; 0 when it holds none.
	ResetAfter time.Duration
	// RefillAfter is how long until the oldest event in this policy's window
	// leaves it; 0 when it holds none.
	RefillAfter time.Duration
}

// Policies returns every policy's part of the decision, in the order the
// policies were given: one element under a single policy, none for a
// Decision that no backend made (such as the zero Decision returned with an
// error). The slice points into d and costs no allocation; it is valid as
// long as d is, and appending to it copies it.
func (d *Decision) Policies() []PolicyDecision {
	return d.parts[:d.nparts:d.nparts]
}

// Combine makes the Decision for a request from each policy's part, in the
// order the policies were given. It is how every backend applies the binding
// rule (see Decision), so that they all agree: a backend works out each
// part, then calls Combine.
//
// The request is allowed only when every part is. When it is refused, the
// binding part is a refusing one: the first the request can never fit
// (refused with RetryAfter 0), else the one with the longest RetryAfter, the
// first given on ties. When it is allowed, the binding part is the one with
// the least Remaining, the first given on ties.
//
// The parts must describe the state after the decision (see PolicyDecision).
// Combine keeps the first MaxPolicies of them for Policies, though every part
// counts towards the answer. With no parts it returns the zero Decision, a
// refusal: a request under no policy is not admitted by default.
func Combine(parts ...PolicyDecision) Decision {
	var d Decision
	if len(parts) == 0 {
		return d
	}
	allowed := true
	for i := range parts {
		allowed = allowed && parts[i].Allowed
	}
	b := binding(parts, allowed)
	d.fill(&parts[b], allowed)
	d.nparts = copy(d.parts[:], parts)
	return d
}

// binding returns the index of the binding part (see Combine).
func binding(parts []PolicyDecision, allowed bool) int {
	b := -1
	for i := range parts {
		p := &parts[i]
		switch {
		case allowed:
			if b < 0 || p.Remaining < parts[b].Remaining {
				b = i
			}
		case p.Allowed:
		case p.RetryAfter == 0:
			return i // can never fit: nothing else matters
		case b < 0 || p.RetryAfter > parts[b].RetryAfter:
			b = i
		}
	}
	return b
}

// fill sets d's own fields from the binding part.
func (d *Decision) fill(p *PolicyDecision, allowed bool) {
	d.Allowed = allowed
	d.Policy = p.Name
	d.Limit = p.Limit
	d.Window = p.Window
	d.Remaining = p.Remaining
	d.RetryAfter = p.RetryAfter
	d.ResetAfter = p.ResetAfter
	d.RefillAfter = p.RefillAfter
}

// Format prints d as fmt prints a struct of its fields and of each
// policy's part (Policies), leaving out what only the backend that made it
// reads.
func (d Decision) Format(f fmt.State, verb rune) {
	type decision struct {
		Allowed                             bool
		Policy                              string
		Limit                               int
		Window                              time.Duration
		Remaining                           int
		RetryAfter, ResetAfter, RefillAfter time.Duration
		Overflow, Fallback                  bool
		Receipt                             Receipt
		Policies                            []PolicyDecision
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), decision{d.Allowed, d.Policy, d.Limit, d.Window, d.Remaining,
		d.RetryAfter, d.ResetAfter, d.RefillAfter, d.Overflow, d.Fallback, d.Receipt, d.Policies()})
}

// Format prints r's instant and weight left (At, N), as fmt prints a struct.
func (r Receipt) Format(f fmt.State, verb rune) {
	type receipt struct {
		At time.Time
		N  int
	}
	if r.n == 0 {
		fmt.Fprintf(f, fmt.FormatString(f, verb), receipt{})
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), receipt{r.At(), r.n})
}
