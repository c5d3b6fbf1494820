package keyrate

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func mapKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// raceDetector is set when the tests run under the race detector.
var raceDetector bool

// tracked counts the logs the map holds, by walking it.
func tracked(m *keyMap) int {
	n := 0
	m.m.Range(func(string, *eventLog) bool { n++; return true })
	return n
}

// insert is create for tests that take no lock of their own: it returns the
// key's log unlocked.
func insert(m *keyMap, key string) *eventLog {
	g, fresh := m.create(key)
	if fresh {
		g.mu.Unlock()
	}
	return g
}

func TestKeyMapCreate(t *testing.T) {
	m := newKeyMap(0, false)
	g, fresh := m.create("a")
	require.True(t, fresh)
	assert.False(t, g.mu.TryLock(), "a new log comes locked, for its first decision")
	g.mu.Unlock()
	again, fresh := m.create("a")
	assert.False(t, fresh)
	assert.Same(t, g, again)
	assert.True(t, g.mu.TryLock(), "a log found is handed back unlocked")
	g.mu.Unlock()
}

func TestKeyMapMaxKeys(t *testing.T) {
	m := newKeyMap(10, true)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for _, k := range mapKeys(fmt.Sprintf("w%d", w), 100) {
				insert(m, k)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 10, m.len())
	assert.True(t, m.full())
	assert.Equal(t, 10, tracked(m), "the map holds exactly the bound")
	assert.Nil(t, insert(m, "one more"), "a full map refuses a new key")
	assert.Equal(t, 10, tracked(m))
}

// TestKeyMapCountNeverPassesBound floods a full map with new keys from
// several goroutines. A refused insert must leave no trace: Len never reports
// more than the bound, and once the tracked key is removed, exactly one new
// key takes its place even while the flood goes on.
func TestKeyMapCountNeverPassesBound(t *testing.T) {
	for trial := range 500 {
		m := newKeyMap(1, true)
		insert(m, "a")
		var stop atomic.Bool
		var flood sync.WaitGroup
		admitted := make(chan string, 4)
		for w := range 4 {
			flood.Go(func() {
				for i := 0; !stop.Load(); i++ {
					if k := fmt.Sprint(w, "-", i); insert(m, k) != nil {
						admitted <- k
						return
					}
				}
			})
		}
		for range 500 {
			if n := m.len(); n > 1 {
				stop.Store(true)
				flood.Wait()
				t.Fatalf("trial %d: len = %d under WithMaxKeys(1)", trial, n)
			}
		}
		m.remove("a")
		q := insert(m, "q")
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
		if len(winners) != 1 || m.len() != 1 || tracked(m) != 1 {
			t.Fatalf("trial %d: after freeing the one place, admitted %v, len %d, %d logs; want exactly one",
				trial, winners, m.len(), tracked(m))
		}
	}
}

func TestKeyMapRemoveIf(t *testing.T) {
	m := newKeyMap(0, false)
	g := insert(m, "a")
	always := func(*eventLog) bool { return true }
	assert.False(t, m.removeIf("a", newEventLog(0), always), "a key that maps to another log stays")
	assert.False(t, m.removeIf("a", g, func(*eventLog) bool { return false }), "a key drop refuses stays")
	assert.False(t, m.removeIf("b", nil, always), "an absent key")
	assert.Same(t, g, m.load("a"))
	assert.False(t, g.is(dead))
	assert.True(t, m.removeIf("a", g, always))
	assert.True(t, g.is(dead), "a removed log is marked dead")
	assert.Nil(t, m.load("a"))
	assert.Equal(t, 0, m.len())
	assert.Equal(t, 0, tracked(m))
	m.remove("absent") // nothing to do, and the count stays right
	assert.Equal(t, 0, m.len())
}

