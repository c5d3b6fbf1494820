package keyrate

import "time"

// allow is decide reduced to its answer, for Allow: it records n events at
// now when they fit. n must be in [1, limit]. Called with mu held.
//
// When lockFree is set, Allow may refuse the key without its lock
// (Limiter.lockFree): a decision that finds the key full publishes its
// refusal word, and a refusal leaves the log as it is, its instant
// included, as a refusal read off the word does, so that the two answer
// alike whichever a call takes, also when the clock steps back. Every other
// decision settles the log at now.
func (g *eventLog) allow(now int64, n int, t *tier, lockFree bool) bool {
	if t.algorithm != SlidingLog || t.cals != 0 {
		var d Decision
		g.decide(&d, now, n, t, true)
		return d.Allowed
	}
	now, r, gone := g.leavingAt(now, t.longest, t.longTicks, &t.scale)
	if g.state&cached == 0 && t.cacheable {
		g.cache(true)
	}
	if held := g.count(gone); held+n > t.minLimit {
		if lockFree {
			g.publishRefusal(held, g.instant(gone, r, &t.scale))
		} else {
			g.settleTo(now, gone)
		}
		return false
	}
	g.settleTo(now, gone)
	g.push(r, uint32(n), t.entries, t.scale.res)
	if held := g.count(0); lockFree && held >= t.minLimit {
		g.publishRefusal(held, g.instant(0, r, &t.scale)) // full: the next call can be refused unlocked
	}
	return true
}

// allowAll is allow under every policy of t: it records n events at now
// when they fit each policy's window. n must be in [1, t.minLimit]. Called
// with mu held.
//
// The longest window holds the events any policy counts; a policy's own
// window holds the newest of them. In a narrow log it has room for n when
// the (limit-n+1)-th newest event has left that window: one comparison. A
// wide log counts its window's weight.
func (g *eventLog) allowAll(now int64, n int, t *tier, lockFree bool) bool {
	if t.algorithm != SlidingLog || t.cals != 0 {
		return g.allow(now, n, t, lockFree)
	}
	now, r, gone := g.leavingAt(now, t.longest, t.longTicks, &t.scale)
	if g.state&cached == 0 && t.cacheable {
		g.cache(true)
	}
	held := g.count(gone)
	for i := range t.policies {
		p := &t.policies[i]
		if held+n <= p.Limit {
			continue
		}
		lim := t.lim(i, now, int64(p.Window), r)
		c, from := 0, uint32(0) // the newest c entries, from entry from, fill the window
		if !g.wide {
			if j := g.n + uint32(n-p.Limit) - 1; g.age(j, r) < lim {
				c, from = int(g.n-j), j
			}
		} else if f := g.first(t, i, lim, r); g.count(f)+n > p.Limit {
			c, from = g.count(f), f
		}
		switch {
		case c == 0:
			continue
		case lockFree:
			g.publishRefusal(c, g.instant(from, r, &t.scale))
		default:
			g.settleTo(now, gone)
		}
		return false
	}
	g.settleTo(now, gone)
	g.push(r, uint32(n), t.entries, t.scale.res)
	return true
}

