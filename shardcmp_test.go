package keyrate

// This file weighs the key map keyrate uses (keyMap: xsync.MapOf with
// lock-free lookups and a lock per log) against the usual alternative: a
// hand-sharded map, N shards each holding a mutex and a plain map, with the
// decision made under the shard's lock. Both run the same eventLog.decide on
// the same clock, so the benchmarks differ only in how a key is found and
// locked. benchmarks/run.sh runs them and reports the numbers with benchstat.

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v3"
)

// shardCmpShards is the shard count of the hand-sharded map: a power of two
// well above the core count, so that distinct keys rarely share a lock.
const shardCmpShards = 256

// shardCmpPad fills a shard out to 128 bytes (two cache lines, since
// adjacent-line prefetch pairs them), so that two shards' locks never share a
// line.
const shardCmpPad = 128 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(map[string]*eventLog(nil))

type shardCmpShard struct {
	mu sync.Mutex
	m  map[string]*eventLog
	_  [shardCmpPad]byte
}

// shardCmpMap is the hand-sharded alternative: hash the key once to pick a
// shard, then find or create the log and decide, all under the shard's lock
// (the log's own mutex goes unused).
type shardCmpMap struct {
	seed   maphash.Seed
	shards [shardCmpShards]shardCmpShard
}

func newShardCmpMap() *shardCmpMap {
	s := &shardCmpMap{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*eventLog)
	}
	return s
}

func (s *shardCmpMap) take(key string, n, limit int, window int64, now func() int64) Decision {
	sh := &s.shards[maphash.String(s.seed, key)&(shardCmpShards-1)]
	sh.mu.Lock()
	g := sh.m[key]
	if g == nil {
		g = newEventLog(key, 0)
		sh.m[key] = g
	}
	d := g.decide(now(), n, limit, window, true)
	sh.mu.Unlock()
	return d
}

// shardCmpKeyMap is the lookup and locking Limiter.Take does over keyMap,
// with nothing else (no floor, no key bound, no eviction check), so that
// every variant does the same work.
type shardCmpKeyMap struct{ keys *keyMap }

func newShardCmpKeyMap() shardCmpKeyMap { return shardCmpKeyMap{newKeyMap(0)} }

func (x shardCmpKeyMap) take(key string, n, limit int, window int64, now func() int64) Decision {
	g := x.keys.load(key)
	if g == nil {
		g = x.keys.loadOrCreate(key, new(atomic.Int64))
	}
	g.mu.Lock()
	d := g.decide(now(), n, limit, window, true)
	g.mu.Unlock()
	return d
}

// shardCmpXsync is the same over xsync.MapOf, which keyrate used before
// keyMap: lock-free lookups that reach the log through an entry.
type shardCmpXsync struct {
	m *xsync.MapOf[string, *eventLog]
}

func newShardCmpXsync() shardCmpXsync {
	return shardCmpXsync{xsync.NewMapOf[string, *eventLog]()}
}

func (x shardCmpXsync) take(key string, n, limit int, window int64, now func() int64) Decision {
	g, ok := x.m.Load(key)
	if !ok {
		g, _ = x.m.LoadOrCompute(key, func() *eventLog { return newEventLog(key, 0) })
	}
	g.mu.Lock()
	d := g.decide(now(), n, limit, window, true)
	g.mu.Unlock()
	return d
}

type shardCmpTaker interface {
	take(key string, n, limit int, window int64, now func() int64) Decision
}

var shardCmpVariants = []struct {
	name string
	new  func() shardCmpTaker
}{
	{"keymap", func() shardCmpTaker { return newShardCmpKeyMap() }},
	{"xsync", func() shardCmpTaker { return newShardCmpXsync() }},
	{"sharded", func() shardCmpTaker { return newShardCmpMap() }},
}

