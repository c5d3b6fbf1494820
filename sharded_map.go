package keyrate

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
)

// keyMap maps keys to their logs: a hash table of 64-byte buckets, each a
// lock, a word of slot tags and five slots pointing straight at logs, with
// overflow buckets chained behind. Each log holds its own key, so finding a
// tracked key touches the bucket and then the log it was about to lock
// anyway; a map holding pointers to entries that point to logs (xsync.MapOf,
// a Go map of pointers) costs one more dependent cache miss per lookup on a
// large key set. BenchmarkShardCmp in shardcmp_test.go measures this map
// against xsync.MapOf and against a hand-sharded map.
//
// Lookups take no lock: they read the current table, the tags and the slots
// with atomic loads. Inserts and deletes lock the key's bucket chain, never
// the whole map, so distinct keys rarely contend and a hot key serialises
// only its own callers, on its log's mutex.
//
// The table doubles when it passes three quarters full, and the janitor
// halves it when it falls below an eighth, so memory follows the live keys.
// A resize locks one bucket chain at a time while it copies; writers that
// meet a table being resized wait for the new one, readers go on reading the
// old one, which stays whole.
//
// The map keeps its own count of keys so that Len is O(1) and the WithMaxKeys
// bound is enforced exactly: an insert reserves its place in the count with a
// compare-and-swap that never takes it past the bound, even for a moment, so
// neither Len nor another insert ever sees a key that is not there.
type keyMap struct {
	table   atomic.Pointer[mapTable]
	seed    maphash.Seed
	size    atomic.Int64
	maxKeys int64      // 0: unbounded
	resize  sync.Mutex // held for the whole of a resize

	beforeCreate func() // tests: runs between a lookup that missed and the insert
}

const (
	slotsPerBucket = 5
	minBuckets     = 32
)

type mapTable struct {
	buckets  []mapBucket
	mask     uint64
	resizing atomic.Bool // set once a resize starts; each chain is read-only once copied
}

// mapBucket is one cache line. In a chain only the first bucket's mutex is
// used: it guards every write to the chain.
type mapBucket struct {
	mu    sync.Mutex
	tags  atomic.Uint64 // byte i is the tag of slots[i], 0 when the slot is empty
	slots [slotsPerBucket]atomic.Pointer[eventLog]
	next  atomic.Pointer[mapBucket]
}

func newKeyMap(maxKeys int) *keyMap {
	k := &keyMap{seed: maphash.MakeSeed(), maxKeys: int64(maxKeys)}
	k.table.Store(newMapTable(minBuckets))
	return k
}

func newMapTable(buckets int) *mapTable {
	return &mapTable{buckets: make([]mapBucket, buckets), mask: uint64(buckets - 1)}
}

func (k *keyMap) hash(key string) uint64 { return maphash.String(k.seed, key) }

// tagOf is the byte a slot holding a key with hash h is tagged with: the top
// bits of the hash (the low ones pick the bucket), never 0.
func tagOf(h uint64) uint64 { return h>>56 | 0x80 }

const lowBytes, highBits = 0x0101010101010101, 0x8080808080808080

// matches returns a word with the high bit set in byte i when byte i of tags
// may equal tag. It can report a byte that differs (the word trick borrows
// across bytes), so the caller compares keys; it never reports an empty slot
// or one of the three unused bytes, whose high bit is clear while every
// tag's is set.
func matches(tags, tag uint64) uint64 {
	x := tags ^ tag*lowBytes
	return (x - lowBytes) &^ x & highBits
}

// load returns the key's log, or nil when the key is not tracked.
func (k *keyMap) load(key string) *eventLog {
	t := k.table.Load()
	h := k.hash(key)
	_, _, g := find(&t.buckets[h&t.mask], key, tagOf(h))
	return g
}

// lockChain locks the bucket chain key hashes to in the current table, first
// waiting out any resize, and returns the table and the chain's first bucket.
func (k *keyMap) lockChain(h uint64) (*mapTable, *mapBucket) {
	for {
		t := k.table.Load()
		root := &t.buckets[h&t.mask]
		root.mu.Lock()
		if !t.resizing.Load() {
			return t, root
		}
		root.mu.Unlock()
		k.resize.Lock() // the resizer holds it until the new table is in place
		k.resize.Unlock()
	}
}

// find returns the log holding key in the chain starting at root, with its
// bucket and slot, or a nil bucket and log. Lock-free readers call it as well
// as writers holding the chain's lock.
func find(root *mapBucket, key string, tag uint64) (*mapBucket, int, *eventLog) {
	for b := root; b != nil; b = b.next.Load() {
		for m := matches(b.tags.Load(), tag); m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m) >> 3
			if g := b.slots[i].Load(); g != nil && g.key == key {
				return b, i, g
			}
		}
	}
	return nil, 0, nil
}