// decide answers a request of weight n at instant now under the policies of
// t into *d, which must be zero, and records it when record is set and it
// is admitted. It is the whole decision: a pure function of the log, the
// request and now, called with mu held (or on a log no one else can see).
//
// A request is admitted when, for every policy, the events left in
// (now-window, now] plus n fit in its limit. Settling at the longest window
// leaves exactly that window's events in the log; a shorter window holds the
// newest of them, found by a binary search among the newest entries. Each
// policy's part is worked out in place in *d, and combine's binding rule
// picks the policy the Decision describes.
//
// An event counts from the end of its tick, up to a tick after it was
// decided: RetryAfter waits for that, but RefillAfter and ResetAfter, which
// say when quota comes back rather than when a request fits, leave it out
// and are never longer than the policy's window. A calendar policy's part
// comes from its count (calendarPart) and its instant is exact: it never
// waits for a tick.
func (g *eventLog) decide(d *Decision, now int64, n int, t *tier, record bool) {
	if t.algorithm != SlidingLog {
		g.decideCounted(d, now, n, t, record)
		return
	}
	s := &t.scale
	now, r := g.settleFor(now, t)
	if g.state&cached == 0 && t.cacheable {
		g.cache(true)
	}
	d.nparts = len(t.policies)
	allowed := true
	b := binder{wait: -1, never: -1}
	for i := range t.policies {
		p := &t.policies[i]
		part := &d.parts[i]
		part.Policy = *p
		if t.isCalendar(i) {
			g.calendarPart(part, i, now, n, t)
			allowed = allowed && part.Allowed
			b.see(d.parts[:], i)
			continue
		}
		w := int64(p.Window)
		first := uint32(0) // settling left the longest window's events alone
		if w < t.longest && g.n > 0 {
			first = g.first(t, i, t.lim(i, now, w, r), r)
		}
		held := g.count(first)
		part.Remaining = max(p.Limit-held, 0) // SetTier may have lowered the limit below held
		if held > 0 {
			part.RefillAfter = time.Duration(g.instant(first, r, s) + w - now)
		}
		switch {
		case n == 0:
			part.Allowed = true // weightless: always fits, records nothing
		case n < 0 || n > p.Limit:
			// Never admissible; RetryAfter stays 0 to say that waiting cannot help.
		case held+n <= p.Limit:
			part.Allowed = true
		case held+n-p.Limit <= g.weight(first):
			part.RetryAfter = part.RefillAfter // the oldest entry's leaving makes room
		default:
			// The request fits once the (held+n-limit)-th oldest event leaves.
			blocking := g.instant(g.nth(first, held+n-p.Limit), r, s)
			part.RetryAfter = time.Duration(blocking + w - now)
		}
		allowed = allowed && part.Allowed
		b.see(d.parts[:], i)
	}
	g.finishParts(d, now, r, n, t, allowed, record)
	d.fill(&d.parts[b.index(allowed)], allowed)
}

// finishParts finishes each part of an admitted request of weight n with
// the request's own events, the newest in every window, and records them
// when record is set; refused, it sets each sliding window's ResetAfter from
// the newest event. A helper of decide, with g.mu held.
func (g *eventLog) finishParts(d *Decision, now, r int64, n int, t *tier, allowed, record bool) {
	s := &t.scale
	if allowed && n > 0 {
		for i := range d.nparts {
			part := &d.parts[i]
			if t.isCalendar(i) {
				g.calendarDone(part, i, now, n, record)
				continue
			}
			part.Remaining -= n
			part.ResetAfter = part.Window
			if part.RefillAfter == 0 {
				part.RefillAfter = part.ResetAfter
			}
			part.RefillAfter = min(part.RefillAfter, part.Window)
		}
		if record && t.capacity > 0 { // a tier of calendar policies alone logs nothing
			g.push(r, uint32(n), t.entries, s.res)
		}
	} else if g.n > 0 {
		// Every window that holds events ends with the newest of them. A
		// window without events has neither wait: both stay 0.
		newest := time.Duration(g.instant(g.n-1, r, s) - now)
		for i := range d.nparts {
			if part := &d.parts[i]; part.RefillAfter > 0 && !t.isCalendar(i) {
				part.ResetAfter = min(newest+part.Window, part.Window)
				part.RefillAfter = min(part.RefillAfter, part.Window)
			}
		}
	}
}

// binder works out combine's binding part (binding) as the parts are made,
// one look at each, rather than in a pass of its own once they are done.
// An admitted request takes every part's Remaining down by the same n, so
// the least Remaining is the same part before and after.
type binder struct {
	least int // the part with the least Remaining, first of equals
	wait  int // of the refusing parts that can fit, the longest RetryAfter, first of equals; -1: none
	never int // the first refusing part that can never fit; -1: none
}

// see looks at parts[i], whose Allowed, Remaining and RetryAfter are final
// but for the admitted request's n.
func (b *binder) see(parts []PolicyDecision, i int) {
	p := &parts[i]
	if p.Remaining < parts[b.least].Remaining {
		b.least = i
	}
	switch {
	case p.Allowed:
	case p.RetryAfter == 0:
		if b.never < 0 {
			b.never = i
		}
	case b.wait < 0 || p.RetryAfter > parts[b.wait].RetryAfter:
		b.wait = i
	}
}

// index returns the binding part: binding(parts, allowed) of the parts seen.
func (b *binder) index(allowed bool) int {
	switch {
	case allowed:
		return b.least
	case b.never >= 0:
		return b.never
	}
	return b.wait
}

