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
// Every field is guarded by mu. A nil buf marks a log the janitor has evicted
// from the map: a caller that finds one retries with a fresh lookup.
type eventLog struct {
	mu   sync.Mutex
	head uint32  // index in buf of the oldest event
	n    uint32  // number of events held
	last int64   // newest instant this key was decided at; time never runs back past it
	buf  []int64 // the ring; nil once evicted
}

func newEventLog(floor int64) *eventLog {
	return &eventLog{last: floor, buf: make([]int64, 1)}
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
	for g.n > 0 && g.buf[g.head] <= horizon {
		g.head++
		if int(g.head) == len(g.buf) {
			g.head = 0
		}
		g.n--
	}
	if c := len(g.buf); c > 1 && int(g.n) <= c/4 {
		g.resize(max(2*int(g.n), 1)) // room to double before the next shrink
	}
}

// push appends k events at instant t, growing the ring (up to limit) if needed.
func (g *eventLog) push(t int64, k uint32, limit int) {
	if need := int(g.n + k); need > len(g.buf) {
		g.resize(min(max(2*len(g.buf), need), limit))
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

func (g *eventLog) resize(c int) {
	buf := make([]int64, c)
	for i := range g.n {
		buf[i] = g.at(i)
	}
	g.buf, g.head = buf, 0
}

// decide answers a request of weight n at instant now, and records it when
// record is set and it is admitted. It is the whole decision: a pure function
// of the log, the request and now, called with mu held (or on a log no one
// else can see).
//
// A request is admitted when the events left in (now-window, now] plus n fit
// in limit. Pruning first leaves exactly those events in the ring, so the
// test is one comparison, and each event is pruned once: amortised O(1).
func (g *eventLog) decide(now int64, n, limit int, window int64, record bool) Decision {
	if now < g.last {
		now = g.last // a clock that stepped back: decide at the newest instant seen
	}
	g.last = now
	g.prune(now - window)

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