// TestShardCmpMapsAgree checks that the maps under comparison give the same
// decisions for the same requests, so the benchmarks compare equals.
func TestShardCmpMapsAgree(t *testing.T) {
	const limit, window = 3, int64(10)
	r := rand.New(rand.NewPCG(7, 11))
	var now int64
	clock := func() int64 { return now }
	maps := make([]shardCmpTaker, len(shardCmpVariants))
	for i, v := range shardCmpVariants {
		maps[i] = v.new()
	}
	allowed := 0
	for i := range 5000 {
		key := fmt.Sprintf("k%d", r.IntN(400))
		n := r.IntN(limit + 2)
		now += int64(r.IntN(3))
		want := maps[0].take(key, n, limit, window, clock)
		for j, m := range maps[1:] {
			if got := m.take(key, n, limit, window, clock); got != want {
				t.Fatalf("request %d (%q, n=%d, now=%d): %s %+v, %s %+v", i, key, n, now,
					shardCmpVariants[0].name, want, shardCmpVariants[j+1].name, got)
			}
		}
		if want.Allowed && n > 0 {
			allowed++
		}
	}
	if allowed == 0 {
		t.Fatal("no request was admitted: the comparison exercised only refusals")
	}
	if n := maps[0].(shardCmpKeyMap).keys.len(); n != 400 {
		t.Fatalf("keyMap tracks %d keys, want 400", n)
	}
}

func TestShardCmpShardIsPadded(t *testing.T) {
	if size := unsafe.Sizeof(shardCmpShard{}); size != 128 {
		t.Fatalf("shard is %d bytes, want 128", size)
	}
}

var (
	shardCmpKeysOnce sync.Once
	shardCmpKeys     []string
)

// shardCmpKeySet returns 1M distinct keys, formatted once for all benchmarks.
func shardCmpKeySet() []string {
	shardCmpKeysOnce.Do(func() {
		shardCmpKeys = make([]string, 1_000_000)
		for i := range shardCmpKeys {
			shardCmpKeys[i] = fmt.Sprintf("tenant-%010d", i)
		}
	})
	return shardCmpKeys
}

// shardCmpClock is the production clock read: time.Since a base.
func shardCmpClock() func() int64 {
	base := time.Now()
	return func() int64 { return int64(time.Since(base)) }
}

// BenchmarkShardCmp runs each map on four workloads. The limit is 1 event
// per hour, and every key but the inserted ones is spent before timing, so
// the timed decision is the same cheap refusal on both sides.
func BenchmarkShardCmp(b *testing.B) {
	const limit, window = 1, int64(time.Hour)
	for _, v := range shardCmpVariants {
		b.Run("work=hot-serial/map="+v.name, func(b *testing.B) {
			m, now := v.new(), shardCmpClock()
			m.take("hot", 1, limit, window, now)
			b.ReportAllocs()
			for b.Loop() {
				if m.take("hot", 1, limit, window, now).Allowed {
					b.Fatal("spent key admitted")
				}
			}
		})
	}
	for _, v := range shardCmpVariants {
		b.Run("work=10k-parallel/map="+v.name, func(b *testing.B) {
			m, now := v.new(), shardCmpClock()
			keys := shardCmpKeySet()[:10_000]
			for _, k := range keys {
				m.take(k, 1, limit, window, now)
			}
			procs := runtime.GOMAXPROCS(0)
			var next, admitted atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := int(next.Add(1)-1) % procs
				mine := keys[g*len(keys)/procs : (g+1)*len(keys)/procs]
				i := 0
				for pb.Next() {
					if m.take(mine[i], 1, limit, window, now).Allowed {
						admitted.Add(1)
					}
					if i++; i == len(mine) {
						i = 0
					}
				}
			})
			if admitted.Load() != 0 {
				b.Fatalf("%d spent keys admitted", admitted.Load())
			}
		})
	}
	for _, v := range shardCmpVariants {
		b.Run("work=1m-serial/map="+v.name, func(b *testing.B) {
			m, now := v.new(), shardCmpClock()
			keys := shardCmpKeySet()
			for _, k := range keys {
				m.take(k, 1, limit, window, now)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if m.take(keys[i], 1, limit, window, now).Allowed {
					b.Fatal("spent key admitted")
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
	for _, v := range shardCmpVariants {
		// Every timed call inserts a key never seen; the map is replaced,
		// with the timer stopped, each time the 1M keys run out.
		b.Run("work=insert-serial/map="+v.name, func(b *testing.B) {
			keys := shardCmpKeySet()
			m, now := v.new(), shardCmpClock()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				j := i % len(keys)
				if j == 0 && i > 0 {
					b.StopTimer()
					m = v.new()
					b.StartTimer()
				}
				if !m.take(keys[j], 1, limit, window, now).Allowed {
					b.Fatal("new key refused")
				}
			}
		})
	}
}
