package redislimit

import "testing"

// BenchmarkBreakerClosed measures what the breaker costs a call while
// Redis answers: the closed-state check each call makes before it asks
// Redis (a call that gets an answer records nothing in the breaker). Serial
// is one caller; Parallel, every CPU's goroutines calling at once. Its
// counterpart for sony/gobreaker is dev/librarybench's BenchmarkGobreaker.
func BenchmarkBreakerClosed(b *testing.B) {
	b.Run("Serial", func(b *testing.B) {
		var br breaker
		n := 0
		for b.Loop() {
			if br.closed() {
				n++
			}
		}
		if n != b.N {
			b.Fatalf("%d of %d calls found the breaker closed", n, b.N)
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		var br breaker
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !br.closed() {
					b.Error("open")
					return
				}
			}
		})
	})
}
