package benchmarks

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// countingLimiter admits the first BudgetLimit calls on each key and counts
// every call, so a test can see how often a workload called each key.
type countingLimiter struct {
	mu    sync.Mutex
	calls map[string]int
}

func newCountingLimiter() *countingLimiter { return &countingLimiter{calls: map[string]int{}} }

func (c *countingLimiter) Allow(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[key]++
	return c.calls[key] <= BudgetLimit
}

func (c *countingLimiter) Exhaust(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[key] += BudgetLimit
}

func (c *countingLimiter) Close() {}

// checkWithinBudget fails unless every key was called at least once and at
// most BudgetLimit times (its prepared event included), and returns the most
// calls any key got.
func (c *countingLimiter) checkWithinBudget(t *testing.T) int {
	t.Helper()
	most := 0
	for k, n := range c.calls {
		if n > BudgetLimit {
			t.Fatalf("key %s called %d times, past its budget of %d", k, n, BudgetLimit)
		}
		most = max(most, n)
	}
	return most
}

// drain calls Allow on every key of n calls' worth of chunks from s, as
// streamLoop does, and returns how many were admitted.
func drain(l Limiter, s keyStream, n int) int {
	admits := 0
	for n > 0 {
		keys := s.next()
		for _, k := range keys[:min(n, len(keys))] {
			if l.Allow(k) {
				admits++
			}
		}
		n -= len(keys)
	}
	return admits
}

// Every serial admit stream, run long enough to hand out several chunks,
// must call each key once while preparing it and then at most PerKey times:
// every call admitted, however long the run.
func TestAdmitStreamsStayWithinBudget(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream func(Limiter) keyStream
		calls  int
		most   int // the most calls a key gets
	}{
		// Three chunks of 1024 hot keys, each at its full budget.
		{"hot", func(l Limiter) keyStream { return newHotStream(l) }, 3 * hotChunk * PerKey, BudgetLimit},
		// 250 passes over 10 keys: three sets of keys.
		{"cycle", func(l Limiter) keyStream { return newCycleStream(l, 10) }, 2500, BudgetLimit},
		// A pass over the Zipf stream, in which the popular clients go
		// through many keys, each at its full budget, and the start of the
		// next pass, on fresh keys.
		{"zipf", func(l Limiter) keyStream { return newZipfKeyStream(l) }, ZipfLen + 1000, BudgetLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newCountingLimiter()
			if got := drain(l, c.stream(l), c.calls); got != c.calls {
				t.Errorf("admitted %d of %d calls", got, c.calls)
			}
			if most := l.checkWithinBudget(t); most != c.most {
				t.Errorf("the busiest key got %d calls, want %d", most, c.most)
			}
		})
	}
}

// The Zipf stream on the admit path keeps the clients' shares: client 0
// makes as many calls as in the stream the deny path replays.
func TestZipfKeyStreamKeepsTheClientsShares(t *testing.T) {
	keys := newZipfKeyStream(newCountingLimiter()).next()
	clients := zipfClients()
	stream, _ := ZipfStream()
	head, first := 0, Key(0)
	for _, k := range stream {
		if k == first {
			head++
		}
	}
	if head <= PerKey {
		t.Fatalf("client 0 drawn %d times: the test needs it past one key's budget", head)
	}
	// Client 0's calls go to one key after another, PerKey calls each.
	got, perKey := 0, map[string]int{}
	for i, k := range keys {
		if clients[i] == 0 {
			got++
			perKey[k]++
		}
	}
	if got != head {
		t.Fatalf("client 0 made %d calls on the admit path, %d in the stream", got, head)
	}
	if want := (head + PerKey - 1) / PerKey; len(perKey) != want {
		t.Errorf("client 0's %d calls went to %d keys, want %d", head, len(perKey), want)
	}
	full := 0
	for _, n := range perKey {
		if n == PerKey {
			full++
		}
	}
	if full != head/PerKey {
		t.Errorf("%d of client 0's keys got PerKey calls, want %d", full, head/PerKey)
	}
}

