package keyrate

import (
	"time"
	"unsafe"
)

// A calendar policy counts per key, not in the log: for each place i of a
// tier's policies, the weight admitted in one period and the instant that
// period ends. The count starts again at 0 once a decision finds its
// period over, and that test needs no calendar arithmetic: periods tile
// time, so the period of a later instant starts at or after the end of an
// earlier one's. A policy keeps its count by its place, as FixedWindow's
// do; a policy whose calendar changed keeps it while the new period began
// before the counted one ended: a changed policy counts only from then on.
type calendarCounts struct {
	end [maxPolicies]int64 // the instant the counted period turns, from the limiter's base
	n   [maxPolicies]uint32
}

// calendarLog is the log of a limiter with calendar policies: an eventLog
// followed by its counts, 112 bytes in one allocation. The map holds
// a pointer to the eventLog, its first field; the counts are found from it
// (eventLog.quota). A limiter without calendar policies allocates the
// eventLog alone, 64 bytes.
type calendarLog struct {
	log eventLog
	c   calendarCounts
}

// newCalendarLog returns a log with room for calendar counts.
func newCalendarLog(floor int64) *eventLog {
	cl := &calendarLog{log: eventLog{last: floor, state: counting}}
	return &cl.log
}

// quota returns g's calendar counts: g must be the first field of a
// calendarLog, as its counting flag says. Called with mu held.
func (g *eventLog) quota() *calendarCounts {
	if g.state&counting == 0 {
		panic("keyrate: a calendar policy decided a log without room for its count") // unreachable: see SetTier
	}
	return &(*calendarLog)(unsafe.Pointer(g)).c
}

// calendarPart works out calendar policy i's part of a request of weight n
// at now before it is recorded, as fixedPart does for a fixed window: the
// count of now's period, RetryAfter until the period turns. It first starts
// the count again when its period is over. Called with mu held.
func (g *eventLog) calendarPart(part *PolicyDecision, i int, now int64, n int, t *tier) {
	q := g.quota()
	p := g.turn(i, now, t)
	held, limit := int(q.n[i]), part.Limit
	until := time.Duration(p.end - now)
	part.Period = time.Duration(p.end - p.start)
	part.Remaining = max(limit-held, 0) // SetTier may have lowered the limit below held
	switch {
	case n == 0:
		part.Allowed = true
	case n < 0 || n > limit:
		// Never admissible; RetryAfter stays 0.
	case held+n <= limit:
		part.Allowed = true
	default:
		part.RetryAfter = until // the next period holds nothing yet
	}
	if held > 0 {
		part.ResetAfter, part.RefillAfter = until, until
	}
}

// turn moves calendar policy i's count on to now's period, starting it
// again at 0 when the period it counted in is over, and returns now's
// period. Every look at a key turns each of its tier's counts (a decision,
// a refund, the janitor's), as a decision would, so that the janitor's
// look changes nothing a decision could tell. Called with mu held.
func (g *eventLog) turn(i int, now int64, t *tier) period {
	q := g.quota()
	p := t.period(i, now)
	if q.end[i] <= p.start {
		q.n[i] = 0
	}
	q.end[i] = p.end
	return p
}

// calendarDone describes calendar policy i's part after an admitted request
// of weight n at now, and records it when record is set.
func (g *eventLog) calendarDone(part *PolicyDecision, i int, now int64, n int, record bool) {
	q := g.quota()
	part.Remaining -= n
	until := time.Duration(q.end[i] - now)
	part.ResetAfter, part.RefillAfter = until, until
	if record {
		q.n[i] += uint32(n)
	}
}

// refundCalendars gives n of the decision d, made at instant at, back to
// each calendar policy of t whose current period at now (the log's newest
// instant) holds at, and reports whether any did. A refund in a later
// period gives nothing back: the period it counted in is over, and the new
// one never held it. A policy changed since d gives nothing, as under
// FixedWindow. Called with mu held, after the log was moved to now.
func (g *eventLog) refundCalendars(now, at int64, n int, d *Decision, t *tier) bool {
	q := g.quota()
	parts := d.Policies()
	gave := false
	for i := range t.policies {
		if !t.isCalendar(i) {
			continue
		}
		p := g.turn(i, now, t)
		if i >= len(parts) || parts[i].Policy != t.policies[i] || at < p.start || q.n[i] == 0 {
			continue
		}
		q.n[i] -= min(uint32(n), q.n[i])
		gave = true
	}
	return gave
}

// calendarIdle reports whether every calendar count of g is 0 or of a
// period over by now, whatever tier counted it, once t's calendar policies
// have moved theirs on to now: evicting g then gives no period back. A log
// without counts is idle. Called with mu held.
func (g *eventLog) calendarIdle(now int64, t *tier) bool {
	if g.state&counting == 0 {
		return true
	}
	for i := range t.policies {
		if t.isCalendar(i) {
			g.turn(i, now, t)
		}
	}
	q := g.quota()
	for i := range q.n {
		if q.n[i] != 0 && now < q.end[i] {
			return false
		}
	}
	return true
}
