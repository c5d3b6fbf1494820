package benchmarks

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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
		{"random-1m", benchRandom1M},
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

// newForBench returns a fresh limiter from p for one run of a workload on
// path. On the deny path of an Aligned limiter it first waits, when need be,
// until the window's next boundary is at least AlignedMargin away, so that
// the budgets it spends stay spent for the run.
func newForBench(b *testing.B, p Peer, path Path) Limiter {
	b.Helper()
	if path == Deny && p.Aligned {
		time.Sleep(UntilClearOfBoundary(time.Now(), BudgetWindow, AlignedMargin))
	}
	l, err := p.New(Budget())
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

func errorsOf(l Limiter) int {
	if ec, ok := l.(ErrorCounter); ok {
		return int(ec.Errors())
	}
	return 0
}

// cycleLoop calls Allow for keys[0], keys[1], ... in a cycle, one goroutine:
// the deny path of the serial workloads, on keys spent beforehand.
func cycleLoop(b *testing.B, l Limiter, path Path, keys []string) {
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

// streamLoop calls Allow on every key of every chunk s hands out, in order,
// one goroutine: the admit path of the serial workloads. The timer stops
// while s prepares its next chunk (once per 100,000 calls or more).
func streamLoop(b *testing.B, l Limiter, s keyStream) {
	b.ReportAllocs()
	keys := s.next()
	errs, errBase := 0, errorsOf(l)
	admits, i := 0, 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			errs += errorsOf(l) - errBase
			keys, i = s.next(), 0
			errBase = errorsOf(l)
			b.StartTimer()
		}
		if l.Allow(keys[i]) {
			admits++
		}
		i++
	}
	report(b, l, Admit, admits, errs+errorsOf(l)-errBase, b.N)
}

func benchSerialHot(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	if path == Admit {
		streamLoop(b, l, newHotStream(l))
		return
	}
	keys := Keys(1)
	path.Prepare(l, keys)
	cycleLoop(b, l, path, keys)
}

func benchSerial1M(b *testing.B, p Peer, path Path) {
	if path == Deny && p.Refills {
		// Exhausting a million keys takes longer than one refill, and each
		// key is called once in a cycle of a quarter of a second or more:
		// such a limiter admits most of these calls.
		b.Skip("its budget refills every Window/Limit and cannot be put into deficit: not a deny workload for it")
	}
	l := newForBench(b, p, path)
	if path == Admit {
		streamLoop(b, l, newCycleStream(l, keys1M))
		return
	}
	keys := Keys(keys1M)
	path.Prepare(l, keys)
	cycleLoop(b, l, path, keys)
}

// benchRandom1M is a million active keys each holding RandomHeld events
// (the admit path) or spent (the deny path), called by every goroutine at
// random: no key is called often enough for its log to stay in a cache, so
// a decision costs the memory it touches. Each goroutine draws its own
// sequence (xorshift), so none waits on another's cursor.
func benchRandom1M(b *testing.B, p Peer, path Path) {
	if path == Deny && p.Refills {
		b.Skip("its budget refills every Window/Limit and cannot be put into deficit: not a deny workload for it")
	}
	l := random1M.limiter(b, p, path)
	keys := Keys(keys1M)
	b.ReportAllocs()
	var admits, seed atomic.Int64
	errBase := errorsOf(l)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := uint64(seed.Add(1))*0x9e3779b97f4a7c15 | 1
		local := int64(0)
		for pb.Next() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			if l.Allow(keys[x%keys1M]) {
				local++
			}
		}
		admits.Add(local)
	})
	b.StopTimer()
	report(b, l, path, int(admits.Load()), errorsOf(l)-errBase, b.N)
}

// randomHeld is how many events each key of random-1m holds before timing:
// a few, as an active key of a real service does, so a log holds a ring.
const randomHeld = 5

