package keyrate

import (
	"math/bits"
	"sync"
	"unsafe"
)

// eventLog is one key's sliding log: its admitted events, oldest first, in
// a ring buffer that grows by doubling up to what the longest window can
// hold and shrinks back as it empties.
//
// An entry is a 32-bit tick: the event's instant (nanoseconds since the
// limiter's base, from the monotonic clock) divided by the tier's tick and
// rounded up, kept modulo 2^32 (see scale). An exact log holds one entry per
// event, 4 bytes each. Under WithResolution an entry is a pair, its tick
// and the running total of weight before it, and every event of one tick
// shares it; the running total after the newest entry is then kept in
// inline[0], and the ring is always on the heap.
//
// Under several policies the log keeps the events of the longest window,
// which serve every shorter one: the events in a policy's window are the
// newest of them.
//
// The struct fills one 48-byte allocation, and an exact log keeps its first
// two events inline: such a key costs that allocation, its map entry and its
// key string, under 128 bytes in all (TestMemoryPerKey). The ring is held as
// a pointer to its first slot and a capacity rather than a slice, whose
// header would take 16 bytes more and push the struct into the next size
// class (measured: 110.9 B per key as it is, 126.9 B with a slice).
//
// Every field is guarded by mu. state holds two flags. dead marks a log that
// has left the map (evicted or Reset): a caller that finds it so retries
// with a fresh lookup. pinned marks a log that TakeAll created and has yet
// to decide: making room and the janitor leave it be (see TakeAll).
// tier is the id of the tier that last decided the key, whose longest window
// the janitor evicts it by; step names the tick its entries were written in.
type eventLog struct {
	mu     sync.Mutex
	last   int64   // newest instant this key was decided at; time never runs back past it
	ring   *uint32 // the ring's first slot: &inline[0], a heap array, or nil
	head   uint32  // index in the ring of the oldest entry
	n      uint32  // number of entries held
	size   uint32  // the ring's capacity, in entries
	tier   uint16
	step   uint8
	state  uint8 // dead, pinned
	inline [2]uint32
}

// The flags of eventLog.state.
const (
	dead   = 1 << iota // the log has left the map
	pinned             // TakeAll holds the log it created until it decides it
)

// is reports whether g has every flag of f. Called with mu held.
func (g *eventLog) is(f uint8) bool { return g.state&f == f }

func newEventLog(floor int64) *eventLog {
	return &eventLog{last: floor}
}

// width is the number of slots an entry takes: 2 under WithResolution.
func width(s *scale) uint32 {
	if s.wide() {
		return 2
	}
	return 1
}

// slot returns the slot of entry i (from the oldest) at word w of its width.
func (g *eventLog) slot(i, wd, w uint32) *uint32 {
	j := g.head + i
	if j >= g.size {
		j -= g.size
	}
	return (*uint32)(unsafe.Add(unsafe.Pointer(g.ring), 4*(j*wd+w)))
}

// tick returns the tick of entry i, 0 <= i < n.
func (g *eventLog) tick(i uint32, s *scale) uint32 { return *g.slot(i, width(s), 0) }

// age returns how many ticks entry i is older than reference tick r.
// Every held entry is at most r and less than 2^32 ticks older.
func (g *eventLog) age(i uint32, r int64, s *scale) uint32 { return uint32(r) - g.tick(i, s) }

// instant returns the instant entry i stands for, given reference tick r.
func (g *eventLog) instant(i uint32, r int64, s *scale) int64 {
	return s.instant(r - int64(g.age(i, r, s)))
}

// before returns the running total of weight before entry i (resolution).
func (g *eventLog) before(i uint32) uint32 { return *g.slot(i, 2, 1) }

// count returns the weight held from entry `from` to the newest.
func (g *eventLog) count(from uint32, s *scale) int {
	if !s.wide() {
		return int(g.n - from)
	}
	if from == g.n {
		return 0
	}
	return int(g.inline[0] - g.before(from))
}

