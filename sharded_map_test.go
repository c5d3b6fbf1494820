package keyrate

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func TestKeyMapMaxKeys(t *testing.T) {
	m := newKeyMap(10)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for _, k := range mapKeys(fmt.Sprintf("w%d", w), 100) {
				m.create(k)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 10, m.len())
	assert.True(t, m.full())
	assert.Equal(t, 10, tracked(m), "the map holds exactly the bound")
	assert.Nil(t, m.create("one more"), "a full map refuses a new key")
	assert.Equal(t, 10, tracked(m))
}

// TestKeyMapCountNeverPassesBound floods a full map with new keys from
// several goroutines. A refused insert must leave no trace: Len never reports
// more than the bound, and once the tracked key is removed, exactly one new
// key takes its place even while the flood goes on.
func TestKeyMapCountNeverPassesBound(t *testing.T) {
	for trial := range 500 {
		m := newKeyMap(1)
		m.create("a")
		var stop atomic.Bool
		var flood sync.WaitGroup
		admitted := make(chan string, 4)
		for w := range 4 {
			flood.Go(func() {
				for i := 0; !stop.Load(); i++ {
					if k := fmt.Sprint(w, "-", i); m.create(k) != nil {
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
		q := m.create("q")
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
	m := newKeyMap(0)
	g := m.create("a")
	always := func(*eventLog) bool { return true }
	assert.False(t, m.removeIf("a", newEventLog(0), always), "a key that maps to another log stays")
	assert.False(t, m.removeIf("a", g, func(*eventLog) bool { return false }), "a key drop refuses stays")
	assert.False(t, m.removeIf("b", nil, always), "an absent key")
	assert.Same(t, g, m.load("a"))
	assert.False(t, g.dead)
	assert.True(t, m.removeIf("a", g, always))
	assert.True(t, g.dead, "a removed log is marked dead")
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
	require.NoError(t, tenNanos.setResolution(0))
	window := func(*eventLog) *tier { return tenNanos }
	m := newKeyMap(0)
	busy, quiet, late := m.create("busy"), m.create("quiet"), m.create("late")
	busy.last, quiet.last = 15, 3 // decided at 15 and 3, each admitting one event
	busy.push(15, 1, 5, &tenNanos.scale)
	quiet.push(3, 1, 5, &tenNanos.scale)
	late.last = 40 // decided at 40, a clock that has since stepped back
	assert.Equal(t, 2, m.evictIdle(20, window))
	assert.False(t, busy.dead)
	assert.True(t, quiet.dead)
	assert.True(t, late.dead)
	assert.Equal(t, int64(40), m.floor.Load(), "the floor keeps the newest instant")
	assert.Same(t, busy, m.load("busy"))
	assert.Equal(t, 1, m.len())
	assert.Equal(t, int64(40), m.create("quiet").last, "a new log starts at the floor")
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
	require.True(t, old.dead)
	g := l.lock("k", true)
	require.NotNil(t, g)
	g.mu.Unlock()
	assert.NotSame(t, old, g)
	assert.False(t, g.dead)
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
		assert.Less(t, perKey, 128.0, "%d keys with one event each", n)
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
}
