package keyrate

import (
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// keyMap maps keys to their logs on xsync.MapOf: lookups of tracked keys
// take no lock, inserts and deletes lock one bucket of the table, never the
// whole map, and each log has a mutex of its own, so a hot key serialises
// only its own callers.
//
// What keyMap adds to the map is ours:
//   - the WithMaxKeys bound, exact: an insert reserves its place in the count
//     with a compare-and-swap that never takes the count past the bound, even
//     for a moment, so no two inserts can both take the last place.
//   - making room when the bound is reached: the least recently decided keys
//     go, events and all, a batch at a time (makeRoom), unless
//     WithRefuseNewKeys refuses the new key instead.
//   - the eviction floor: the newest instant at which a log was evicted.
//     New logs start there, so that a clock moved backwards cannot re-admit
//     events an evicted log was still counting. Eviction raises it and
//     creation reads it inside xsync's compute for the key, under the one
//     bucket lock that orders every insert and delete of that key: a log
//     created after an eviction always sees the floor that eviction left.
//   - the janitor's walk, which evicts a key only while its log is idle.
//
// A log leaves the map marked dead, under its own mutex; lock-free lookups
// may still hand it out, and whoever then locks it sees the mark and looks
// again. Locks nest one way only: makeRoom's mutex, a bucket of the map,
// then a log; no one holding a log waits for either of the others.
type keyMap struct {
	m       *xsync.MapOf[string, *eventLog]
	size    atomic.Int64 // keys tracked, counting inserts under way
	maxKeys int64        // 0: unbounded
	refuse  bool         // WithRefuseNewKeys: at the bound, refuse new keys rather than make room
	counts  bool         // the limiter has calendar policies: every log has room for their counts
	floor   atomic.Int64

	room   sync.Mutex // held by the one goroutine making room
	oldest oldestKeys // makeRoom's scratch, kept between batches; guarded by room
}

// testHookCreate, when set, runs at the start of every create, between a
// lookup that missed and the insert, so that a test can force another
// caller's insert and an eviction into that gap. Only tests set it.
var testHookCreate func()

func newKeyMap(maxKeys int, refuse bool) *keyMap {
	return &keyMap{m: xsync.NewMapOf[string, *eventLog](), maxKeys: int64(maxKeys), refuse: refuse}
}

// load returns the key's log, or nil when the key is not tracked.
func (k *keyMap) load(key string) *eventLog {
	g, _ := k.m.Load(key)
	return g
}

// create returns the key's log, creating it when absent; fresh reports that
// this call created it, and then the caller holds its mutex. A log is
// created locked so that nothing looks at it before its first decision: to
// makeRoom, a log not yet decided at would look like the least recently
// decided of all.
//
// When the key is absent and the map already holds maxKeys keys, create
// makes room and tries again, or, under WithRefuseNewKeys or when no key
// may be evicted (makeRoom), returns nil.
func (k *keyMap) create(key string) (g *eventLog, fresh bool) {
	if testHookCreate != nil {
		testHookCreate()
	}
	for {
		g, loaded := k.m.LoadOrTryCompute(key, func() (*eventLog, bool) {
			if !k.reserve() {
				return nil, true // full: store nothing
			}
			g := k.newLog(k.floor.Load())
			g.mu.Lock()
			return g, false
		})
		if g != nil || k.refuse || !k.makeRoom() {
			return g, g != nil && !loaded
		}
		// Then race the other inserts for the room made.
	}
}

// newLog returns a log that starts at floor, with room for calendar counts
// when the limiter has calendar policies.
func (k *keyMap) newLog(floor int64) *eventLog {
	if k.counts {
		return newCalendarLog(floor)
	}
	return newEventLog(floor)
}

// reserve counts one more key, unless the map already holds maxKeys.
func (k *keyMap) reserve() bool {
	if k.maxKeys == 0 {
		k.size.Add(1)
		return true
	}
	for {
		n := k.size.Load()
		if n >= k.maxKeys {
			return false
		}
		if k.size.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// atBound reports whether the map holds maxKeys keys.
func (k *keyMap) atBound() bool {
	return k.maxKeys > 0 && k.size.Load() >= k.maxKeys
}

// full reports whether an untracked key would be refused: the map is at its
// bound and refuses new keys rather than make room.
func (k *keyMap) full() bool { return k.refuse && k.atBound() }

func (k *keyMap) len() int { return int(k.size.Load()) }

// remove deletes key and marks its log dead, whatever the log holds.
func (k *keyMap) remove(key string) {
	k.removeIf(key, nil, func(*eventLog) bool { return true })
}

// evictIdle walks the map and evicts every key whose log holds no event in
// its window at now, raising the floor to the newest instant each was decided
// at. retention(g), called with g's mutex held, is the tier whose longest
// window g keeps its events for.
// It returns how many keys it evicted. Each log is looked at under its own
// mutex first, so that a busy key costs the walk no map lock.
func (k *keyMap) evictIdle(now int64, retention func(*eventLog) *tier) int {
	evicted := 0
	k.m.Range(func(key string, g *eventLog) bool {
		g.mu.Lock()
		idle := !g.is(dead) && !g.is(pinned) && g.idle(now, retention(g))
		g.mu.Unlock()
		if idle && k.removeIf(key, g, func(g *eventLog) bool {
			if g.is(pinned) || !g.idle(now, retention(g)) {
				return false // an event arrived since the look above
			}
			k.raiseFloor(g.last) // idle moved last to at least now
			return true
		}) {
			evicted++
		}
		return true
	})
	return evicted
}

// removeIf deletes key when it still maps to g (or to any log, when g is nil)
// and drop, called with the log's mutex held, approves. It marks the log dead
// before the key leaves the map, and reports whether it removed the key.
func (k *keyMap) removeIf(key string, g *eventLog, drop func(*eventLog) bool) bool {
	removed := false
	k.m.Compute(key, func(old *eventLog, loaded bool) (*eventLog, bool) {
		if !loaded || g != nil && old != g {
			return old, !loaded // absent: nothing to delete; replaced: keep it
		}
		old.mu.Lock()
		removed = drop(old)
		if removed {
			old.state |= dead
			old.forgetRefusal() // a refusal read without the lock would not see the mark
		}
		old.mu.Unlock()
		return old, removed
	})
	if removed {
		k.size.Add(-1)
	}
	return removed
}

// raiseFloor moves the floor up to t, never down.
func (k *keyMap) raiseFloor(t int64) {
	for {
		f := k.floor.Load()
		if t <= f || k.floor.CompareAndSwap(f, t) {
			return
		}
	}
}

// roomShare is the share of the bound that makeRoom frees at once: each
// batch walks the map once, and buys maxKeys/roomShare inserts.
const roomShare = 16

// makeRoom evicts the least recently decided keys, maxKeys/roomShare of
// them (at least one), whatever events they hold. It reports false when
// the map is at its bound with no key it may evict: every log is pinned by
// a TakeAll that created it (see TakeAll), so that no room can be made. Every key it evicts was
// last decided no later than every key it keeps, so only the keys idle the
// longest ever lose events to the bound.
//
// One goroutine makes room at a time; the others wait for it, find the map
// below its bound and go back to their inserts. It walks the map once,
// reading when each key was last decided under the key's lock and keeping
// the least recent in a heap, then evicts those. A key decided since the
// walk has moved past the newest instant in the heap and stays. Each
// eviction raises the floor, as the janitor's do, so that a clock stepped
// back cannot decide a key's next log before its last one.
//
// The walk's cost is reading every log, one cache miss each: a batch took
// 10 to 25 ms at 100,000 keys and 0.25 to 0.85 s at 1,000,000 on a busy
// 2-core machine (BenchmarkMakeRoom); a new key's Allow on a full map took
// 2.5 µs and 5 to 10 µs, amortised (BenchmarkFullMapInsert). New keys wait
// while a batch runs; a tracked key waits at most for the walk's look at
// its log.
func (k *keyMap) makeRoom() bool {
	k.room.Lock()
	defer k.room.Unlock()
	if !k.atBound() {
		return true // made while this call waited
	}
	h := &k.oldest
	h.reset(max(int(k.maxKeys/roomShare), 1))
	k.m.Range(func(key string, g *eventLog) bool {
		g.mu.Lock()
		last, gone := g.last, g.state&(dead|pinned) != 0
		g.mu.Unlock()
		if !gone {
			h.offer(candidate{last, key, g})
		}
		return true
	})
	if len(h.keys) == 0 {
		return false
	}
	cutoff := h.keys[0].last
	for i, c := range h.keys {
		k.removeIf(c.key, c.g, func(g *eventLog) bool {
			if g.last > cutoff || g.is(pinned) {
				return false // decided since the walk
			}
			k.raiseFloor(g.last)
			return true
		})
		h.keys[i] = candidate{} // the scratch holds no key past its batch
	}
	return true
}

// candidate is a key makeRoom may evict, and when it was last decided.
type candidate struct {
	last int64
	key  string
	g    *eventLog
}

// oldestKeys keeps the n least recently decided keys offered to it: a
// max-heap on last, so that the newest of them is the one to displace.
// Offering it every key costs O(log n) for each that enters the heap, and
// O(1) for the rest, which are most once the heap has filled.
type oldestKeys struct {
	n    int
	keys []candidate
}

// reset empties the heap and sets how many keys it keeps.
func (h *oldestKeys) reset(n int) {
	h.n, h.keys = n, h.keys[:0]
}

// offer keeps c when it is among the n least recent seen so far. Of keys
// decided at one instant, which stay is arbitrary.
func (h *oldestKeys) offer(c candidate) {
	switch {
	case len(h.keys) < h.n:
		h.keys = append(h.keys, c)
		h.up(len(h.keys) - 1)
	case c.last < h.keys[0].last:
		h.keys[0] = c
		h.down(0)
	}
}

func (h *oldestKeys) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if h.keys[parent].last >= h.keys[i].last {
			return
		}
		h.keys[parent], h.keys[i] = h.keys[i], h.keys[parent]
		i = parent
	}
}

func (h *oldestKeys) down(i int) {
	for {
		largest := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h.keys) && h.keys[c].last > h.keys[largest].last {
				largest = c
			}
		}
		if largest == i {
			return
		}
		h.keys[i], h.keys[largest] = h.keys[largest], h.keys[i]
		i = largest
	}
}
