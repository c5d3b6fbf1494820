package keyrate

import (
	"math"
	"time"
	"unsafe"
)

// counters returns a key's state under FixedWindow or GCRA, a uint32 per
// policy of t: in the log's inline slots for up to two policies, else in a
// heap array the ring pointer holds (an O(1) log has no ring). A policy
// keeps its counter, by its place among the tier's policies, when the tier
// changes (SetTier, or the key moving to another tier); one that a smaller
// tier had no place for starts at 0.
func (g *eventLog) counters(t *tier) []uint32 {
	k := uint32(len(t.policies))
	heap := g.ring != nil && g.ring != &g.inline[0]
	switch {
	case k <= uint32(len(g.inline)) && heap:
		// Fewer policies than before: the first keep their counters inline.
		copy(g.inline[:], unsafe.Slice(g.ring, len(g.inline)))
		g.ring, g.size = nil, 0
	case k > uint32(len(g.inline)) && !heap:
		c := make([]uint32, maxPolicies)
		copy(c, g.inline[:])
		g.inline = [2]uint32{}
		g.ring, g.size = &c[0], maxPolicies
	case k > uint32(len(g.inline)):
		clear(unsafe.Slice(g.ring, maxPolicies)[k:]) // a later growth starts them at 0
	}
	if k <= uint32(len(g.inline)) {
		clear(g.inline[k:])
		return g.inline[:k]
	}
	return unsafe.Slice(g.ring, k)
}

// retier is called when a tier other than the one that last decided g
// decides it. The log keeps its events (or its counters, see counters)
// across tiers: moving a key to another plan never gives it a fresh budget.
func (g *eventLog) retier(t *tier) {
	g.tier = t.id
	g.forgetRefusal() // it was published for the tier that decided g before
}

// decideCounted is decide under FixedWindow or GCRA: each policy's part
// from its counter (a calendar policy's as under SlidingLog), the request
// admitted when every part has room, and the counters then moved by n when
// record is set. Called with mu held.
func (g *eventLog) decideCounted(d *Decision, now int64, n int, t *tier, record bool) {
	now, c := g.advance(now, t)
	d.nparts = len(t.policies)
	allowed := true
	for i := range t.policies {
		part := &d.parts[i]
		part.Policy = t.policies[i]
		switch {
		case t.isCalendar(i):
			g.calendarPart(part, i, now, n, t)
		case t.algorithm == FixedWindow:
			t.fixedPart(part, i, c[i], now, n)
		default:
			t.gcraPart(part, i, c[i], now, n)
		}
		allowed = allowed && part.Allowed
	}
	admitted := allowed && n > 0
	for i := range t.policies {
		part := &d.parts[i]
		switch {
		case t.isCalendar(i):
			if admitted {
				g.calendarDone(part, i, now, n, record)
			}
			continue // its part is at most its period already
		case t.algorithm == FixedWindow:
			t.fixedDone(part, i, &c[i], now, n, admitted, record)
		default:
			t.gcraDone(part, i, &c[i], now, n, admitted, record)
		}
		// A bucket of limit refills of window/limit, rounded up to ticks,
		// can take a little longer than the window to fill: say the window.
		part.ResetAfter = min(part.ResetAfter, part.Window)
		part.RefillAfter = min(part.RefillAfter, part.Window)
	}
	d.fill(&d.parts[binding(d.parts[:d.nparts], allowed)], allowed)
}

// advance moves g's counters on to instant now (never before the last
// instant g was decided at, which it returns in place of now when later):
// a FixedWindow count starts again at 0 in a later window, a GCRA TAT is
// kept from now's tick, 0 once it has passed. It returns the counters.
// Called with mu held.
func (g *eventLog) advance(now int64, t *tier) (int64, []uint32) {
	now = max(now, g.last)
	prev := g.last
	g.last = now
	c := g.counters(t)
	for i := range c {
		switch {
		case t.isCalendar(i):
			c[i] = 0 // counted in the calendar counts instead
		case t.algorithm == FixedWindow:
			if t.windowOf(i, now) != t.windowOf(i, prev) {
				c[i] = 0
			}
		default:
			c[i] = t.rebase(c[i], prev, now)
		}
	}
	return now, c
}

