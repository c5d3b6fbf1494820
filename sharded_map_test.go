package keyrate

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

func mapKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// checkMap fails unless m tracks exactly the keys in want, each mapping to a
// log that carries its key, and every bucket's tags agree with its slots.
func checkMap(t *testing.T, m *keyMap, want []string) {
	t.Helper()
	if m.len() != len(want) {
		t.Fatalf("len = %d, want %d", m.len(), len(want))
	}
	for _, k := range want {
		if g := m.load(k); g == nil || g.key != k {
			t.Fatalf("load(%q) = %v", k, g)
		}
	}
	seen := 0
	m.each(func(*eventLog) { seen++ })
	if seen != len(want) {
		t.Fatalf("each visited %d logs, want %d", seen, len(want))
	}
	tb := m.table.Load()
	for i := range tb.buckets {
		for b := &tb.buckets[i]; b != nil; b = b.next.Load() {
			tags := b.tags.Load()
			for s := range slotsPerBucket {
				tag, g := tags>>(8*s)&0xff, b.slots[s].Load()
				if (tag == 0) != (g == nil) {
					t.Fatalf("bucket %d slot %d: tag %#x, log %v", i, s, tag, g)
				}
			}
			if tags>>(8*slotsPerBucket) != 0 {
				t.Fatalf("bucket %d: tags %#x use bytes past the slots", i, tags)
			}
		}
	}
}

func TestKeyMapGrowsAndShrinks(t *testing.T) {
	m := newKeyMap(0)
	keys := mapKeys("k", 20_000)
	for _, k := range keys {
		if g := m.loadOrCreate(k, new(atomic.Int64)); g == nil || g.key != k {
			t.Fatalf("loadOrCreate(%q) = %v", k, g)
		}
	}
	checkMap(t, m, keys)
	grown := len(m.table.Load().buckets)
	if grown*slotsPerBucket*3/4 < len(keys) {
		t.Fatalf("%d buckets hold %d keys: past three quarters full", grown, len(keys))
	}
	// A second insert of a tracked key returns the same log.
	if a, b := m.load(keys[7]), m.loadOrCreate(keys[7], new(atomic.Int64)); a != b {
		t.Fatalf("loadOrCreate of a tracked key made a new log")
	}

	keep := keys[:50]
	for _, k := range keys[50:] {
		if !m.removeIf(k, nil, func(*eventLog) bool { return true }) {
			t.Fatalf("removeIf(%q) removed nothing", k)
		}
	}
	if m.load(keys[100]) != nil {
		t.Fatal("a removed key is still found")
	}
	m.shrink()
	if n := len(m.table.Load().buckets); n >= grown || n*slotsPerBucket/8 > len(keep) && n > minBuckets {
		t.Fatalf("after shrink: %d buckets (grown to %d) for %d keys", n, grown, len(keep))
	}
	checkMap(t, m, keep)

	// The emptied map takes keys again, reusing slots that deletes freed.
	for _, k := range keys[50:1000] {
		m.loadOrCreate(k, new(atomic.Int64))
	}
	checkMap(t, m, keys[:1000])
}

// TestKeyMapChains fills one bucket chain far past a bucket's five slots, by
// placing logs straight into a single-bucket table, and finds each of them.
func TestKeyMapChains(t *testing.T) {
	m := newKeyMap(0)
	m.table.Store(newMapTable(1))
	keys := mapKeys("c", 23)
	for _, k := range keys {
		m.loadOrCreate(k, new(atomic.Int64))
		m.table.Store(newMapTableFrom(m, 1)) // undo any growth: keep one chain
	}
	checkMap(t, m, keys)
	for _, k := range keys[3:20] {
		m.removeIf(k, nil, func(*eventLog) bool { return true })
	}
	checkMap(t, m, append(keys[:3:3], keys[20:]...))
}

// newMapTableFrom returns a table of n buckets holding m's logs.
func newMapTableFrom(m *keyMap, n int) *mapTable {
	nt := newMapTable(n)
	m.each(func(g *eventLog) {
		h := m.hash(g.key)
		place(&nt.buckets[h&nt.mask], g, tagOf(h))
	})
	return nt
}

func TestKeyMapRemoveIf(t *testing.T) {
	m := newKeyMap(0)
	g := m.loadOrCreate("a", new(atomic.Int64))
	if m.removeIf("a", &eventLog{}, func(*eventLog) bool { return true }) {
		t.Fatal("removed a key that maps to another log")
	}
	if m.removeIf("a", g, func(*eventLog) bool { return false }) {
		t.Fatal("removed a key that drop refused")
	}
	if m.removeIf("b", nil, func(*eventLog) bool { return true }) {
		t.Fatal("removed an absent key")
	}
	if !m.removeIf("a", g, func(*eventLog) bool { return true }) || g.buf != nil {
		t.Fatal("removeIf did not remove the key and mark its log dead")
	}
	checkMap(t, m, nil)
}