// idle reports whether the log holds no event inside the window at now, so
// that evicting it cannot change any later decision. It prunes as it looks,
// and so counts as a decision at now: later decisions never go before it,
// or a clock moved backwards could see room the pruned events still held.
//
// A log that holds a calendar count of a period not yet over is not idle,
// whatever tier counted it: evicting it would give the key a fresh period.
func (g *eventLog) idle(now int64, t *tier) bool {
	if t.algorithm != SlidingLog {
		counted := g.idleCounted(now, t)
		return g.calendarIdle(g.last, t) && counted
	}
	g.settle(now, t.longest, &t.scale)
	return g.calendarIdle(g.last, t) && g.n == 0
}

// untracked decides for a key with no log, on an empty one that is never
// stored. An empty log's answer does not depend on the instant, but for a
// calendar policy's period and the time until it turns.
func (t *tier) untracked(d *Decision, now int64, n int) {
	empty := calendarLog{log: eventLog{state: counting}}
	empty.log.decide(d, now, n, t, false)
}

// overflow is the refusal at now of an untracked key while WithMaxKeys is
// full and no room can be made for it (WithRefuseNewKeys, or every tracked
// key pinned by a TakeAll). Every policy's wait is the tier's longest
// window, or the time until its latest calendar period turns if later: an
// estimate of when the janitor will have evicted keys gone idle.
func (t *tier) overflow(d *Decision, now int64) {
	w := time.Duration(t.longest)
	for i := range t.policies {
		if t.isCalendar(i) {
			w = max(w, time.Duration(t.period(i, now).end-now))
		}
	}
	for i, p := range t.policies {
		d.parts[i] = PolicyDecision{Policy: p, RetryAfter: w, RefillAfter: min(w, p.Window), ResetAfter: min(w, p.Window)}
		if t.isCalendar(i) {
			span := t.period(i, now)
			until := time.Duration(span.end - now)
			d.parts[i].Period = time.Duration(span.end - span.start)
			d.parts[i].RefillAfter, d.parts[i].ResetAfter = until, until
		}
	}
	d.nparts = len(t.policies)
	d.fill(&d.parts[binding(d.parts[:d.nparts], false)], false)
	d.Overflow = true
}

// refund gives back n of the weight the decision d recorded at instant at,
// held by g under tier t, and reports whether it could: the decision's own
// entry gives up n, never another's. It first settles the log at now, so
// that events that have left the window count as gone; an entry holding
// less than n (the rest was given back) gives back nothing. Called with mu
// held.
//
// A calendar policy gets n back too, while the period that counted the
// decision lasts (refundCalendars); the refund succeeds when any policy
// gave something back.
func (g *eventLog) refund(now, at int64, n int, d *Decision, t *tier) bool {
	var gave bool
	if t.algorithm != SlidingLog {
		gave = g.refundCounted(now, at, n, d, t)
	} else if d.Receipt.logged {
		gave = g.refundLog(now, at, n, t)
	} else {
		g.settle(now, t.longest, &t.scale) // as refundLog would, for the calendars' instant
	}
	if t.cals != 0 {
		gave = g.refundCalendars(g.last, at, n, d, t) || gave
	}
	return gave
}

// refundLog is refund of the sliding log's entries.
func (g *eventLog) refundLog(now, at int64, n int, t *tier) bool {
	s := &t.scale
	g.settle(now, t.longest, s)
	if g.n == 0 || at > g.last {
		return false
	}
	r := s.ceil(g.last)
	age := r - s.ceil(at)
	if age >= int64(windowAge(g.last, t.longest, r, s)) {
		return false // it has left the window
	}
	// The entries of at's tick: one in a wide log, a run in a narrow one,
	// as ages fall towards the newest.
	from := g.firstInFrom(0, uint32(age)+1, r)
	to := g.firstInFrom(0, uint32(age), r)
	switch {
	case g.wide:
		if to-from != 1 || g.weight(from) < n {
			return false
		}
		g.unpushCounted(from, uint32(n))
	case int(to-from) < n:
		return false
	default:
		g.remove(to-uint32(n), uint32(n))
	}
	return true
}

// lim returns windowAge(now, w, r, s) for policy i of t, whose window is
// w: for a window of a whole number of ticks k, the window (now-w, now]
// starts k ticks before the tick that ends at or before now, and that tick
// is r or the one before it, so no division is needed.
func (t *tier) lim(i int, now, w, r int64) uint32 {
	return ageBound(now, w, r, t.ticks[i], &t.scale)
}