// idleCounted reports whether g's counters have all run out at now, so that
// forgetting them changes nothing. Called with mu held.
func (g *eventLog) idleCounted(now int64, t *tier) bool {
	_, c := g.advance(now, t)
	for _, v := range c {
		if v != 0 {
			return false
		}
	}
	return true
}

// windowOf returns the index of policy i's calendar window at instant at.
func (t *tier) windowOf(i int, at int64) int64 {
	return floorDiv(t.wall+at, int64(t.policies[i].Window))
}

// fixedPart works out FixedWindow policy i's part before the request is
// recorded, from its count in now's window.
func (t *tier) fixedPart(part *PolicyDecision, i int, count uint32, now int64, n int) {
	limit := part.Limit
	part.Remaining = max(limit-int(count), 0)
	end := (t.windowOf(i, now)+1)*int64(part.Window) - t.wall - now // until the window ends
	switch {
	case n == 0:
		part.Allowed = true
	case n < 0 || n > limit:
	case int(count)+n <= limit:
		part.Allowed = true
	default:
		part.RetryAfter = time.Duration(end)
	}
	if count > 0 {
		part.ResetAfter, part.RefillAfter = time.Duration(end), time.Duration(end)
	}
}

// fixedDone records an admitted request against FixedWindow policy i.
func (t *tier) fixedDone(part *PolicyDecision, i int, count *uint32, now int64, n int, admitted, record bool) {
	if !admitted {
		return
	}
	part.Remaining -= n
	end := (t.windowOf(i, now)+1)*int64(part.Window) - t.wall - now
	part.ResetAfter, part.RefillAfter = time.Duration(end), time.Duration(end)
	if record {
		*count += uint32(n)
	}
}

// A GCRA policy keeps its theoretical arrival time (TAT), the instant its
// bucket is full again, in whole ticks of the limiter's scale: v ticks after
// the tick of the instant the log was last decided at, or at most that
// instant when v is 0. Its arithmetic is in ticks too, a decision counting
// from the end of now's tick as the log counts its events: exact, with no
// rounding to creep in as the TAT is moved from one decision to the next.

// rebase moves a TAT kept from prev to be kept from now, 0 if it has passed.
func (t *tier) rebase(v uint32, prev, now int64) uint32 {
	if v == 0 {
		return 0
	}
	return uint32(max(t.scale.ceil(prev)+int64(v)-t.scale.ceil(now), 0))
}

// gcraPart works out GCRA policy i's part before the request is recorded,
// from its TAT kept from now's tick. With T the ticks between refills
// (window/limit, rounded up to a tick), the bucket holds limit tokens: a
// request of weight n fits when the TAT it would leave, max(TAT, now) + nT,
// is at most limit*T past now.
func (t *tier) gcraPart(part *PolicyDecision, i int, tat uint32, now int64, n int) {
	limit, every, full := int64(part.Limit), t.refill[i], int64(tat)
	part.Remaining = int(max(limit-ceilDiv(full, every), 0)) // a tier of a lower limit may find it past full
	switch {
	case n == 0:
		part.Allowed = true
	case n < 0 || int64(n) > limit:
	case full+int64(n)*every <= limit*every:
		part.Allowed = true
	default:
		part.RetryAfter = t.after(now, full+int64(n)*every-limit*every)
	}
	part.ResetAfter = t.after(now, full)
	part.RefillAfter = t.after(now, refillAfter(full, every))
}

// gcraDone records an admitted request against GCRA policy i.
func (t *tier) gcraDone(part *PolicyDecision, i int, tat *uint32, now int64, n int, admitted, record bool) {
	if !admitted {
		return
	}
	every := t.refill[i]
	full := int64(*tat) + int64(n)*every
	part.Remaining = part.Limit - int(ceilDiv(full, every))
	part.ResetAfter = t.after(now, full)
	part.RefillAfter = t.after(now, refillAfter(full, every))
	if record {
		*tat = uint32(full)
	}
}