// TestKeyMapConcurrent inserts, finds and removes keys from several
// goroutines while the table grows, then checks the map holds exactly what
// was left: no key lost, none doubled, and a tracked key always found.
func TestKeyMapConcurrent(t *testing.T) {
	m := newKeyMap(0)
	stable := mapKeys("stable", 100)
	logs := make([]*eventLog, len(stable))
	for i, k := range stable {
		logs[i] = m.loadOrCreate(k, new(atomic.Int64))
	}
	const writers, perWriter = 4, 5000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, writers+1)
	// A reader: the stable keys must be found, as the same log, throughout.
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, k := range stable {
				if g := m.load(k); g != logs[i] {
					errs <- fmt.Errorf("load(%q) = %p during growth, want %p", k, g, logs[i])
					return
				}
			}
		}
	})
	var writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() {
			keys := mapKeys(fmt.Sprintf("w%d", w), perWriter)
			for i, k := range keys {
				if g := m.loadOrCreate(k, new(atomic.Int64)); g == nil || g.key != k {
					errs <- fmt.Errorf("loadOrCreate(%q) = %v", k, g)
					return
				}
				if i%2 == 1 { // remove every other key once inserted
					if !m.removeIf(keys[i-1], nil, func(*eventLog) bool { return true }) {
						errs <- fmt.Errorf("removeIf(%q) removed nothing", keys[i-1])
						return
					}
				}
			}
		})
	}
	writing.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := append([]string(nil), stable...)
	for w := range writers {
		keys := mapKeys(fmt.Sprintf("w%d", w), perWriter)
		for i := 1; i < len(keys); i += 2 {
			want = append(want, keys[i])
		}
	}
	checkMap(t, m, want)
}

func TestKeyMapMaxKeys(t *testing.T) {
	m := newKeyMap(10)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for _, k := range mapKeys(fmt.Sprintf("w%d", w), 100) {
				m.loadOrCreate(k, new(atomic.Int64))
			}
		})
	}
	wg.Wait()
	if m.len() != 10 || !m.full() {
		t.Fatalf("len = %d, full = %v; want exactly the bound of 10", m.len(), m.full())
	}
	tracked := 0
	m.each(func(*eventLog) { tracked++ })
	if tracked != 10 {
		t.Fatalf("the map holds %d logs, want 10", tracked)
	}
}

func TestBucketIsOneCacheLine(t *testing.T) {
	if size := unsafe.Sizeof(mapBucket{}); size != 64 {
		t.Fatalf("mapBucket is %d bytes, want 64", size)
	}
}

func TestMatches(t *testing.T) {
	const tag = 0x9c
	tags := uint64(0x9c)<<8 | uint64(0x81)<<16 | uint64(0x9c)<<32 // slots 1, 2, 4 filled
	m := matches(tags, tag)
	for i := range 8 {
		flagged := m>>(8*i+7)&1 == 1
		if want := i == 1 || i == 4; flagged != want {
			t.Errorf("byte %d: flagged %v, want %v (matches = %#x)", i, flagged, want, m)
		}
	}
}

// TestKeyMapCountNeverPassesBound floods a full map with new keys from
// several goroutines. A refused insert must leave no trace: Len never reports
// more than the bound, and once the tracked key is removed, a new key is
// admitted even while the flood goes on.
func TestKeyMapCountNeverPassesBound(t *testing.T) {
	for trial := range 2000 {
		m := newKeyMap(1)
		m.loadOrCreate("a", new(atomic.Int64))
		var stop atomic.Bool
		var flood sync.WaitGroup
		admitted := make(chan string, 4)
		for w := range 4 {
			flood.Go(func() {
				for i := 0; !stop.Load(); i++ {
					if k := fmt.Sprint(w, "-", i); m.loadOrCreate(k, new(atomic.Int64)) != nil {
						admitted <- k
						return
					}
				}
			})
		}
		for range 2000 {
			if n := m.len(); n > 1 {
				stop.Store(true)
				flood.Wait()
				t.Fatalf("trial %d: len = %d under WithMaxKeys(1)", trial, n)
			}
		}
		m.removeIf("a", nil, func(*eventLog) bool { return true })
		q := m.loadOrCreate("q", new(atomic.Int64))
		stop.Store(true)
		flood.Wait()
		close(admitted)
		// Whoever took the freed place stays tracked: either q, or a flooder
		// that got in between the remove and q's insert.
		var winners []string
		for k := range admitted {
			winners = append(winners, k)
		}
		if q != nil {
			winners = append(winners, "q")
		}
		if len(winners) != 1 || m.len() != 1 {
			t.Fatalf("trial %d: after freeing the one place, admitted %v, len %d; want exactly one", trial, winners, m.len())
		}
	}
}
