package benchmarks

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Keys10k and Keys1M are the key counts of the many-key workloads.
const (
	keys10k = 10_000
	keys1M  = 1_000_000
)

// BenchmarkAllow runs every workload on every limiter, on both paths. Names
// are work=W/path=P/lib=L so that benchstat can put the limiters side by side
// (-col /lib). Each benchmark reports admit/op and fails if the admitted
// share is not what its path says.
func BenchmarkAllow(b *testing.B) {
	workloads := []struct {
		name string
		run  func(b *testing.B, p Peer, path Path)
	}{
		{"serial-hot", benchSerialHot},
		{"parallel-10k", benchParallel10k},
		{"parallel-hot", benchParallelHot},
		{"serial-1m", benchSerial1M},
		{"zipf", benchZipf},
	}
	for _, w := range workloads {
		for _, path := range Paths {
			for _, p := range Peers {
				b.Run("work="+w.name+"/path="+string(path)+"/lib="+p.Name, func(b *testing.B) {
					w.run(b, p, path)
				})
			}
		}
	}
}

func newForBench(b *testing.B, p Peer, path Path) Limiter {
	b.Helper()
	l, err := p.New(path.Config())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return l
}

// report records admit/op (and err/op for limiters that can fail) and fails
// the benchmark when the admitted share contradicts its path.
func report(b *testing.B, l Limiter, path Path, admits, errs, n int) {
	b.Helper()
	b.ReportMetric(float64(admits)/float64(n), "admit/op")
	if _, ok := l.(ErrorCounter); ok {
		b.ReportMetric(float64(errs)/float64(n), "err/op")
	}
	if err := path.Check(admits, errs, n); err != nil {
		b.Fatal(err)
	}
}

// serialLoop calls Allow for keys[0], keys[1], ... in a cycle, one goroutine.
func serialLoop(b *testing.B, l Limiter, path Path, keys []string) {
	b.ReportAllocs()
	errBase := errorsOf(l)
	admits, i := 0, 0
	for b.Loop() {
		if l.Allow(keys[i]) {
			admits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	report(b, l, path, admits, errorsOf(l)-errBase, b.N)
}

func errorsOf(l Limiter) int {
	if ec, ok := l.(ErrorCounter); ok {
		return int(ec.Errors())
	}
	return 0
}

func benchSerialHot(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	keys := Keys(1)
	path.Prepare(l, keys)
	serialLoop(b, l, path, keys)
}

func benchSerial1M(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	keys := Keys(keys1M)
	path.Prepare(l, keys)
	serialLoop(b, l, path, keys)
}

func benchZipf(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	stream, distinct := ZipfStream()
	path.Prepare(l, distinct)
	serialLoop(b, l, path, stream)
}

// parallelLoop runs RunParallel with goroutine g cycling over parts[g], a
// slice built before the timer starts.
func parallelLoop(b *testing.B, l Limiter, path Path, parts [][]string) {
	b.ReportAllocs()
	var next, admits atomic.Int64
	errBase := errorsOf(l)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := parts[int(next.Add(1)-1)%len(parts)]
		local, i := int64(0), 0
		for pb.Next() {
			if l.Allow(keys[i]) {
				local++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		admits.Add(local)
	})
	b.StopTimer()
	report(b, l, path, int(admits.Load()), errorsOf(l)-errBase, b.N)
}

// benchParallel10k splits 10k distinct keys evenly between the goroutines
// (one per P), so each walks its own keys and none formats a key in the loop.
func benchParallel10k(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	keys := Keys(keys10k)
	path.Prepare(l, keys)
	n := runtime.GOMAXPROCS(0)
	parts := make([][]string, n)
	for g := range parts {
		parts[g] = keys[g*len(keys)/n : (g+1)*len(keys)/n]
	}
	parallelLoop(b, l, path, parts)
}

func benchParallelHot(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	keys := Keys(1)
	path.Prepare(l, keys)
	parallelLoop(b, l, path, [][]string{keys})
}
