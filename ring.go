package keyrate

import (
	"sync"
	"time"
)

// eventLog is one key's sliding log: the instants of its admitted events,
// oldest first, in a ring buffer that grows by doubling up to the limit and
// shrinks back when it empties out. Instants are nanosecond offsets from the
// limiter's base, so they come from the monotonic clock and fit in an int64.
//
// The struct fills one 80-byte allocation, and it is also the key map's
// entry: it holds its key, so a lookup goes from the map's bucket straight
// to the log it is about to lock. It keeps a copy of the oldest event, so a
// decision that prunes nothing (every refusal of a busy key) never reads the
// ring; and a key with one event in its window keeps that event inline,
// costing one allocation in all.
//
// Every field but key (set before the log is shared, then only read, by
// lock-free lookups too) is guarded by mu. A nil buf marks a log the janitor has evicted
// from the map: a caller that finds one retries with a fresh lookup.
type eventLog struct {
	mu     sync.Mutex
	key    string  // the key the log belongs to, set once
	head   uint32  // index in buf of the oldest event
	n      uint32  // number of events held
	last   int64   // newest instant this key was decided at; time never runs back past it
	oldest int64   // buf[head] while n > 0
	buf    []int64 // the ring: inline while it fits, else on the heap; nil once evicted
	inline [inlineSlots]int64
}

const inlineSlots = 1

func newEventLog(key string, floor int64) *eventLog {
	g := &eventLog{key: key, last: floor}
	g.buf = g.inline[:]
	return g
}

// at returns the i-th oldest event, 0 <= i < n.
func (g *eventLog) at(i uint32) int64 {
	j := g.head + i
	if c := uint32(len(g.buf)); j >= c {
		j -= c
	}
	return g.buf[j]
}

// prune drops the events at or before horizon (they have left the window)
// and gives memory back once the ring is mostly empty.
func (g *eventLog) prune(horizon int64) {
	for g.n > 0 && g.oldest <= horizon {
		g.head++
		if int(g.head) == len(g.buf) {
			g.head = 0
		}
		g.n--
		g.oldest = g.buf[g.head] // stale when n reaches 0, and then unread
	}
	if c := len(g.buf); c > inlineSlots && int(g.n) <= c/4 {
		g.resize(2 * int(g.n)) // room to double before the next shrink
	}
}

// push appends k events at instant t, growing the ring (up to limit) if needed.
func (g *eventLog) push(t int64, k uint32, limit int) {
	if need := int(g.n + k); need > len(g.buf) {
		g.resize(min(max(2*len(g.buf), need), limit))
	}
	if g.n == 0 {
		g.oldest = t
	}
	c := uint32(len(g.buf))
	j := g.head + g.n
	for range k {
		if j >= c {
			j -= c
		}
		g.buf[j] = t
		j++
	}
	g.n += k
}

// resize moves the events to a ring of capacity c, or to the inline slots
// when c fits there. Only a heap ring ever moves to the inline slots, so
// source and destination never overlap.
func (g *eventLog) resize(c int) {
	var buf []int64
	if c <= inlineSlots {
		buf = g.inline[:]
	} else {
		buf = make([]int64, c)
	}
	for i := range g.n {
		buf[i] = g.at(i)
	}
	g.buf, g.head = buf, 0
}

// settle moves the log to instant now and drops the events that have left
// the window. It returns the instant to decide at: now, unless a clock that
// stepped back put now before the newest instant already seen, in which case
// the log is decided at that instant.
func (g *eventLog) settle(now, window int64) int64 {
	now = max(now, g.last)
	g.last = now
	g.prune(now - window)
	return now
}

// allow is decide reduced to its answer, for Allow: it records n events at
// now when they fit. n must be in [1, limit]. Called with mu held.
func (g *eventLog) allow(now int64, n, limit int, window int64) bool {
	now = g.settle(now, window)
	if int(g.n)+n > limit {
		return false
	}
	g.push(now, uint32(n), limit)
	return true
}

// decide answers a request of weight n at instant now, and records it when
// record is set and it is admitted. It is the whole decision: a pure function
// of the log, the request and now, called with mu held (or on a log no one
// else can see).
//
// A request is admitted when the events left in (now-window, now] plus n fit
// in limit. Settling first leaves exactly those events in the ring, so the
// test is one comparison, and each event is pruned once: amortised O(1).
func (g *eventLog) decide(now int64, n, limit int, window int64, record bool) Decision {
	now = g.settle(now, window)
	held := int(g.n)
	d := Decision{Limit: limit, Remaining: limit - held}
	switch {
	case n == 0:
		d.Allowed = true // weightless: always fits, records nothing
	case n < 0 || n > limit:
		// Never admissible; RetryAfter stays 0 to say that waiting cannot help.
	case held+n <= limit:
		d.Allowed = true
		d.Remaining -= n
		d.ResetAfter = time.Duration(window) // the request's own events are the newest
		d.RefillAfter = d.ResetAfter         // unless an older event leaves first
		if g.n > 0 {
			d.RefillAfter = time.Duration(g.oldest + window - now)
		}
		if record {
			g.push(now, uint32(n), limit)
		}
		return d
	default:
		// The request fits once the (held+n-limit)-th oldest event leaves.
		blocking := g.at(uint32(held + n - limit - 1))
		d.RetryAfter = time.Duration(blocking + window - now)
	}
	if g.n > 0 {
		d.ResetAfter = time.Duration(g.at(g.n-1) + window - now)
		d.RefillAfter = time.Duration(g.oldest + window - now)
	}
	return d
}

// idle reports whether the log holds no event inside the window at now, so
// that evicting it cannot change any later decision. It prunes as it looks,
// and so counts as a decision at now: later decisions never go before it,
// or a clock moved backwards could see room the pruned events still held.
func (g *eventLog) idle(now, window int64) bool {
	g.last = max(now, g.last)
	g.prune(g.last - window)
	return g.n == 0
}
