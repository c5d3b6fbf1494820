package benchmarks

import "sync/atomic"

// The admit path calls every key at most PerKey times, after one event
// admitted while preparing it, so that no key ever goes past its budget
// however many calls the benchmark runner asks for. The workloads keep their
// shape (one hot key, 10,000 or 1,000,000 keys in turn, a Zipf stream) and
// move on to fresh keys, prepared with the timer stopped, where an old key
// would have run out: the types in this file hand those keys out.

// keyStream hands a serial admit workload its keys one chunk at a time; the
// workload calls Allow on every key of a chunk, in order. next prepares the
// keys it hands out for the first time (one Allow each), so callers stop the
// benchmark timer around it.
type keyStream interface {
	next() []string
}

// freshKeys hands out keys never handed out before by the same freshKeys:
// Key(0), Key(1), ... A workload builds one per limiter.
type freshKeys struct{ n int }

func (f *freshKeys) take(k int) []string {
	keys := KeyRange(f.n, f.n+k)
	f.n += k
	return keys
}

// hotChunk is how many hot keys one chunk of hotStream holds.
const hotChunk = 1024

// hotStream is the serial hot key on the admit path: one key called PerKey
// times in a row, then the next one.
type hotStream struct {
	l    Limiter
	keys freshKeys
	buf  []string
}

func newHotStream(l Limiter) *hotStream { return &hotStream{l: l} }

func (s *hotStream) next() []string {
	keys := s.keys.take(hotChunk)
	Admit.Prepare(s.l, keys)
	s.buf = s.buf[:0]
	for _, k := range keys {
		for range PerKey {
			s.buf = append(s.buf, k)
		}
	}
	return s.buf
}

// cycleStream cycles over a set of size keys, PerKey times, then over a
// fresh set of the same size: serial-1m on the admit path (a new set only
// after 99 million calls).
type cycleStream struct {
	l      Limiter
	size   int
	keys   freshKeys
	set    []string
	passes int
}

func newCycleStream(l Limiter, size int) *cycleStream { return &cycleStream{l: l, size: size} }

func (s *cycleStream) next() []string {
	if s.set == nil || s.passes == PerKey {
		s.set = s.keys.take(s.size)
		Admit.Prepare(s.l, s.set)
		s.passes = 0
	}
	s.passes++
	return s.set
}

// zipfKeyStream replays the Zipf stream of clients (zipfClients) on the admit
// path. A client is one key for PerKey of its calls, then a fresh key for
// the next PerKey: the popular clients keep their share of the calls and
// their keys stay hot for as long as each lasts, and no key runs out. Each
// chunk is one pass over the stream, with fresh keys for every client.
type zipfKeyStream struct {
	l       Limiter
	keys    freshKeys
	clients []int32
	calls   []int32 // per client: its calls so far in this pass
	current []int32 // per client: the number, in this pass, of its key now
	key     []int32 // per call: the number of its key in this pass
	buf     []string
}

func newZipfKeyStream(l Limiter) *zipfKeyStream {
	c := zipfClients()
	return &zipfKeyStream{
		l:       l,
		clients: c,
		calls:   make([]int32, ZipfKeys),
		current: make([]int32, ZipfKeys),
		key:     make([]int32, len(c)),
		buf:     make([]string, len(c)),
	}
}

func (s *zipfKeyStream) next() []string {
	clear(s.calls)
	fresh := int32(0)
	for i, c := range s.clients {
		if s.calls[c]%PerKey == 0 {
			s.current[c] = fresh
			fresh++
		}
		s.calls[c]++
		s.key[i] = s.current[c]
	}
	keys := s.keys.take(int(fresh))
	Admit.Prepare(s.l, keys)
	for i, k := range s.key {
		s.buf[i] = keys[k]
	}
	return s.buf
}

// partPool splits the items of a parallel workload (keys, requests) into
// disjoint parts of size items and hands them out, part after part, to the
// goroutines: a goroutine calls its part's items in a cycle and, on the
// admit path, takes the next part after PerKey passes. Were the pool too
// small, take would hand a part out again and its items would go past their
// budget: the admit check would then fail the benchmark rather than let it
// measure refusals.
type partPool struct {
	parts, size int
	taken       atomic.Int64
}

func newPartPool(items, size int) *partPool {
	return &partPool{parts: items / size, size: size}
}

// take returns the index of the first item of the next part.
func (p *partPool) take() int {
	return int(p.taken.Add(1)-1) % p.parts * p.size
}

// partCursor is one goroutine's place in a partPool: it hands out the
// indexes of its part's items in a cycle and takes the next part after
// passes cycles.
type partCursor struct {
	pool   *partPool
	size   int
	passes int
	first  int // index of the part's first item
	i      int // within the part
	pass   int
}

func (p *partPool) cursor(passes int) *partCursor {
	return &partCursor{pool: p, size: p.size, first: p.take(), passes: passes}
}

// next returns the index of the item for this goroutine's next call.
func (c *partCursor) next() int {
	x := c.first + c.i
	if c.i++; c.i == c.size {
		c.endPass()
	}
	return x
}

// endPass starts the next pass, over the next part after passes of them.
// It is kept out of line so that next, called on every call, inlines.
//
//go:noinline
func (c *partCursor) endPass() {
	c.i = 0
	if c.pass++; c.pass == c.passes {
		c.first, c.pass = c.pool.take(), 0
	}
}

// partsNeeded is how many parts of size items an admit run of n calls over
// procs goroutines can take: one per goroutine as it starts, and one more
// each time a goroutine is done with a part, which takes PerKey*size calls.
func partsNeeded(n, size, procs int) int {
	return n/(PerKey*size) + procs
}

// hotRelay keeps every goroutine of parallel-hot on one key at a time, the
// admit path's version of the hot key. A goroutine calls the current key at
// most share times and then moves the relay on, so no key gets more than
// procs*share <= PerKey calls. The current key is read, not written, on
// every call, and is moved on once per share calls.
type hotRelay struct {
	keys    []string
	share   int
	current atomic.Int64
}

// newHotRelay sizes the relay for n calls over procs goroutines: every move
// follows share calls of one goroutine on one key, so there are at most
// n/share moves.
func newHotRelay(l Limiter, n, procs int) *hotRelay {
	share := max(1, PerKey/procs)
	keys := (&freshKeys{}).take(n/share + 1)
	Admit.Prepare(l, keys)
	return &hotRelay{keys: keys, share: share}
}

// relayCursor is one goroutine's place in a hotRelay.
type relayCursor struct {
	r    *hotRelay
	at   int64
	used int
}

// key returns the key for this goroutine's next call.
func (c *relayCursor) key() (int64, string) {
	at := c.r.current.Load()
	if at != c.at {
		c.at, c.used = at, 0
	}
	return at, c.r.keys[int(at)%len(c.r.keys)]
}

// called records a call on key number at, and moves the relay on after
// this goroutine's share.
func (c *relayCursor) called(at int64) {
	if c.used++; c.used == c.r.share {
		c.r.current.CompareAndSwap(at, at+1)
	}
}