// nth returns the entry that holds the k-th oldest event counted from entry
// `from`, 1 <= k <= count(from). An exact log holds one event per entry;
// under WithResolution it is a binary search on the running totals.
func (g *eventLog) nth(from uint32, k int, s *scale) uint32 {
	if !s.wide() {
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
func (g *eventLog) firstIn(lim uint32, r int64, span uint32, s *scale) uint32 {
	lo, hi := uint32(0), g.n
	if span < g.n {
		if g.age(g.n-span-1, r, s) >= lim {
			lo = g.n - span
		} else {
			hi = g.n - span - 1 // the window holds more than span (SetTier lowered a limit)
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if g.age(mid, r, s) >= lim {
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
func (g *eventLog) firstFrom(c *uint32, lim uint32, r int64, span uint32, s *scale) uint32 {
	i := *c - g.head // the cursor's index from the oldest entry
	if *c < g.head {
		i += g.size
	}
	if i > g.n || i > 0 && g.age(i-1, r, s) < lim {
		i = g.firstIn(lim, r, span, s)
	} else {
		for steps := 0; i < g.n && g.age(i, r, s) >= lim; steps++ {
			if steps == cursorSteps {
				i += g.firstInFrom(i, lim, r, s)
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
func (g *eventLog) leaving(lim uint32, r int64, s *scale) uint32 {
	for i := range uint32(cursorSteps) {
		if i == g.n || g.age(i, r, s) < lim {
			return i
		}
	}
	return cursorSteps + g.firstInFrom(cursorSteps, lim, r, s)
}

// firstInFrom is firstIn among the entries from index from on, whose first
// is outside the window: it returns how many more are.
func (g *eventLog) firstInFrom(from, lim uint32, r int64, s *scale) uint32 {
	lo, hi := from, g.n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if g.age(mid, r, s) >= lim {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - from
}

// cursor returns where policy i of t keeps its cursor in g, or nil. A log
// whose ring is on the heap has its inline slots free (but the first under
// WithResolution, the running total): they hold the cursors of the policies
// with the widest spans after the longest window's (tier.cursors).
func (g *eventLog) cursor(t *tier, i int) *uint32 {
	slot := t.cursors[i]
	if slot < 0 || g.ring == &g.inline[0] {
		return nil
	}
	return &g.inline[slot]
}

// first returns where policy i of t's window starts in the log, whose
// entries are newer than lim ticks before r: from its cursor, when it has one.
func (g *eventLog) first(t *tier, i int, lim uint32, r int64) uint32 {
	if c := g.cursor(t, i); c != nil {
		return g.firstFrom(c, lim, r, t.spans[i], &t.scale)
	}
	return g.firstIn(lim, r, t.spans[i], &t.scale)
}

// drop forgets the oldest k entries and gives memory back once the ring is
// mostly empty.
func (g *eventLog) drop(k uint32, s *scale) {
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
		g.resize(2*g.n, s) // room to double before the next shrink
	}
}

// push records weight k at tick r, that of the instant decided at: k
// entries in an exact log, growing the ring (up to bound entries, or what
// the events need if that is more); under WithResolution one entry, or none
// when the newest has tick r.
func (g *eventLog) push(r int64, k uint32, bound int, s *scale) {
	t := uint32(r)
	if s.wide() {
		g.pushCounted(t, k, bound, s)
		return
	}
	if need := g.n + k; need > g.size {
		g.resize(min(max(2*g.size, need), max(uint32(bound), need)), s)
	}
	for i := range k {
		*g.slot(g.n+i, 1, 0) = t
	}
	g.n += k
}

// pushCounted is push under WithResolution: weight k joins the newest entry
// when it has tick t, else a new entry that starts at the running total.
func (g *eventLog) pushCounted(t, k uint32, bound int, s *scale) {
	total := g.inline[0]
	g.inline[0] += k
	if g.n > 0 && g.tick(g.n-1, s) == t {
		return
	}
	if g.n == g.size {
		g.resize(min(max(2*g.size, 1), max(uint32(bound), g.n+1)), s)
	}
	*g.slot(g.n, 2, 0) = t
	*g.slot(g.n, 2, 1) = total
	g.n++
}

// resize moves the entries to a ring of at least c entries, or to the inline
// slots when c fits there (exact logs only). The heap ring takes the whole
// size class it is allocated in. Only a heap ring ever moves to the inline
// slots, so source and destination never overlap.
func (g *eventLog) resize(c uint32, s *scale) {
	wd := width(s)
	var ring []uint32
	switch {
	case wd == 1 && c <= uint32(len(g.inline)):
		ring = g.inline[:]
	case c == 0:
		g.ring, g.size, g.head = nil, 0, 0
		return
	default:
		ring = append([]uint32(nil), make([]uint32, c*wd)...)
		ring = ring[:cap(ring)/int(wd)*int(wd)]
	}
	if g.n > 0 {
		// Two copies: from the head to the ring's end, then the wrapped part.
		old := unsafe.Slice(g.ring, g.size*wd)
		tail := min(g.n, g.size-g.head)
		m := copy(ring, old[g.head*wd:(g.head+tail)*wd])
		copy(ring[m:], old[:(g.n-tail)*wd])
	}
	g.ring, g.size, g.head = &ring[0], uint32(len(ring))/wd, 0
}

// remove takes the k entries from index i out of the log, moving the
// fewer of the entries before them and after them to close the gap.
func (g *eventLog) remove(i, k uint32, s *scale) {
	wd := width(s)
	if i < g.n-i-k { // the older side is the shorter: move it towards the newest
		for j := i; j > 0; j-- {
			for w := range wd {
				*g.slot(j-1+k, wd, w) = *g.slot(j-1, wd, w)
			}
		}
		g.head += k
		if g.head >= g.size {
			g.head -= g.size
		}
	} else {
		for j := i + k; j < g.n; j++ {
			for w := range wd {
				*g.slot(j-k, wd, w) = *g.slot(j, wd, w)
			}
		}
	}
	g.n -= k
	g.drop(0, s)
}

// unpushCounted takes weight k from entry i under WithResolution: the
// running totals of the entries after it fall by k, and the entry goes
// when nothing is left of it.
func (g *eventLog) unpushCounted(i, k uint32, s *scale) {
	for j := i + 1; j < g.n; j++ {
		*g.slot(j, 2, 1) -= k
	}
	g.inline[0] -= k
	if g.count(i, s) == g.count(i+1, s) {
		g.remove(i, 1, s)
	}
}

// settle moves the log to instant now and drops the entries that have left
// the window at s's ticks. It returns the instant to decide at: now, unless
// now is before the newest instant already decided at for this key (a clock
// stepped back, or the caller read the clock before another caller took the
// key's lock), in which case the log is decided at that instant, so that
// each key's instants never run backwards.
//
// Dropping costs O(1) when the whole window has passed since the key was
// last decided, and a binary search otherwise: never a walk over the events.
func (g *eventLog) settle(now, window int64, s *scale) int64 {
	now = max(now, g.last)
	switch {
	case g.n == 0:
		g.step = s.step // an empty log takes the tier's ticks
	case g.step != s.step:
		g.rescale(now, window, s)
	case now-g.last >= window+s.unit:
		g.drop(g.n, s) // even the newest entry, rounded up, is out
	}
	g.last = now
	if g.n > 0 {
		r := s.ceil(now)
		lim := windowAge(now, window, r, s)
		if g.age(0, r, s) >= lim {
			g.drop(g.leaving(lim, r, s), s)
		}
	}
	return now
}

// rescale rewrites the entries of a log written in other ticks (its tier's
// longest window changed) in s's, keeping only those inside the window at
// now. It costs O(n), once per change of tick.
func (g *eventLog) rescale(now, window int64, s *scale) {
	old := scaleOf(unitOf(g.step), g.step)
	r := old.ceil(g.last)
	kept := uint32(0)
	for i := range g.n {
		if t := g.instant(i, r, &old); t > now-window {
			*g.slot(kept, 1, 0) = uint32(s.ceil(t))
			kept++
		}
	}
	g.n, g.step = kept, s.step
	g.drop(0, s)
}

// scale is how a tier's logs write instants as 32-bit ticks. An exact log
// counts in the finest tick of 1, 2 or 5 times a power of ten nanoseconds
// in which the tier's longest window spans fewer than maxTicks: 5ns for a
// 10s window, 50ns for a minute, 2µs for an hour, 50µs for a day. Every
// whole millisecond is then a whole tick. Under WithResolution a tick is
// the resolution.
//
// A log drops all its entries once the newest has left the longest window,
// so every entry it holds is less than two longest windows older than the
// instant it is read at: under 2^32 ticks. Ticks are therefore kept modulo
// 2^32 and read back by their age against the tick of that instant.
//
// An instant becomes the tick that contains it rounded up, the end of its
// tick: an event may count as up to one tick later than it happened, never
// earlier, so no window of the real instants ever holds more than the limit.
type scale struct {
	unit  int64 // nanoseconds per tick
	magic uint64
	shift uint8 // see quo
	// step names the tick in a log (eventLog.step): its place in the
	// series unitOf counts, or resolutionStep.
	step uint8
}

// wide reports whether an entry is a pair, a tick and a running total:
// under WithResolution.
func (s *scale) wide() bool { return s.step == resolutionStep }

// maxTicks bounds the ticks a tier's longest window may span (see scale).
const maxTicks = 1<<31 - 2

// newScale returns the scale of a tier whose longest window is longest
// nanoseconds, for WithResolution's res (0: off).
func newScale(longest, res int64) scale {
	if res > 0 {
		return scaleOf(res, resolutionStep)
	}
	step := uint8(0)
	for longest/unitOf(step) >= maxTicks {
		step++
	}
	return scaleOf(unitOf(step), step)
}

// resolutionStep is the step of a scale set by WithResolution.
const resolutionStep = 255

// unitOf returns the tick of a step of the series 1, 2, 5, 10, 20, 50, ...
// nanoseconds.
func unitOf(step uint8) int64 {
	unit := []int64{1, 2, 5}[step%3]
	for range step / 3 {
		unit *= 10
	}
	return unit
}

func scaleOf(unit int64, step uint8) scale {
	s := scale{unit: unit, step: step}
	if unit&(unit-1) == 0 {
		s.shift = uint8(bits.TrailingZeros64(uint64(unit)))
		return s
	}
	// Division by a constant as a multiplication (Granlund and Montgomery,
	// 1994, theorem 4.2): with l = ceil(log2 unit) and magic =
	// ceil(2^(62+l)/unit) < 2^63+1, n/unit is the high word of n*magic
	// shifted right by l-2, for every 0 <= n < 2^62. It takes 2.3ns against
	// 5.3ns for a DIV on the machines benchmarked here (go test -bench,
	// a chain of dependent divisions), and a decision makes two.
	l := uint(bits.Len64(uint64(unit) - 1))
	q, r := bits.Div64(1<<(l-2), 0, uint64(unit))
	if r != 0 {
		q++
	}
	s.magic, s.shift = q, uint8(l-2)
	return s
}

// quo returns n / unit for 0 <= n < 2^62.
func (s *scale) quo(n int64) int64 {
	if s.magic == 0 {
		return n >> s.shift
	}
	hi, _ := bits.Mul64(uint64(n), s.magic)
	return int64(hi >> s.shift)
}

// ceil returns the tick that ends at or after instant t >= 0.
func (s *scale) ceil(t int64) int64 { return s.quo(t + s.unit - 1) }

// floor returns the tick that ends at or before instant t.
func (s *scale) floor(t int64) int64 {
	if t < 0 {
		return -s.ceil(-t)
	}
	return s.quo(t)
}

// instant returns the instant tick k ends at.
func (s *scale) instant(k int64) int64 { return k * s.unit }