// TestEvictIdle checks the janitor's walk: only logs with no event in the
// window go, each marked dead, and the floor rises to the newest instant an
// evicted log was decided at.
func TestEvictIdle(t *testing.T) {
	tenNanos, err := newTier("", []Policy{{Limit: 5, Window: 10}})
	require.NoError(t, err)
	require.NoError(t, tenNanos.setup(newScale(10, 0), SlidingLog, 0))
	window := func(*eventLog) *tier { return tenNanos }
	m := newKeyMap(0, false)
	busy, quiet, late := insert(m, "busy"), insert(m, "quiet"), insert(m, "late")
	busy.last, quiet.last = 15, 3 // decided at 15 and 3, each admitting one event
	busy.push(15, 1, 5, false)
	quiet.push(3, 1, 5, false)
	late.last = 40 // decided at 40, a clock that has since stepped back
	assert.Equal(t, 2, m.evictIdle(20, window))
	assert.False(t, busy.is(dead))
	assert.True(t, quiet.is(dead))
	assert.True(t, late.is(dead))
	assert.Equal(t, int64(40), m.floor.Load(), "the floor keeps the newest instant")
	assert.Same(t, busy, m.load("busy"))
	assert.Equal(t, 1, m.len())
	assert.Equal(t, int64(40), insert(m, "quiet").last, "a new log starts at the floor")
	assert.Equal(t, 1, m.evictIdle(24, window), "the new log holds nothing; busy's event at 15 is still in the window")
	assert.Equal(t, int64(40), m.floor.Load(), "the floor never moves down")
	assert.Equal(t, 1, m.evictIdle(50, window))
	assert.Equal(t, int64(50), m.floor.Load())
}

// TestLockRetriesEvictedLog checks that a caller holding a log that was
// evicted after its lookup finds the mark and uses the key's new log.
func TestLockRetriesEvictedLog(t *testing.T) {
	l, c := newManual(t, 1, 10*time.Second)
	require.True(t, l.Allow("k"))
	old := l.keys.load("k")
	c.Advance(10 * time.Second)
	require.Equal(t, 1, l.sweep(l.now()))
	require.True(t, old.is(dead))
	g := l.lock("k", true)
	require.NotNil(t, g)
	g.mu.Unlock()
	assert.NotSame(t, old, g)
	assert.False(t, g.is(dead))
	assert.Equal(t, int64(10*time.Second), g.last, "the new log starts at the eviction's instant")
}

// TestMemoryPerKey tracks fresh keys of 15 bytes with one event each and
// measures the live heap they cost, key strings and the map included, at
// sizes on either side of a doubling of the map's table.
func TestMemoryPerKey(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("inserts 290k keys, slow under -short and the race detector")
	}
	for _, n := range []int{70_000, 100_000, 120_000} {
		l, err := New(100, time.Hour, WithJanitorInterval(0))
		require.NoError(t, err)
		before := heapInUse()
		for i := range n {
			require.True(t, l.Allow(fmt.Sprintf("client-%08d", i)))
		}
		perKey := float64(heapInUse()-before) / float64(n)
		t.Logf("%d keys: %.1f bytes per key", n, perKey)
		assert.Less(t, perKey, 144.0, "%d keys with one event each", n)
		require.Equal(t, n, l.Len())
		l.Close()
	}
}