// place puts g into the first empty slot of the chain starting at root,
// chaining a new bucket when every slot is taken. The slot is filled before
// its tag is set, so a reader that sees the tag finds the log. Called with
// the chain locked, or on a table no one else can see.
func place(root *mapBucket, g *eventLog, tag uint64) {
	b := root
	for {
		tags := b.tags.Load()
		for i := range slotsPerBucket {
			if tags>>(8*i)&0xff == 0 {
				b.slots[i].Store(g)
				b.tags.Store(tags | tag<<(8*i))
				return
			}
		}
		next := b.next.Load()
		if next == nil {
			next = new(mapBucket)
			next.slots[0].Store(g)
			next.tags.Store(tag)
			b.next.Store(next)
			return
		}
		b = next
	}
}

// loadOrCreate returns the key's log, creating it when absent to start at
// the instant floor holds. It returns nil when the key is absent and the map
// already holds maxKeys keys. The floor is read under the chain's lock, the
// lock eviction raises it under: read any earlier, a log evicted in between
// could leave a floor the new log never sees.
func (k *keyMap) loadOrCreate(key string, floor *atomic.Int64) *eventLog {
	if k.beforeCreate != nil {
		k.beforeCreate()
	}
	h := k.hash(key)
	tag := tagOf(h)
	t, root := k.lockChain(h)
	if _, _, g := find(root, key, tag); g != nil {
		root.mu.Unlock()
		return g
	}
	if !k.reserve() {
		root.mu.Unlock()
		return nil
	}
	g := newEventLog(key, floor.Load())
	place(root, g, tag)
	root.mu.Unlock()
	if n := k.size.Load(); n > int64(len(t.buckets))*slotsPerBucket*3/4 {
		k.resizeTo(t, 2*len(t.buckets))
	}
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

// removeIf deletes key when it still maps to g (or to anything, when g is
// nil) and drop approves, marking the log dead under its lock so that a
// caller holding it retries. drop runs with the log's mutex held. It reports
// whether the key was removed.
func (k *keyMap) removeIf(key string, g *eventLog, drop func(*eventLog) bool) bool {
	h := k.hash(key)
	_, root := k.lockChain(h)
	defer root.mu.Unlock()
	b, i, old := find(root, key, tagOf(h))
	if old == nil || g != nil && old != g {
		return false
	}
	old.mu.Lock()
	removed := drop(old)
	if removed {
		old.buf = nil
	}
	old.mu.Unlock()
	if removed {
		b.tags.Store(b.tags.Load() &^ (0xff << (8 * i)))
		b.slots[i].Store(nil)
		k.size.Add(-1)
	}
	return removed
}

// each calls f for every tracked key's log. It locks one bucket chain at a
// time, and only while copying that chain's logs out, so f may remove keys.
func (k *keyMap) each(f func(g *eventLog)) {
	t := k.table.Load()
	var chain []*eventLog
	for i := range t.buckets {
		root := &t.buckets[i]
		chain = chain[:0]
		root.mu.Lock()
		for b := root; b != nil; b = b.next.Load() {
			for s := range b.slots {
				if g := b.slots[s].Load(); g != nil {
					chain = append(chain, g)
				}
			}
		}
		root.mu.Unlock()
		for _, g := range chain {
			f(g)
		}
	}
}

// shrink halves the table, as often as it takes, while it is less than an
// eighth full, so that a table grown by a burst of keys gives its memory
// back once the janitor has evicted them.
func (k *keyMap) shrink() {
	t := k.table.Load()
	n := len(t.buckets)
	for n > minBuckets && k.size.Load() < int64(n)*slotsPerBucket/8 {
		n /= 2
	}
	if n < len(t.buckets) {
		k.resizeTo(t, n)
	}
}

// resizeTo replaces table t with one of n buckets, unless another resize got
// there first. Writers wait for it (lockChain); readers keep reading t, which
// holds every key until the new table replaces it.
func (k *keyMap) resizeTo(t *mapTable, n int) {
	k.resize.Lock()
	defer k.resize.Unlock()
	if k.table.Load() != t {
		return
	}
	nt := newMapTable(n)
	t.resizing.Store(true)
	for i := range t.buckets {
		root := &t.buckets[i]
		root.mu.Lock() // waits for a write already under way in this chain
		for b := root; b != nil; b = b.next.Load() {
			for s := range b.slots {
				if g := b.slots[s].Load(); g != nil {
					h := k.hash(g.key)
					place(&nt.buckets[h&nt.mask], g, tagOf(h))
				}
			}
		}
		root.mu.Unlock()
	}
	k.table.Store(nt)
}

func (k *keyMap) len() int { return int(k.size.Load()) }
