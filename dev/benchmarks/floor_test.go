package benchmarks

import (
	"hash/maphash"
	"sync"
	"testing"
	"time"
)

// floorSink keeps results alive so that the compiler cannot drop the work.
var floorSink int64

// BenchmarkFloor measures what any exact per-key decision must at least do:
// read the monotonic clock once, hash the key once and take one uncontended
// lock. RESULTS.md compares keyrate's serial hot-key Allow with their sum.
func BenchmarkFloor(b *testing.B) {
	key := Key(42)
	b.Run("op=time-now", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += int64(time.Now().Nanosecond())
		}
		floorSink = s
	})
	b.Run("op=time-since", func(b *testing.B) {
		base := time.Now()
		var s int64
		for b.Loop() {
			s += int64(time.Since(base))
		}
		floorSink = s
	})
	b.Run("op=maphash", func(b *testing.B) {
		seed := maphash.MakeSeed()
		var s uint64
		for b.Loop() {
			s += maphash.String(seed, key)
		}
		floorSink = int64(s)
	})
	b.Run("op=mutex", func(b *testing.B) {
		var mu sync.Mutex
		var s int64
		for b.Loop() {
			mu.Lock()
			s++
			mu.Unlock()
		}
		floorSink = s
	})
	b.Run("op=sum", func(b *testing.B) {
		// The three together, as one decision would do them.
		seed := maphash.MakeSeed()
		base := time.Now()
		var mu sync.Mutex
		var s int64
		for b.Loop() {
			h := maphash.String(seed, key)
			mu.Lock()
			s += int64(time.Since(base)) + int64(h&1)
			mu.Unlock()
		}
		floorSink = s
	})
}