// after returns how long from now until k ticks after now's tick ends; 0
// for k == 0.
func (t *tier) after(now, k int64) time.Duration {
	if k == 0 {
		return 0
	}
	return time.Duration(t.scale.instant(t.scale.ceil(now)+k) - now)
}

// refillAfter returns how many ticks until a bucket that is full in full
// ticks, refilled every every ticks, holds one more token: 0 when it is full.
func refillAfter(full, every int64) int64 {
	if full <= 0 {
		return 0
	}
	return full - (ceilDiv(full, every)-1)*every
}

// refundCounted is refund under FixedWindow or GCRA: of the decision d,
// made at instant at, n events leave each policy's count while that
// window lasts, or give the bucket back the part of their tokens it has
// not yet refilled. It reports whether any policy had something to give
// back. A policy that changed since d (SetTier, a tier move) gives back
// nothing: its counter may not hold d's events. Called with mu held.
//
// Under GCRA, d's request took the span [E-n*T, E] of a policy's timeline
// of refills, T its ticks between refills and E the theoretical arrival
// time it left, which d's Receipt holds (its ResetAfter is capped at the
// window, and a bucket of limit refills of T may take longer to fill). A
// refund of weight ahead of it since moved the span earlier by that
// weight's ticks; the log counts every weight given back (its ledger) and
// d's Receipt the count at d, so the span ends at most (refunded since) *
// T before E. By now the part of the span before now has been refilled;
// the rest is what the request still holds, and what it gives back, never
// more. A later request that found the bucket full began a span of its
// own, and keeps it.
func (g *eventLog) refundCounted(now, at int64, n int, d *Decision, t *tier) bool {
	now, c := g.advance(now, t)
	ledger := g.ledger()
	if t.algorithm == GCRA && ledger > maxLedger {
		return false // the ledger is full: see refunded
	}
	parts := d.Policies()
	// The weight refunded since d; from 2^32 on, more ticks than any TAT
	// holds, so it is clamped there to keep since*T in range.
	since := int64(min(ledger-d.Receipt.mark, math.MaxUint32))
	gave := false
	for i := range c {
		if i >= len(parts) || parts[i].Policy != t.policies[i] || c[i] == 0 {
			continue
		}
		if t.algorithm == FixedWindow {
			if t.windowOf(i, at) == t.windowOf(i, now) {
				c[i] -= min(uint32(n), c[i])
				gave = true
			}
			continue
		}
		// In ticks from now's, as the TAT is kept.
		end := t.scale.ceil(at) + int64(d.Receipt.full[i]) - since*t.refill[i]
		left := min(int64(n)*t.refill[i], end-t.scale.ceil(now), int64(c[i]))
		if left > 0 {
			c[i] -= uint32(left)
			gave = true
		}
	}
	if gave && t.algorithm == GCRA {
		g.refunded(n)
	}
	return gave
}

// A GCRA log keeps no entries, so its head and n hold its refund ledger,
// the weight its refunds gave back, in 64 bits: the high and low halves.

// maxLedger is the most a ledger may hold before a refund: one of any
// weight then still fits in 64 bits.
const maxLedger = math.MaxUint64 - math.MaxInt32

// ledger returns g's refund ledger.
func (g *eventLog) ledger() uint64 { return uint64(g.head)<<32 | uint64(g.n) }

// refunded counts n more weight given back by a key's GCRA refunds. The
// ledger never wraps, so a receipt's mark never reads as a later one: a
// log whose ledger passed maxLedger (at least 2^33 refunds of the largest
// weight) refunds nothing more, giving back less rather than more, until
// it is dropped idle and starts again.
func (g *eventLog) refunded(n int) {
	v := g.ledger() + uint64(n)
	g.head, g.n = uint32(v>>32), uint32(v)
}

// mark puts in r what a refund of it reads from a GCRA log decided at its
// instant: the ledger and each policy's TAT. Called with mu held.
func (g *eventLog) mark(r *Receipt) {
	r.mark = g.ledger()
	if g.ring != nil && g.ring != &g.inline[0] {
		copy(r.full[:], unsafe.Slice(g.ring, maxPolicies))
	} else {
		copy(r.full[:], g.inline[:])
	}
}