// TestMemoryPerFullKey fills keys to their whole limit and measures the
// live heap they cost, key strings and the map included: 4 bytes per event
// in an exact log, and under WithResolution one 8-byte entry per tick of
// the window, whatever the limit.
func TestMemoryPerFullKey(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("fills thousands of keys to their limit, slow under -short and the race detector")
	}
	// perKey returns the live heap per key after fill has filled keys keys.
	perKey := func(keys int, fill func(key string)) float64 {
		names := make([]string, keys)
		before := heapInUse()
		for i := range names {
			names[i] = fmt.Sprintf("client-%08d", i)
			fill(names[i])
		}
		after := heapInUse()
		runtime.KeepAlive(names)
		return float64(after-before) / float64(keys)
	}
	t.Run("1000 per hour", func(t *testing.T) {
		l, err := New(1000, time.Hour, WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		bytes := perKey(4000, func(key string) {
			for range 1000 {
				require.True(t, l.Allow(key))
			}
			require.False(t, l.Allow(key), "full")
		})
		t.Logf("%.0f bytes per key", bytes)
		assert.LessOrEqual(t, bytes, 4400.0, "1,000 events of 4 bytes and the key's overhead")
	})
	t.Run("100000 per day at a minute", func(t *testing.T) {
		c := NewManualClock(t0)
		l, err := New(100_000, 24*time.Hour, WithResolution(time.Minute), WithClock(c), WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		// 70 events a minute for a day, 99,960 of them admitted over 1,428
		// ticks of a minute: a full day whose limit is reached.
		bytes := perKey(500, func(key string) {
			c.Set(t0)
			for range 24 * 60 {
				c.Advance(time.Minute)
				l.AllowN(key, 70)
			}
			require.Equal(t, 39, l.Peek(key).Remaining, "40 left: one more would leave 39")
		})
		t.Logf("%.0f bytes per key", bytes)
		assert.LessOrEqual(t, bytes, 16_000.0)
	})
	t.Run("1000000 tokens per minute", func(t *testing.T) {
		c := NewManualClock(t0)
		l, err := New(1_000_000, time.Minute, WithClock(c), WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		// 1,000 requests of 850 to 949 tokens, one every 50ms: each is one
		// entry of 8 bytes, whatever its weight.
		bytes := perKey(1000, func(key string) {
			c.Set(t0)
			for i := range 1000 {
				c.Advance(50 * time.Millisecond)
				require.True(t, l.AllowN(key, 850+i%100))
			}
		})
		t.Logf("%.0f bytes per key", bytes)
		assert.LessOrEqual(t, bytes, 16384.0)
	})
	t.Run("one request of 2^31-1", func(t *testing.T) {
		l, err := New(math.MaxInt32, time.Minute, WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		bytes := perKey(10_000, func(key string) { require.True(t, l.AllowN(key, math.MaxInt32)) })
		t.Logf("%.0f bytes per key", bytes)
		assert.LessOrEqual(t, bytes, 144.0+8, "a key's overhead and one entry")
	})
}

// TestFullMapMakesRoomForNewClient fills a bounded limiter, decides a few
// keys again later, then asks about a new key: it must be decided normally
// at once, the least recently decided keys making room for it while the
// recently decided ones keep their events.
func TestFullMapMakesRoomForNewClient(t *testing.T) {
	const bound = 32 // makes room 2 keys at a time
	l, c := newManual(t, 2, time.Hour, WithMaxKeys(bound))
	keys := mapKeys("client", bound)
	for _, k := range keys {
		require.True(t, l.Allow(k))
		c.Advance(time.Second) // each key decided at an instant of its own
	}
	c.Advance(time.Minute)
	recent := keys[:3]
	for _, k := range recent {
		require.True(t, l.Allow(k), "%s: its second event", k)
	}

	want := single(time.Hour, allow(2, 1, time.Hour, time.Hour))
	assert.Equal(t, want, l.Peek("newcomer"), "Peek answers what Take will")
	assert.Equal(t, bound, l.Len(), "Peek makes no room")
	assert.Equal(t, want, noReceipt(l.Take("newcomer", 1)), "decided as any new key")
	assert.Equal(t, bound-1, l.Len(), "two keys made room, one took it")
	for _, k := range recent {
		assert.False(t, l.Allow(k), "%s was decided recently: it keeps its two events", k)
	}
	for i, k := range keys {
		_, tracked := l.keys.m.Load(k)
		assert.Equal(t, i != 3 && i != 4, tracked, "%s: only the two least recently decided keys go", k)
	}
	// Peek says what one more event would leave of the limit of 2.
	assert.Equal(t, 0, l.Peek(keys[5]).Remaining, "a key that stayed keeps its event")
	assert.Equal(t, 1, l.Peek(keys[3]).Remaining, "an evicted key forgot its event")
}

// TestMakeRoomTies fills the map at one instant: the keys tied at the
// cutoff go only as many as the batch needs, not all at once.
func TestMakeRoomTies(t *testing.T) {
	const bound = 64 // makes room 4 keys at a time
	l, _ := newManual(t, 1, time.Hour, WithMaxKeys(bound))
	for _, k := range mapKeys("client", bound) {
		require.True(t, l.Allow(k))
	}
	require.True(t, l.Allow("newcomer"))
	assert.Equal(t, bound-3, l.Len())
	assert.Equal(t, bound-3, tracked(l.keys))
	assert.False(t, l.Allow("newcomer"), "the new key keeps its event")
}

// TestMakeRoomRaisesFloor steps the clock back before a new key arrives:
// the new key's log starts where the evicted one was last decided, as it
// does after the janitor's evictions.
func TestMakeRoomRaisesFloor(t *testing.T) {
	l, c := newManual(t, 1, 10*time.Second, WithMaxKeys(1))
	c.Set(t0.Add(20 * time.Second))
	require.True(t, l.Allow("a"))
	c.Set(t0.Add(5 * time.Second))
	require.True(t, l.Allow("b"), "a made room")
	assert.Nil(t, l.keys.load("a"))
	assert.Equal(t, int64(20*time.Second), l.keys.floor.Load())
	assert.Equal(t, 10*time.Second, l.Peek("b").RetryAfter, "b was decided at 00:20, not 00:05")
}

// TestFullMapUnderConcurrentInserts floods a bounded limiter with new keys
// from 4 goroutines while another reads Len: it never passes the bound,
// every new key is admitted, and the keys decided most recently, before the
// clock stepped back under the flood, keep their events throughout.
func TestFullMapUnderConcurrentInserts(t *testing.T) {
	const bound, writers, each = 64, 4, 500
	l, c := newManual(t, 1, time.Hour, WithMaxKeys(bound))
	for _, k := range mapKeys("old", bound-4) {
		require.True(t, l.Allow(k))
	}
	c.Advance(time.Minute)
	vips := mapKeys("vip", 4)
	for _, k := range vips {
		require.True(t, l.Allow(k))
	}
	// Back to 00:00: every key of the flood is decided before the vips.
	c.Set(t0)

	var stop atomic.Bool
	var checker sync.WaitGroup
	checker.Go(func() {
		for !stop.Load() {
			if n := l.Len(); n > bound {
				t.Errorf("Len = %d under WithMaxKeys(%d)", n, bound)
				return
			}
		}
	})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for _, k := range mapKeys(fmt.Sprint("flood", w), each) {
				if l.Allow(k) {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	checker.Wait()

	assert.Equal(t, int64(writers*each), admitted.Load(), "every new key is decided as new")
	assert.LessOrEqual(t, l.Len(), bound)
	assert.Equal(t, l.Len(), tracked(l.keys))
	for _, k := range vips {
		assert.False(t, l.Allow(k), "%s keeps its event", k)
	}
}

// TestOldestKeys offers random instants, many of them equal, and checks
// that the heap keeps n of the least recent: the n smallest.
func TestOldestKeys(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lasts := rapid.SliceOfN(rapid.Int64Range(0, rapid.Int64Range(0, 20).Draw(t, "spread")), 0, 300).Draw(t, "lasts")
		n := rapid.IntRange(1, 40).Draw(t, "n")
		var h oldestKeys
		h.reset(n)
		for i, last := range lasts {
			h.offer(candidate{last: last, key: fmt.Sprint(i)})
		}
		sorted := slices.Sorted(slices.Values(lasts))
		want := sorted[:min(n, len(sorted))]
		var got []int64
		for _, c := range h.keys {
			got = append(got, c.last)
		}
		slices.Sort(got)
		require.Equal(t, want, got)
		if len(got) > 0 {
			require.Equal(t, got[len(got)-1], h.keys[0].last, "the newest kept is on top")
		}
	})
}

// fullLimiter returns a limiter without a janitor, holding bound keys
// with one event each, and keys it has not seen yet.
func fullLimiter(b *testing.B, bound, unseen int) (*Limiter, []string) {
	l, err := New(1, time.Hour, WithMaxKeys(bound), WithJanitorInterval(0))
	require.NoError(b, err)
	b.Cleanup(func() { l.Close() })
	keys := makeKeys(bound + unseen)
	for _, k := range keys[:bound] {
		l.Allow(k)
	}
	return l, keys[bound:]
}

// BenchmarkFullMapInsert inserts new keys into a full limiter: each op is
// one insert, and one in every bound/16 makes room first.
func BenchmarkFullMapInsert(b *testing.B) {
	for _, bound := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", bound), func(b *testing.B) {
			l, keys := fullLimiter(b, bound, b.N)
			b.ResetTimer()
			for i := range b.N {
				if !l.Allow(keys[i]) {
					b.Fatal("a new key was refused")
				}
			}
		})
	}
}

// BenchmarkMakeRoom times one batch of a full map: its walk and its
// evictions, without the inserts that fill the room again.
func BenchmarkMakeRoom(b *testing.B) {
	for _, bound := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", bound), func(b *testing.B) {
			room := bound / roomShare
			l, keys := fullLimiter(b, bound, room*b.N)
			b.ResetTimer()
			for i := range b.N {
				l.keys.makeRoom()
				b.StopTimer()
				require.Equal(b, bound-room, l.Len())
				for _, k := range keys[i*room : (i+1)*room] {
					l.Allow(k)
				}
				b.StartTimer()
			}
		})
	}
}
