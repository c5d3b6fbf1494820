package keyrate

import (
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
// again. Locks nest one way only: a bucket of the map, then a log.
type keyMap struct {
	m       *xsync.MapOf[string, *eventLog]
	size    atomic.Int64 // keys tracked, counting inserts under way
	maxKeys int64        // 0: unbounded
	floor   atomic.Int64

	beforeCreate func() // tests: runs between a lookup that missed and the insert
}

func newKeyMap(maxKeys int) *keyMap {
	return &keyMap{m: xsync.NewMapOf[string, *eventLog](), maxKeys: int64(maxKeys)}
}

// load returns the key's log, or nil when the key is not tracked.
func (k *keyMap) load(key string) *eventLog {
	g, _ := k.m.Load(key)
	return g
}

// create returns the key's log, creating it when absent. It returns nil when
// the key is absent and the map already holds maxKeys keys.
func (k *keyMap) create(key string) *eventLog {
	if k.beforeCreate != nil {
		k.beforeCreate()
	}
	g, _ := k.m.LoadOrTryCompute(key, func() (*eventLog, bool) {
		if !k.reserve() {
			return nil, true // full: store nothing
		}
		return newEventLog(k.floor.Load()), false
	})
	return g
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

// full reports whether an untracked key would be refused.
func (k *keyMap) full() bool {
	return k.maxKeys > 0 && k.size.Load() >= k.maxKeys
}

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
		idle := !g.dead && g.idle(now, retention(g))
		g.mu.Unlock()
		if idle && k.removeIf(key, g, func(g *eventLog) bool {
			if !g.idle(now, retention(g)) {
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
		old.dead = removed
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
