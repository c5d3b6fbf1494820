package keyrate

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of Allow on the real system clock, without the janitor (its
// cost is measured separately in the benchmarks module). Each reports
// admit/op, the fraction of calls admitted, so that an admit benchmark that
// started denying (or the reverse) shows up as a wrong number, not as a
// flattering time.
//
// Admit paths use a 1ms window and a limit far above what a key can
// receive in 1ms, so every call is admitted and every call also prunes the
// event that left the window: the steady state of a busy, unthrottled key.
// Deny paths use a limit of 1 per hour, spent before the timer starts.

// admitLimiter returns a limiter that admits every call and already tracks
// every key, so that the timed loop measures decisions, not inserts.
func admitLimiter(b *testing.B, keys []string) *Limiter {
	return primedLimiter(b, 1<<24, time.Millisecond, keys)
}

// denyLimiter returns a limiter whose budget, 1 per hour, every key has spent.
func denyLimiter(b *testing.B, keys []string) *Limiter {
	return primedLimiter(b, 1, time.Hour, keys)
}

// primedLimiter returns a limiter without a janitor that has seen one event
// for each key, closed when the benchmark ends.
func primedLimiter(b *testing.B, limit int, window time.Duration, keys []string) *Limiter {
	return primedPolicies(b, []Policy{{Limit: limit, Window: window}}, keys)
}

// primedPolicies is primedLimiter for a limiter of several policies.
func primedPolicies(b *testing.B, policies []Policy, keys []string) *Limiter {
	l, err := NewPolicies(policies, WithJanitorInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	for _, k := range keys {
		l.Allow(k)
	}
	return l
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%08d", i)
	}
	return keys
}

func reportAdmits(b *testing.B, admitted int64, wantAdmit bool) {
	rate := float64(admitted) / float64(b.N)
	b.ReportMetric(rate, "admit/op")
	if wantAdmit && rate < 0.99 || !wantAdmit && rate > 0.01 {
		b.Fatalf("admit/op = %.3f: the benchmark does not measure the path its name says", rate)
	}
}

// serialAllow times Allow over keys, in order and round again, from one
// goroutine.
func serialAllow(b *testing.B, l *Limiter, keys []string, wantAdmit bool) {
	var admitted int64
	b.ResetTimer()
	for i := range b.N {
		if l.Allow(keys[i%len(keys)]) {
			admitted++
		}
	}
	reportAdmits(b, admitted, wantAdmit)
}

func BenchmarkAllow(b *testing.B) {
	for _, nkeys := range []int{1, 10_000, 1_000_000} {
		keys := makeKeys(nkeys)
		name := fmt.Sprintf("keys=%d", nkeys)
		b.Run(name+"/admit", func(b *testing.B) { serialAllow(b, admitLimiter(b, keys), keys, true) })
		b.Run(name+"/deny", func(b *testing.B) { serialAllow(b, denyLimiter(b, keys), keys, false) })
	}
}

// BenchmarkAllowParallel runs Allow from GOMAXPROCS goroutines on one hot key,
// or on 10k distinct keys with each goroutine walking its own stride so that
// goroutines do not collide on keys.
func BenchmarkAllowParallel(b *testing.B) {
	for _, nkeys := range []int{1, 10_000} {
		keys := makeKeys(nkeys)
		name := "hot"
		if nkeys > 1 {
			name = "distinct"
		}
		run := func(b *testing.B, l *Limiter, wantAdmit bool) {
			var admitted, worker atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919 // a different starting key per goroutine
				n := int64(0)
				for pb.Next() {
					if l.Allow(keys[i%nkeys]) {
						n++
					}
					i++
				}
				admitted.Add(n)
			})
			reportAdmits(b, admitted.Load(), wantAdmit)
		}
		b.Run(name+"/admit", func(b *testing.B) { run(b, admitLimiter(b, keys), true) })
		b.Run(name+"/deny", func(b *testing.B) { run(b, denyLimiter(b, keys), false) })
	}
}

