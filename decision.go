package keyrate

import (
	"fmt"
	"time"

	"github.com/keyrate/keyrate/internal/access"
)

// Decision is the answer to one request and the numbers behind it, the same
// from every backend, exact against its clock. Under several policies the
// fields describe the binding one: refused, the refusing policy with the
// longest wait (or the first the request can never fit); admitted, the one
// with the least Remaining; ties to the first given.
type Decision struct {
	// Allowed reports whether every policy had room: admitted (recorded).
	Allowed bool
	// Policy is the binding policy's name ("" for New's one policy).
	Policy string
	// Limit and Window are the binding policy's; for a calendar policy,
	// Window is the length of its current period (PolicyDecision.Period).
	Limit  int
	Window time.Duration
	// Remaining is what the binding policy would still admit now.
	Remaining int
	// RetryAfter, for a refusal, is exactly how long until the request fits
	// every policy; 0 when allowed or when it can never fit.
	RetryAfter time.Duration
	// ResetAfter is how long until the binding window is empty, RefillAfter
	// until its oldest event leaves it (the IETF RateLimit field's t); 0
	// for an empty window, at most Window (an event's tick aside).
	ResetAfter, RefillAfter time.Duration
	// Overflow reports a refusal for want of room (WithRefuseNewKeys).
	Overflow bool
	// Fallback reports a decision of a backend's local fallback, made while
	// its store could not answer (redislimit's WithLocalFallback).
	Fallback bool
	// Receipt names what an admitted decision recorded, for Refund.
	Receipt Receipt

	parts  [maxPolicies]PolicyDecision
	nparts int
}

// Receipt names what an admitted decision recorded, for its backend to give
// back: how much, when, and where, in terms only that backend reads.
type Receipt struct {
	at   int64 // nanoseconds since the Unix epoch: 8 bytes, where a time.Time takes 24
	n    int
	id   uint64
	log  *eventLog // *Limiter's: the log that holds the events
	mark uint64    // *Limiter's under GCRA: the weight its key had given back before
	// *Limiter's under SlidingLog: the decision has an entry in the log (a
	// tier of calendar policies alone writes none, and gives none back).
	logged bool
	// *Limiter's under GCRA: each policy's TAT the decision left, in ticks
	// from its instant's, which its ResetAfter, capped at the window, may
	// not tell.
	full [maxPolicies]uint32
}

// newReceipt returns the Receipt of n events recorded at instant at, in the
// store a backend other than *Limiter calls id (backend.NewReceipt).
func newReceipt(at time.Time, n int, id uint64) Receipt {
	return Receipt{at: at.UnixNano(), n: n, id: id}
}

// N returns how much of the weight recorded is left to give back.
func (r Receipt) N() int { return r.n }

// receiptAt returns the instant r's events were decided at, on the
// backend's clock (backend.ReceiptAt).
func receiptAt(r Receipt) time.Time { return time.Unix(0, r.at) }

// receiptID returns what the backend calls the store that holds r's events
// (backend.ReceiptID).
func receiptID(r Receipt) uint64 { return r.id }

// PolicyDecision is one policy's part of a Decision, after the decision:
// with the request's events when it was admitted, without them when it was
// refused, by this policy or another.
type PolicyDecision struct {
	Policy
	// Allowed reports whether this policy alone had room.
	Allowed bool
	// Remaining, RetryAfter, ResetAfter and RefillAfter mean what
	// Decision's do, for this policy alone. For a calendar policy, a wait
	// is until its period turns, exactly.
	Remaining                           int
	RetryAfter, ResetAfter, RefillAfter time.Duration
	// Period is a calendar policy's current period, its length (23 to 25
	// hours for a day across daylight saving, 28 to 31 days for a month);
	// 0 for a sliding window. A backend sets it for backend.Combine.
	Period time.Duration
}

// Policies returns every policy's part, in the order the policies were
// given (none for a Decision no backend made). The slice points into d.
func (d *Decision) Policies() []PolicyDecision {
	return d.parts[:d.nparts:d.nparts]
}

// combine makes a backend's Decision from each policy's part, by the binding
// rule every backend shares; no parts make the zero Decision, a refusal
// (backend.Combine).
func combine(parts ...PolicyDecision) Decision {
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

// combineInline is combine of parts[:n], for backend.Combine (see
// internal/access).
func combineInline(parts [access.MaxPolicies]PolicyDecision, n int) Decision {
	return combine(parts[:n]...)
}

// binding returns the index of the binding part (see combine).
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
	if p.Period > 0 {
		d.Window = p.Period
	}
	d.Remaining = p.Remaining
	d.RetryAfter = p.RetryAfter
	d.ResetAfter = p.ResetAfter
	d.RefillAfter = p.RefillAfter
}

// Format prints d's fields and its policies' parts, not its backend's own;
// a sliding policy's part without its zero Calendar and Period.
func (d Decision) Format(f fmt.State, verb rune) {
	type window struct {
		Name   string
		Limit  int
		Window time.Duration
	}
	type part struct {
		Policy                              window
		Allowed                             bool
		Remaining                           int
		RetryAfter, ResetAfter, RefillAfter time.Duration
	}
	type decision struct {
		Allowed                             bool
		Policy                              string
		Limit                               int
		Window                              time.Duration
		Remaining                           int
		RetryAfter, ResetAfter, RefillAfter time.Duration
		Overflow, Fallback                  bool
		Receipt                             struct {
			At time.Time
			N  int
		}
		Policies []any
	}
	parts := make([]any, d.nparts)
	for i, p := range d.Policies() {
		parts[i] = p
		if p.Calendar == (Calendar{}) {
			parts[i] = part{window{p.Name, p.Limit, p.Window}, p.Allowed, p.Remaining, p.RetryAfter, p.ResetAfter, p.RefillAfter}
		}
	}
	v := decision{d.Allowed, d.Policy, d.Limit, d.Window, d.Remaining,
		d.RetryAfter, d.ResetAfter, d.RefillAfter, d.Overflow, d.Fallback, struct {
			At time.Time
			N  int
		}{}, parts}
	if d.Receipt.n > 0 {
		v.Receipt.At, v.Receipt.N = receiptAt(d.Receipt), d.Receipt.n
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), v)
}
