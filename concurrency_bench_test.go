package keyrate

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
)

// Benchmarks of a request's slot: take it and give it back, as a request
// does around its work. Each reports held/op, the fraction of takes that
// got a slot, so that a benchmark that started refusing shows as a wrong
// number, not a flattering time.

// BenchmarkConcurrencyTakeRelease is one key's slot taken and given back
// over and over by one caller: the entry is made and dropped each time, as
// for a client that sends one request at a time.
func BenchmarkConcurrencyTakeRelease(b *testing.B) {
	c, _ := NewConcurrency(3, nil, nil)
	b.ReportAllocs()
	held := 0
	for b.Loop() {
		if release, ok, _ := c.TryAcquire(context.Background(), "client-00000001"); ok {
			held++
			release()
		}
	}
	b.ReportMetric(float64(held)/float64(b.N), "held/op")
}

// BenchmarkConcurrencyHeldKey is the same, while another request of the key
// runs: its entry stays, and each take and release only counts.
func BenchmarkConcurrencyHeldKey(b *testing.B) {
	c, _ := NewConcurrency(3, nil, nil)
	running, _, _ := c.TryAcquire(context.Background(), "client-00000001")
	defer running()
	b.ReportAllocs()
	held := 0
	for b.Loop() {
		if release, ok := c.Acquire(context.Background(), "client-00000001"); ok == nil {
			held++
			release()
		}
	}
	b.ReportMetric(float64(held)/float64(b.N), "held/op")
}

// BenchmarkConcurrencyParallelKeys is every goroutine on keys of its own,
// 1,000 each: distinct keys share no lock.
func BenchmarkConcurrencyParallelKeys(b *testing.B) {
	c, _ := NewConcurrency(3, nil, nil)
	keys := makeKeys(1000 * runtime.GOMAXPROCS(0))
	var next, held atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		own := keys[int(next.Add(1)-1)%runtime.GOMAXPROCS(0)*1000:][:1000]
		i := 0
		for pb.Next() {
			if release, ok, _ := c.TryAcquire(context.Background(), own[i%len(own)]); ok {
				held.Add(1)
				release()
			}
			i++
		}
	})
	b.ReportMetric(float64(held.Load())/float64(b.N), "held/op")
}

// BenchmarkConcurrencyHotKey is 4 goroutines per CPU on one key, at a
// limit of 3: more callers than slots, so that some takes are refused, and
// held/op says how many got one.
func BenchmarkConcurrencyHotKey(b *testing.B) {
	c, _ := NewConcurrency(3, nil, nil)
	var held atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if release, ok, _ := c.TryAcquire(context.Background(), "hot"); ok {
				held.Add(1)
				release()
			}
		}
	})
	b.ReportMetric(float64(held.Load())/float64(b.N), "held/op")
}