// BenchmarkMemoryPerKey tracks b.N fresh keys (key strings built inside the
// measurement, so they count) with 1 event each and with limit events each,
// and reports the live heap per key after a GC.
func BenchmarkMemoryPerKey(b *testing.B) {
	const limit = 100
	for _, events := range []int{1, limit} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			l, err := New(limit, time.Hour, WithJanitorInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			before := heapInUse()
			for i := range b.N {
				l.AllowN(fmt.Sprintf("client-%08d", i), events)
			}
			after := heapInUse()
			b.StopTimer()
			if l.Len() != b.N {
				b.Fatalf("tracked %d keys, want %d", l.Len(), b.N)
			}
			b.ReportMetric(float64(after-before)/float64(b.N), "bytes/key")
			runtime.KeepAlive(l)
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkAllowCoarseClock is the hot-key and 10k-key admit paths with
// WithCoarseClock(time.Millisecond): the clock read replaced by an atomic load.
func BenchmarkAllowCoarseClock(b *testing.B) {
	for _, nkeys := range []int{1, 10_000} {
		keys := makeKeys(nkeys)
		b.Run(fmt.Sprintf("keys=%d/admit", nkeys), func(b *testing.B) {
			l, err := New(1<<24, 10*time.Millisecond, WithJanitorInterval(0), WithCoarseClock(time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for _, k := range keys {
				l.Allow(k)
			}
			serialAllow(b, l, keys, true)
		})
	}
}

// BenchmarkTake is BenchmarkAllow's hot-key paths through Take, which
// works out the whole Decision: the cost of the numbers behind the answer.
func BenchmarkTake(b *testing.B) {
	keys := makeKeys(1)
	run := func(b *testing.B, l *Limiter, wantAdmit bool) {
		var admitted int64
		b.ResetTimer()
		for range b.N {
			if d := l.Take(keys[0], 1); d.Allowed {
				admitted++
			}
		}
		reportAdmits(b, admitted, wantAdmit)
	}
	b.Run("admit", func(b *testing.B) { run(b, admitLimiter(b, keys), true) })
	b.Run("deny", func(b *testing.B) { run(b, denyLimiter(b, keys), false) })
}

// BenchmarkAllowPolicies is BenchmarkAllow's hot-key paths under two
// policies, the cost of a second limit on one key. Admit: 1ms and 2ms
// windows with limits no key reaches, so every call is admitted and prunes
// at the longer window. Deny: 100 per minute, which has room, and 1 per
// hour, spent before the timer starts: the second policy refuses, so both
// are checked.
func BenchmarkAllowPolicies(b *testing.B) {
	keys := makeKeys(1)
	admit := []Policy{{Name: "short", Limit: 1 << 24, Window: time.Millisecond}, {Name: "long", Limit: 1 << 24, Window: 2 * time.Millisecond}}
	deny := []Policy{{Name: "minute", Limit: 100, Window: time.Minute}, {Name: "hour", Limit: 1, Window: time.Hour}}
	b.Run("admit", func(b *testing.B) { serialAllow(b, primedPolicies(b, admit, keys), keys, true) })
	b.Run("deny", func(b *testing.B) { serialAllow(b, primedPolicies(b, deny, keys), keys, false) })
}

// BenchmarkTakePolicies is BenchmarkAllowPolicies through Take: each
// policy's numbers too, which cost a binary search per policy.
func BenchmarkTakePolicies(b *testing.B) {
	keys := makeKeys(1)
	admit := []Policy{{Name: "short", Limit: 1 << 24, Window: time.Millisecond}, {Name: "long", Limit: 1 << 24, Window: 2 * time.Millisecond}}
	deny := []Policy{{Name: "minute", Limit: 100, Window: time.Minute}, {Name: "hour", Limit: 1, Window: time.Hour}}
	run := func(b *testing.B, l *Limiter, wantAdmit bool) {
		var admitted int64
		b.ResetTimer()
		for range b.N {
			if d := l.Take(keys[0], 1); d.Allowed {
				admitted++
			}
		}
		reportAdmits(b, admitted, wantAdmit)
	}
	b.Run("admit", func(b *testing.B) { run(b, primedPolicies(b, admit, keys), true) })
	b.Run("deny", func(b *testing.B) { run(b, primedPolicies(b, deny, keys), false) })
}

// steppingClock is a Clock that moves on by step at every reading, so that
// a benchmark's calls on one key spread over simulated time: a client
// calling every step, however fast the loop runs.
type steppingClock struct {
	at   atomic.Int64
	step int64
}

func (c *steppingClock) Now() time.Time { return t0.Add(time.Duration(c.at.Add(c.step))) }

// BenchmarkTakeFourPolicies is Take on one key that calls every 50ms (20 a
// second) under 10/s, 600/min, 20k/hour and 100k/day, against the same
// calls under the day's policy alone. The stepping clock moves a simulated
// week or so per run, so the day's log fills to its 100k events and the
// shorter policies refuse their share: policies=4 over policies=1 is what
// the three shorter limits cost.
func BenchmarkTakeFourPolicies(b *testing.B) {
	four := []Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "minute", Limit: 600, Window: time.Minute},
		{Name: "hour", Limit: 20_000, Window: time.Hour},
		{Name: "day", Limit: 100_000, Window: 24 * time.Hour},
	}
	for _, policies := range [][]Policy{four[3:], four} {
		b.Run(fmt.Sprintf("policies=%d", len(policies)), func(b *testing.B) {
			c := &steppingClock{step: int64(50 * time.Millisecond)}
			l, err := NewPolicies(policies, WithClock(c), WithJanitorInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for range 2_000_000 { // a day and more: every window at its steady state
				l.Take("k", 1)
			}
			var admitted int64
			b.ResetTimer()
			for range b.N {
				if l.Take("k", 1).Allowed {
					admitted++
				}
			}
			b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
		})
	}
}

// BenchmarkTakeHeavy is Take of the largest weight a limiter admits, 2^31-1
// under a limit of 2^31-1, on one key whose window has passed before each
// call, so that every call is admitted: a weight costs one entry, in the
// time and memory of any other decision (the goal: under 1µs and 64 bytes).
// weight=1 is the same loop at a weight of 1.
func BenchmarkTakeHeavy(b *testing.B) {
	for _, n := range []int{1, math.MaxInt32} {
		b.Run(fmt.Sprintf("weight=%d", n), func(b *testing.B) {
			c := &steppingClock{step: int64(time.Minute)}
			l, err := New(math.MaxInt32, time.Minute, WithClock(c), WithJanitorInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var admitted int64
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if l.Take("k", n).Allowed {
					admitted++
				}
			}
			reportAdmits(b, admitted, true)
		})
	}
}
