package keyrate

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// eventLog is one key's sliding log: its admitted events, oldest first, in
// a ring buffer that grows by doubling up to what the longest window can
// hold and shrinks back as it empties.
//
// An entry is a 32-bit tick: the instant it was decided at (nanoseconds
// since the limiter's base, from the monotonic clock) divided by the
// limiter's tick and rounded up, kept modulo 2^32 (see scale). The tick is
// fixed for the limiter's life, so an entry is written once and never
// rewritten: a change of policies (SetTier, a key moving to another tier)
// reads the same entries in other windows.
//
// A log's entries take one of two forms, chosen when it is empty. A narrow
// log holds one entry per event, 4 bytes each: the form for traffic of
// weight 1. A wide log holds pairs, a tick and the running total of weight
// before it, and every event of one tick shares its pair, so that a
// decision of any weight is one entry: memory and time per decision do not
// depend on the weight. The running total after the newest entry is then
// kept in inline[0], and the ring is always on the heap. A narrow log
// becomes wide when a weight above 1 arrives (widen), and a log under
// WithResolution is wide from its first event.
//
// Under several policies the log keeps the events of the longest window,
// which serve every shorter one: the events in a policy's window are the
// newest of them.
//
// The struct fills one 64-byte allocation, and a narrow log keeps its first
// two events inline: such a key costs that allocation, its map entry and
// its key string, under 144 bytes in all (TestMemoryPerKey). The ring is
// held as a pointer to its first slot and a capacity rather than a slice,
// whose header would take 16 bytes more and push the struct into the next
// size class. 16 of the bytes are the refusal word and the instant it was
// published at, which let Allow refuse a full key without mu (refusal.go):
// they took a log from 48 bytes to 64, about 111 B per key to 127 in
// TestMemoryPerKey.
//
// Every field but refusal and published is guarded by mu. Of state's
// flags, dead marks a log that has left the map (evicted or Reset): a
// caller that finds it so retries with a fresh lookup. pinned marks a log that TakeAll created and
// has yet to decide: making room and the janitor leave it be (see TakeAll).
// cached marks a narrow log on the heap whose inline[0] holds the tick of
// its oldest entry, so that a decision that drops nothing and refuses (or
// only appends) reads no entry of the ring: one dependent cache miss less
// for a key the cache does not already hold. tier is the id of the tier
// that last decided the key, whose longest window the janitor evicts it
// by.
type eventLog struct {
	mu   sync.Mutex
	last int64   // newest instant this key was decided at; time never runs back past it
	ring *uint32 // the ring's first slot: &inline[0], a heap array, or nil
	// refusal summarises the log for refusals read without mu, and
	// published is last when it was written, with the key's tier (see
	// refusal.go); only atomics touch them.
	refusal   atomic.Uint64
	published atomic.Int64
	head      uint32 // index in the ring of the oldest entry (GCRA: see ledger)
	n         uint32 // number of entries held (GCRA: see ledger)
	size      uint32 // the ring's capacity, in entries
	tier      uint16
	wide      bool  // entries are pairs: a tick and the running total before it
	state     uint8 // dead, pinned, cached, counting
	inline    [2]uint32
}

// The flags of eventLog.state.
const (
	dead     = 1 << iota // the log has left the map
	pinned               // TakeAll holds the log it created until it decides it
	cached               // inline[0] is the oldest entry's tick
	counting             // the log is a calendarLog's, with room for calendar counts
)

// is reports whether g has every flag of f. Called with mu held.
func (g *eventLog) is(f uint8) bool { return g.state&f == f }

func newEventLog(floor int64) *eventLog {
	return &eventLog{last: floor}
}

// width is the number of slots an entry takes: 2 in a wide log.
func (g *eventLog) width() uint32 {
	if g.wide {
		return 2
	}
	return 1
}

// slot returns word w of entry i (from the oldest).
func (g *eventLog) slot(i, w uint32) *uint32 {
	j := g.head + i
	if j >= g.size {
		j -= g.size
	}
	return (*uint32)(unsafe.Add(unsafe.Pointer(g.ring), 4*(j*g.width()+w)))
}

// tick returns the tick of entry i, 0 <= i < n: the oldest's from the
// cache when it holds it.
func (g *eventLog) tick(i uint32) uint32 {
	if i == 0 && g.state&cached != 0 {
		return g.inline[0]
	}
	return *g.slot(i, 0)
}

// cache keeps the oldest entry's tick in inline[0], when the log is narrow
// and on the heap and its tier leaves that slot free of cursors (free), or
// forgets it when it cannot. Called whenever the oldest entry may have
// changed, after settling; an entry just read costs no miss to copy.
func (g *eventLog) cache(free bool) {
	if g.n == 0 || g.wide || g.ring == &g.inline[0] || !free {
		g.state &^= cached
		return
	}
	g.inline[0] = *g.slot(0, 0)
	g.state |= cached
}

