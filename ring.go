package keyrate

import (
	"sync"
	"time"
	"unsafe"
)

// eventLog is one key's sliding log: the instants of its admitted events,
// oldest first, in a ring buffer that grows by doubling up to the limit and
// shrinks back when it empties out. Instants are nanosecond offsets from the
// limiter's base, so they come from the monotonic clock and fit in an int64.
//
// The struct fills one 48-byte allocation, and a key with one event in its
// window keeps that event inline: such a key costs that allocation, its map
// entry and its key string, under 128 bytes in all (TestMemoryPerKey). The
// ring moves to the heap at the second event. It is held as a pointer to its
// first slot and a capacity rather than a slice, whose header would take 16
// bytes more and push the struct into the next size class.
//
// Every field is guarded by mu. dead marks a log that has left the map
// (evicted or Reset): a caller that finds it so retries with a fresh lookup.
type eventLog struct {
	mu     sync.Mutex
	head   uint32 // index in the ring of the oldest event
	n      uint32 // number of events held
	last   int64  // newest instant this key was decided at; time never runs back past it
	ring   *int64 // the ring's first slot: &inline[0], or a heap array of size slots
	size   uint32 // the ring's capacity
	dead   bool
	inline [inlineSlots]int64
}

const inlineSlots = 1

func newEventLog(floor int64) *eventLog {
	g := &eventLog{last: floor}
	g.ring, g.size = &g.inline[0], inlineSlots
	return g
}

// slots returns the ring as a slice.
func (g *eventLog) slots() []int64 { return unsafe.Slice(g.ring, g.size) }

// at returns the i-th oldest event, 0 <= i < n.
func (g *eventLog) at(i uint32) int64 {
	j := g.head + i
	if j >= g.size {
		j -= g.size
	}
	return g.slots()[j]
}

// prune drops the events at or before horizon (they have left the window)
// and gives memory back once the ring is mostly empty.
func (g *eventLog) prune(horizon int64) {
	for g.n > 0 && g.at(0) <= horizon {
		g.head++
		if g.head == g.size {
			g.head = 0
		}
		g.n--
	}
	if g.size > inlineSlots && g.n <= g.size/4 {
		g.resize(2 * g.n) // room to double before the next shrink
	}
}

// push appends k events at instant t, growing the ring (up to limit) if
// needed. n+k must not pass limit, which is at most math.MaxInt32.
func (g *eventLog) push(t int64, k uint32, limit int) {
	if need := g.n + k; need > g.size {
		g.resize(min(max(2*g.size, need), uint32(limit)))
	}
	ring, c := g.slots(), g.size
	j := g.head + g.n
	for range k {
		if j >= c {
			j -= c
		}
		ring[j] = t
		j++
	}
	g.n += k
}

// resize moves the events to a ring of capacity c, or to the inline slots
// when c fits there. Only a heap ring ever moves to the inline slots, so
// source and destination never overlap.
func (g *eventLog) resize(c uint32) {
	var ring []int64
	if c <= inlineSlots {
		ring = g.inline[:]
	} else {
		ring = make([]int64, c)
	}
	for i := range g.n {
		ring[i] = g.at(i)
	}
	g.ring, g.size, g.head = &ring[0], uint32(len(ring)), 0
}

// settle moves the log to instant now and drops the events that have left
// the window. It returns the instant to decide at: now, unless now is before
// the newest instant already decided at for this key (a clock stepped back,
// or the caller read the clock before another caller took the key's lock),
// in which case the log is decided at that instant, so that each key's
// instants never run backwards.
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

// decide answers a request of weight n at instant now under the single
// policy p, and records it when record is set and it is admitted. It is the
// whole decision: a pure function of the log, the request and now, called
// with mu held (or on a log no one else can see).
//
// A request is admitted when the events left in (now-window, now] plus n fit
// in limit. Settling first leaves exactly those events in the ring, so the
// test is one comparison, and each event is pruned once: amortised O(1).
// The policy's part is worked out in place in the Decision, which is then
// what Combine makes of that one part.
func (g *eventLog) decide(now int64, n int, p Policy, record bool) Decision {
	limit, window := p.Limit, int64(p.Window)
	now = g.settle(now, window)
	held := int(g.n)
	var d Decision
	d.nparts = 1
	part := &d.parts[0]
	part.Policy = p
	part.Remaining = limit - held
	switch {
	case n == 0:
		part.Allowed = true // weightless: always fits, records nothing
	case n < 0 || n > limit:
		// Never admissible; RetryAfter stays 0 to say that waiting cannot help.
	case held+n <= limit:
		part.Allowed = true
		part.Remaining -= n
		part.ResetAfter = p.Window         // the request's own events are the newest
		part.RefillAfter = part.ResetAfter // unless an older event leaves first
		if g.n > 0 {
			part.RefillAfter = time.Duration(g.at(0) + window - now)
		}
		if record {
			g.push(now, uint32(n), limit)
		}
		d.fill(part, true)
		return d
	default:
		// The request fits once the (held+n-limit)-th oldest event leaves.
		blocking := g.at(uint32(held + n - limit - 1))
		part.RetryAfter = time.Duration(blocking + window - now)
	}
	if g.n > 0 {
		part.ResetAfter = time.Duration(g.at(g.n-1) + window - now)
		part.RefillAfter = time.Duration(g.at(0) + window - now)
	}
	d.fill(part, part.Allowed)
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