// random1M keeps random-1m's limiter, its million keys prepared, from one
// run of a benchmark to the next: the rounds go tests makes to size b.N,
// and the -count runs. Preparing took up to a minute a round for the slower
// peers (go-limiter spends a key in 100 calls), which made the whole
// workload two hours long. A round adds about one event to a key on the
// admit path, far from the limit of 100 in a minute, and a refusal changes
// nothing; a fixed window's deny path, whose budget comes back at the
// window's boundary, is prepared afresh each round, as newForBench waits
// for a boundary far enough away.
var random1M random1MCache

type random1MCache struct {
	name string // the peer, path and GOMAXPROCS l was prepared for
	l    Limiter
}

// limiter returns a limiter of p prepared for path, the one kept when it
// was prepared for the same peer, path and GOMAXPROCS, closing any other.
func (c *random1MCache) limiter(b *testing.B, p Peer, path Path) Limiter {
	b.Helper()
	name := fmt.Sprintf("%s/%s/%d", p.Name, path, runtime.GOMAXPROCS(0))
	if c.name == name && !(path == Deny && p.Aligned) {
		return c.l
	}
	if c.l != nil {
		c.l.Close()
		c.name, c.l = "", nil
	}
	if path == Deny && p.Aligned {
		time.Sleep(UntilClearOfBoundary(time.Now(), BudgetWindow, AlignedMargin))
	}
	l, err := p.New(Budget())
	if err != nil {
		b.Fatal(err)
	}
	keys := Keys(keys1M)
	held := 1 // Exhaust spends a key at once
	if path == Admit {
		held = randomHeld
	}
	for range held {
		path.Prepare(l, keys)
	}
	c.name, c.l = name, l
	return l
}

func benchZipf(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	if path == Admit {
		streamLoop(b, l, newZipfKeyStream(l))
		return
	}
	stream, distinct := ZipfStream()
	path.Prepare(l, distinct)
	cycleLoop(b, l, path, stream)
}

// parallelLoop runs RunParallel: each goroutine takes a part of the pool and
// calls its keys in a cycle; after passes cycles it takes the next part.
func parallelLoop(b *testing.B, l Limiter, path Path, keys []string, size, passes int) {
	pool := newPartPool(len(keys), size)
	b.ReportAllocs()
	var admits atomic.Int64
	errBase := errorsOf(l)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := pool.cursor(passes)
		local := int64(0)
		for pb.Next() {
			if l.Allow(keys[c.next()]) {
				local++
			}
		}
		admits.Add(local)
	})
	b.StopTimer()
	report(b, l, path, int(admits.Load()), errorsOf(l)-errBase, b.N)
}

// benchParallel10k gives each goroutine (one per P) its own 10,000/P of the
// keys, built beforehand so that none formats a key in the loop. On the
// admit path a goroutine moves to a fresh part after PerKey passes over its
// own: 10,000 keys in use at a time.
func benchParallel10k(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	procs := runtime.GOMAXPROCS(0)
	size := keys10k / procs
	parts, passes := procs, math.MaxInt
	if path == Admit {
		parts, passes = partsNeeded(b.N, size, procs), PerKey
	}
	keys := Keys(parts * size)
	path.Prepare(l, keys)
	parallelLoop(b, l, path, keys, size, passes)
}

// benchParallelHot runs every goroutine on one key: on the deny path one
// spent key, on the admit path the relay's current key.
func benchParallelHot(b *testing.B, p Peer, path Path) {
	l := newForBench(b, p, path)
	if path == Deny {
		keys := Keys(1)
		path.Prepare(l, keys)
		parallelLoop(b, l, path, keys, 1, math.MaxInt)
		return
	}
	relay := newHotRelay(l, b.N, runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	var admits atomic.Int64
	errBase := errorsOf(l)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := relayCursor{r: relay}
		local := int64(0)
		for pb.Next() {
			at, key := c.key()
			if l.Allow(key) {
				local++
			}
			c.called(at)
		}
		admits.Add(local)
	})
	b.StopTimer()
	report(b, l, path, int(admits.Load()), errorsOf(l)-errBase, b.N)
}