// recache keeps the cache true after the oldest entry changed, when it is
// kept at all.
func (g *eventLog) recache() {
	if g.state&cached != 0 {
		g.cache(true)
	}
}

// age returns how many ticks entry i is older than reference tick r.
// Every held entry is at most r and less than 2^32 ticks older.
func (g *eventLog) age(i uint32, r int64) uint32 { return uint32(r) - g.tick(i) }

// instant returns the instant entry i stands for, given reference tick r.
func (g *eventLog) instant(i uint32, r int64, s *scale) int64 {
	return s.instant(r - int64(g.age(i, r)))
}

// before returns the running total of weight before entry i (wide logs).
func (g *eventLog) before(i uint32) uint32 { return *g.slot(i, 1) }

// count returns the weight held from entry `from` to the newest.
func (g *eventLog) count(from uint32) int {
	if !g.wide {
		return int(g.n - from)
	}
	if from == g.n {
		return 0
	}
	return int(g.inline[0] - g.before(from))
}

// weight returns the weight entry i holds.
func (g *eventLog) weight(i uint32) int { return g.count(i) - g.count(i+1) }

// nth returns the entry that holds the k-th oldest event counted from entry
// `from`, 1 <= k <= count(from). A narrow log holds one event per entry; a
// wide one is searched on its running totals.
func (g *eventLog) nth(from uint32, k int) uint32 {
	if !g.wide {
		return from + uint32(k) - 1
	}
	base := g.before(from)
	lo, hi := from, g.n-1 // the last entry whose own first event is at most the k-th
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if int(g.before(mid)-base) < k {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// firstIn returns the index of the oldest entry whose age is below lim: where
// a window starts in the log. Ages fall towards the newest entry, so it is a
// binary search; it looks first among the newest span entries, where a
// window holding at most span entries (its policy's limit, or what the
// resolution lets its window hold) starts.
func (g *eventLog) firstIn(lim uint32, r int64, span uint32) uint32 {
	lo, hi := uint32(0), g.n
	if span < g.n {
		if g.age(g.n-span-1, r) >= lim {
			lo = g.n - span
			if g.age(lo, r) < lim {
				return lo // a full window, as under a refusal: no search
			}
		} else {
			hi = g.n - span - 1 // the window holds more than span (SetTier lowered a limit)
		}
	}
	// Gallop back from the newest entry, so that a window holding k entries
	// is found in about 2 log k looks: most hold far fewer than their limit.
	for step := uint32(1); lo+step <= hi; step *= 2 {
		j := hi - step
		if g.age(j, r) >= lim {
			lo = j + 1
			break
		}
		hi = j
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if g.age(mid, r) >= lim {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// cursorSteps bounds how far a cursor walks before firstIn searches instead.
const cursorSteps = 8

// firstFrom is firstIn for the policy whose cursor is *c: the ring position
// where its window started when last asked. A window's start only moves
// forward while its policy stays the same, usually by an entry or none, so
// a few steps from the cursor find it. A cursor that cannot be right (its
// entry is no longer held, or the one before it is inside the window, as
// when a tier's window grew) is ignored: cursors are hints, and any value
// gives the right answer.
func (g *eventLog) firstFrom(c *uint32, lim uint32, r int64, span uint32) uint32 {
	i := *c - g.head // the cursor's index from the oldest entry
	if *c < g.head {
		i += g.size
	}
	if i > g.n || i > 0 && g.age(i-1, r) < lim {
		i = g.firstIn(lim, r, span)
	} else {
		for steps := 0; i < g.n && g.age(i, r) >= lim; steps++ {
			if steps == cursorSteps {
				i += g.firstInFrom(i, lim, r)
				break
			}
			i++
		}
	}
	*c = g.head + i
	if *c >= g.size {
		*c -= g.size
	}
	return i
}

// leaving returns how many of the oldest entries are older than lim ticks
// before r. Usually the entries leave the window about as fast as new ones
// join, one or none at a time: it steps over a few before searching.
func (g *eventLog) leaving(lim uint32, r int64) uint32 {
	for i := range uint32(cursorSteps) {
		if i == g.n || g.age(i, r) < lim {
			return i
		}
	}
	return cursorSteps + g.firstInFrom(cursorSteps, lim, r)
}

// firstInFrom is firstIn among the entries from index from on, whose first
// is outside the window: it returns how many more are.
func (g *eventLog) firstInFrom(from, lim uint32, r int64) uint32 {
	lo, hi := from, g.n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if g.age(mid, r) >= lim {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - from
}

// cursor returns where policy i of t keeps its cursor in g, or nil. A log
// whose ring is on the heap has its inline slots free but, in a wide log,
// the first, the running total: they hold the cursors of the policies with
// the widest spans after the longest window's (tier.cursors), the widest in
// slot 1, free in either form.
func (g *eventLog) cursor(t *tier, i int) *uint32 {
	slot := t.cursors[i]
	if slot < 0 || g.ring == &g.inline[0] || slot == 0 && g.wide {
		return nil
	}
	if slot == 0 {
		g.state &^= cached // the cursor takes the cache's slot
	}
	return &g.inline[slot]
}

// first returns where policy i of t's window starts in the log, whose
// entries are newer than lim ticks before r: from its cursor, when it has one.
func (g *eventLog) first(t *tier, i int, lim uint32, r int64) uint32 {
	if c := g.cursor(t, i); c != nil {
		return g.firstFrom(c, lim, r, t.spans[i])
	}
	return g.firstIn(lim, r, t.spans[i])
}

// drop forgets the oldest k entries and gives memory back once the ring is
// mostly empty.
func (g *eventLog) drop(k uint32) {
	if k > 0 {
		g.forgetRefusal()
	}
	if k == g.n {
		g.head, g.n = 0, 0
	} else {
		g.head += k
		if g.head >= g.size {
			g.head -= g.size
		}
		g.n -= k
	}
	if g.size > 2 && g.n <= g.size/4 {
		g.resize(2 * g.n) // room to double before the next shrink
	}
	if k > 0 {
		g.recache()
	}
}

// push records weight k at tick r, that of the instant decided at: one
// entry, growing the ring (up to bound entries, or what the entries need if
// that is more), or none when a wide log's newest entry has tick r. An
// empty log takes its form here: wide under WithResolution (res) or for a
// weight above 1, else narrow; a narrow log that gets such a weight is
// widened first.
func (g *eventLog) push(r int64, k uint32, bound int, res bool) {
	t := uint32(r)
	switch {
	case g.n == 0:
		g.reform(res || k > 1)
	case k > 1 && !g.wide:
		g.widen(bound)
	}
	if g.wide {
		g.pushCounted(t, k, bound)
		return
	}
	if g.n == g.size {
		g.resize(min(max(2*g.size, 1), max(uint32(bound), g.n+1)))
	}
	*g.slot(g.n, 0) = t
	g.n++
	if g.n == 1 {
		g.recache()
	}
}

// pushCounted is push into a wide log: weight k joins the newest entry
// when it has tick t, else a new entry that starts at the running total.
func (g *eventLog) pushCounted(t, k uint32, bound int) {
	total := g.inline[0]
	g.inline[0] += k
	if g.n > 0 && g.tick(g.n-1) == t {
		return
	}
	if g.n == g.size {
		g.resize(min(max(2*g.size, 1), max(uint32(bound), g.n+1)))
	}
	*g.slot(g.n, 0) = t
	*g.slot(g.n, 1) = total
	g.n++
}

// reform gives an empty log the form wide or narrow, keeping its heap ring's
// memory for entries of the new width.
func (g *eventLog) reform(wide bool) {
	if g.wide == wide {
		return
	}
	old := g.width()
	g.wide, g.head, g.inline = wide, 0, [2]uint32{}
	g.state &^= cached
	if g.ring == &g.inline[0] || g.size*old < g.width() {
		g.ring, g.size = nil, 0 // the inline slots hold no pairs
		return
	}
	g.size = g.size * old / g.width()
}

// widen turns a narrow log into a wide one holding the same events: each
// run of entries of one tick becomes one pair. It costs O(n), once per
// narrow log that meets a weight above 1.
func (g *eventLog) widen(bound int) {
	runs := uint32(1)
	for i := uint32(1); i < g.n; i++ {
		if g.tick(i) != g.tick(i-1) {
			runs++
		}
	}
	ring := grown(min(max(2*runs, runs+1), max(uint32(bound), runs+1)), 2)
	m := uint32(0)
	for i := range g.n {
		if t := g.tick(i); i == 0 || t != ring[2*(m-1)] {
			ring[2*m], ring[2*m+1] = t, i
			m++
		}
	}
	g.inline = [2]uint32{g.n, 0}
	g.ring, g.size, g.head, g.n, g.wide = &ring[0], uint32(len(ring))/2, 0, m, true
	g.state &^= cached
}

// grown returns a zeroed heap ring of at least c entries of wd slots, taking
// the whole size class it is allocated in.
func grown(c, wd uint32) []uint32 {
	ring := append([]uint32(nil), make([]uint32, c*wd)...)
	return ring[:cap(ring)/int(wd)*int(wd)]
}

// resize moves the entries to a ring of at least c entries, or to the inline
// slots when c fits there (narrow logs only). The heap ring takes the whole
// size class it is allocated in. Only a heap ring ever moves to the inline
// slots, so source and destination never overlap.
func (g *eventLog) resize(c uint32) {
	wd := g.width()
	var ring []uint32
	switch {
	case wd == 1 && c <= uint32(len(g.inline)):
		ring = g.inline[:]
	case c == 0:
		g.ring, g.size, g.head = nil, 0, 0
		g.state &^= cached
		return
	default:
		ring = grown(c, wd)
	}
	if g.n > 0 {
		// Two copies: from the head to the ring's end, then the wrapped part.
		old := unsafe.Slice(g.ring, g.size*wd)
		tail := min(g.n, g.size-g.head)
		m := copy(ring, old[g.head*wd:(g.head+tail)*wd])
		copy(ring[m:], old[:(g.n-tail)*wd])
	}
	g.ring, g.size, g.head = &ring[0], uint32(len(ring))/wd, 0
	if g.ring == &g.inline[0] {
		g.state &^= cached // the slot holds an entry now
	}
}

// remove takes the k entries from index i out of the log, moving the
// fewer of the entries before them and after them to close the gap.
func (g *eventLog) remove(i, k uint32) {
	g.forgetRefusal()
	wd := g.width()
	if i < g.n-i-k { // the older side is the shorter: move it towards the newest
		for j := i; j > 0; j-- {
			for w := range wd {
				*g.slot(j-1+k, w) = *g.slot(j-1, w)
			}
		}
		g.head += k
		if g.head >= g.size {
			g.head -= g.size
		}
	} else {
		for j := i + k; j < g.n; j++ {
			for w := range wd {
				*g.slot(j-k, w) = *g.slot(j, w)
			}
		}
	}
	g.n -= k
	g.drop(0)
	if i == 0 {
		g.recache()
	}
}

// unpushCounted takes weight k from entry i of a wide log: the running
// totals of the entries after it fall by k, and the entry goes when nothing
// is left of it.
func (g *eventLog) unpushCounted(i, k uint32) {
	g.forgetRefusal()
	for j := i + 1; j < g.n; j++ {
		*g.slot(j, 1) -= k
	}
	g.inline[0] -= k
	if g.weight(i) == 0 {
		g.remove(i, 1)
	}
}

// settle moves the log to instant now and drops the entries that have left
// the window. It returns the instant to decide at: now, unless now is
// before the newest instant already decided at for this key (a clock
// stepped back, or the caller read the clock before another caller took the
// key's lock), in which case the log is decided at that instant, so that
// each key's instants never run backwards.
//
// Dropping costs O(1) when the whole window has passed since the key was
// last decided, and a binary search otherwise: never a walk over the events.
func (g *eventLog) settle(now, window int64, s *scale) int64 {
	now, _ = g.settleTicks(now, window, 0, s)
	return now
}

// settleFor is settle at the longest window of t, the tier deciding, and
// also returns the reference tick of the instant decided at, s.ceil(now),
// which settling works out anyway: a decision needs no division of its own
// for it, nor for the window's start when the window is whole ticks.
func (g *eventLog) settleFor(now int64, t *tier) (int64, int64) {
	return g.settleTicks(now, t.longest, t.longTicks, &t.scale)
}

// settleTicks is settle for a window of k whole ticks (ageBound), and
// returns the reference tick too.
func (g *eventLog) settleTicks(now, window int64, k uint32, s *scale) (int64, int64) {
	now, r, gone := g.leavingAt(now, window, k, s)
	g.settleTo(now, gone)
	return now, r
}

// leavingAt is settleTicks without its changes: it returns the instant to
// decide at, its reference tick, and how many of the oldest entries have
// left the window there, which settleTo then drops.
func (g *eventLog) leavingAt(now, window int64, k uint32, s *scale) (int64, int64, uint32) {
	now = max(now, g.last)
	r := s.ceil(now)
	switch {
	case g.n == 0:
		return now, r, 0
	case now-g.last >= window+s.unit:
		return now, r, g.n // even the newest entry, rounded up, is out
	}
	lim := ageBound(now, window, r, k, s)
	if g.age(0, r) < lim {
		return now, r, 0
	}
	return now, r, g.leaving(lim, r)
}

// settleTo moves the log to instant now, which leavingAt returned, and drops
// the gone oldest entries it counted.
func (g *eventLog) settleTo(now int64, gone uint32) {
	if now != g.last {
		g.forgetRefusal() // it stands for the key's instant when it was published
		g.last = now
	}
	if gone > 0 {
		g.drop(gone)
	}
}