// schedules decide which goroutine makes each call in a simulated parallel
// run: in turn, all by one, or at random.
var schedules = []struct {
	name string
	who  func(call, procs int, r *rand.Rand) int
}{
	{"round-robin", func(call, procs int, _ *rand.Rand) int { return call % procs }},
	{"one-goroutine", func(int, int, *rand.Rand) int { return 0 }},
	{"random", func(_, procs int, r *rand.Rand) int { return r.IntN(procs) }},
}

// However the calls of a parallel admit run fall between its goroutines,
// the pool sized by partsNeeded never hands a part out twice, so no key
// goes past PerKey calls.
func TestPartPoolIsLargeEnough(t *testing.T) {
	for _, procs := range []int{1, 2, 3, 8} {
		for _, s := range schedules {
			const size, n = 7, 20_000
			pool := newPartPool(partsNeeded(n, size, procs)*size, size)
			cursors := make([]*partCursor, procs)
			for g := range cursors {
				cursors[g] = pool.cursor(PerKey)
			}
			calls := make([]int, pool.parts*size)
			r := rand.New(rand.NewPCG(uint64(procs), 7))
			for call := range n {
				calls[cursors[s.who(call, procs, r)].next()]++
			}
			if taken := int(pool.taken.Load()); taken > pool.parts {
				t.Errorf("procs=%d %s: %d parts taken from a pool of %d", procs, s.name, taken, pool.parts)
			}
			for i, c := range calls {
				if c > PerKey {
					t.Fatalf("procs=%d %s: item %d called %d times", procs, s.name, i, c)
				}
			}
		}
	}
}

// A cursor on the deny path cycles over its own part for ever.
func TestPartCursorCyclesOverItsPart(t *testing.T) {
	pool := newPartPool(6, 3)
	a, b := pool.cursor(int(^uint(0)>>1)), pool.cursor(int(^uint(0)>>1))
	var got []int
	for range 7 {
		got = append(got, a.next(), b.next())
	}
	want := []int{0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5, 0, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cursors handed out %v, want %v", got, want)
		}
	}
}

// The hot relay keeps every goroutine on one key at a time, and no key gets
// more than PerKey calls, whatever the schedule.
func TestHotRelayStaysWithinBudget(t *testing.T) {
	for _, procs := range []int{1, 2, 3, 8} {
		for _, s := range schedules {
			const n = 50_000
			l := newCountingLimiter()
			relay := newHotRelay(l, n, procs)
			cursors := make([]relayCursor, procs)
			for g := range cursors {
				cursors[g] = relayCursor{r: relay}
			}
			r := rand.New(rand.NewPCG(uint64(procs), 9))
			admits := 0
			for call := range n {
				c := &cursors[s.who(call, procs, r)]
				at, key := c.key()
				if l.Allow(key) {
					admits++
				}
				c.called(at)
			}
			if admits != n {
				t.Errorf("procs=%d %s: admitted %d of %d", procs, s.name, admits, n)
			}
			most := l.checkWithinBudget(t)
			// In turn, the goroutines share each key: when the first of them
			// has made its share of calls, each other one has made one fewer
			// (and the key has its prepared event).
			if want := procs*(PerKey/procs-1) + 2; s.name == "round-robin" && most != want {
				t.Errorf("procs=%d round-robin: busiest key got %d calls, want %d", procs, most, want)
			}
		}
	}
}

// The same under real concurrency, for the race detector.
func TestHotRelayConcurrent(t *testing.T) {
	const procs, each = 4, 20_000
	l := newCountingLimiter()
	relay := newHotRelay(l, procs*each, procs)
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			c := relayCursor{r: relay}
			for range each {
				at, key := c.key()
				if !l.Allow(key) {
					t.Error("a relay key was refused")
					return
				}
				c.called(at)
			}
		})
	}
	wg.Wait()
	l.checkWithinBudget(t)
}
