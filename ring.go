package keyrate

import (
	"sync"
	"time"
	"unsafe"
)

// eventLog is one key's sliding log: the instants of its admitted events,
// oldest first, in a ring buffer that grows by doubling up to the limit (of
// the longest window, under several policies) and shrinks back when it
// empties out. Instants are nanosecond offsets from the limiter's base, so
// they come from the monotonic clock and fit in an int64.
//
// Under several policies the log keeps the events of the longest window,
// which serve every shorter one: the events in a policy's window are the
// newest of them.
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
// tier is the id of the tier that last decided the key, whose longest window
// the janitor evicts it by; it fits in the padding after dead.
type eventLog struct {
	mu     sync.Mutex
	head   uint32 // index in the ring of the oldest event
	n      uint32 // number of events held
	last   int64  // newest instant this key was decided at; time never runs back past it
	ring   *int64 // the ring's first slot: &inline[0], or a heap array of size slots
	size   uint32 // the ring's capacity
	dead   bool
	tier   uint16
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

// push appends k events at instant t, growing the ring (up to limit, or
// what the events need if that is more) if needed. limit is at most
// math.MaxInt32, so the ring's size fits in a uint32.
func (g *eventLog) push(t int64, k uint32, limit int) {
	if need := g.n + k; need > g.size {
		g.resize(min(max(2*g.size, need), max(uint32(limit), need)))
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
// The policy's part is worked out in place in *d, which must be zero, and
// d becomes what Combine makes of that one part.
func (g *eventLog) decide(d *Decision, now int64, n int, p *Policy, record bool) {
	limit, window := p.Limit, int64(p.Window)
	now = g.settle(now, window)
	held := int(g.n)
	d.nparts = 1
	part := &d.parts[0]
	part.Policy = *p
	part.Remaining = max(limit-held, 0) // SetTier may have lowered the limit below held
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
		return
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
}

// allowAll is allow under every policy of t: it records n events at now
// when they fit each policy's window. n must be in [1, t.minLimit]. Called
// with mu held.
//
// Settling at the longest window leaves the events any policy counts; a
// policy's own window holds the newest of them, and it has room for n when
// the (limit-n+1)-th newest event has left that window: one comparison.
func (g *eventLog) allowAll(now int64, n int, t *tier) bool {
	now = g.settle(now, t.longest)
	for i := range t.policies {
		p := &t.policies[i]
		if int(g.n)+n > p.Limit && g.at(g.n+uint32(n-p.Limit)-1) > now-int64(p.Window) {
			return false
		}
	}
	g.push(now, uint32(n), t.capacity)
	return true
}

// decideAll is decide under every policy of t: it works out each policy's
// part in place in *d, which must be zero, admits the request when every
// part has room, recording it when record is set, and lets Combine's
// binding rule pick the policy the Decision describes. Called with mu held.
//
// Whether a policy has room is decide's comparison, made on the newest
// events; its numbers need where its window starts in the log, a binary
// search, O(log n), for each policy whose window is not the longest.
func (g *eventLog) decideAll(d *Decision, now int64, n int, t *tier, record bool) {
	now = g.settle(now, t.longest)
	d.nparts = len(t.policies)
	allowed := true
	for i := range t.policies {
		p := &t.policies[i]
		part := &d.parts[i]
		part.Policy = *p
		first := uint32(0) // settling left the longest window's events alone
		if int64(p.Window) < t.longest {
			first = g.firstAfter(now - int64(p.Window))
		}
		held := int(g.n - first)
		part.Remaining = max(p.Limit-held, 0)
		switch {
		case n == 0:
			part.Allowed = true
		case n < 0 || n > p.Limit:
			// Never admissible: RetryAfter 0.
		case held+n <= p.Limit:
			part.Allowed = true
		default:
			// The same blocking event as decide's, counted from the newest.
			blocking := g.at(g.n + uint32(n-p.Limit) - 1)
			part.RetryAfter = time.Duration(blocking + int64(p.Window) - now)
		}
		allowed = allowed && part.Allowed
		if held > 0 {
			part.RefillAfter = time.Duration(g.at(first) + int64(p.Window) - now)
			part.ResetAfter = time.Duration(g.at(g.n-1) + int64(p.Window) - now)
		}
	}
	if allowed && n > 0 {
		// Admitted: each window also holds the request's own events, the newest.
		for i := range d.nparts {
			part := &d.parts[i]
			part.Remaining -= n
			part.ResetAfter = part.Window
			if part.RefillAfter == 0 {
				part.RefillAfter = part.Window
			}
		}
		if record {
			g.push(now, uint32(n), t.capacity)
		}
	}
	d.fill(&d.parts[binding(d.parts[:d.nparts], allowed)], allowed)
}

// firstAfter returns the index of the oldest event after horizon, or n when
// there is none: where the window (horizon, now] starts in the log.
// Instants are in order, so it is a binary search.
func (g *eventLog) firstAfter(horizon int64) uint32 {
	lo, hi := uint32(0), g.n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if g.at(mid) <= horizon {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
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
