// Package backendtest is the behavioural suite every keyrate.Backend
// passes: the in-process keyrate.Limiter and the Redis backend run the
// same scenarios and give the same Decisions, number for number, each
// policy's part (Decision.Policies) included. Run holds the scenarios of
// one policy, RunPolicies those of several, RunTiers those of tiers, and
// RunIdentities checks that no identity a client sends lifts its limit.
//
// A backend of your own (another store, say) should pass it too: run it
// from a test, with a constructor that makes a fresh, empty backend for
// each scenario and registers its cleanup with t.Cleanup:
//
//	func TestSuite(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) keyrate.Backend {
//			b := mystore.New(limit, window, mystore.WithClock(clock))
//			t.Cleanup(func() { b.Close() })
//			return b
//		})
//	}
//
// Time comes from a keyrate.ManualClock that the suite moves; the backend
// under test must decide at that clock's instants, not at its store's.
// Instants and durations are whole microseconds, the finest unit every
// backend keeps, and windows are seconds long, so a backend that also
// expires state in real time (as Redis does) never loses it while a
// scenario runs. The Concurrent scenarios call the backend from many
// goroutines at once and count what it admitted: run them with the race
// detector.
package backendtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// NewBackend returns a fresh backend for one scenario: limit events per key
// in any window, deciding at clock's instants, with no events recorded for
// any key. It should register its own cleanup with t.Cleanup.
type NewBackend func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) keyrate.Backend

// start is the instant every scenario's clock starts at.
var start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Run runs every scenario of the suite against the backends newBackend makes,
// each as a subtest.
func Run(t *testing.T, newBackend NewBackend) {
	t.Run("Trace", func(t *testing.T) { testTrace(t, newBackend) })
	t.Run("BoundaryBurst", func(t *testing.T) { testBoundaryBurst(t, newBackend) })
	t.Run("Sliding", func(t *testing.T) { testSliding(t, newBackend) })
	t.Run("Weights", func(t *testing.T) { testWeights(t, newBackend) })
	t.Run("SeparateKeys", func(t *testing.T) { testSeparateKeys(t, newBackend) })
	t.Run("RetryAfterIsExact", func(t *testing.T) { testRetryAfterIsExact(t, newBackend) })
	t.Run("RefusalsRecordNothing", func(t *testing.T) { testRefusalsRecordNothing(t, newBackend) })
	t.Run("InvalidWeights", func(t *testing.T) { testInvalidWeights(t, newBackend) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newBackend) })
	t.Run("DoneContext", func(t *testing.T) { testDoneContext(t, newBackend) })
}

// step is one row of a trace: at offset from start, Take(key, n) must
// return want.
type step struct {
	at   time.Duration
	key  string
	n    int
	want keyrate.Decision
}

// runTrace plays steps in order on a fresh backend.
func runTrace(t *testing.T, newBackend NewBackend, limit int, window time.Duration, steps []step) {
	t.Helper()
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, limit, window, clock)
	for i, s := range steps {
		clock.Set(start.Add(s.at))
		s.want = single(limit, window, s.want)
		got := take(t, b, s.key, s.n)
		if got != s.want {
			t.Errorf("step %d: at +%v Take(%q, %d)\n got %+v\nwant %+v", i, s.at, s.key, s.n, got, s.want)
		}
	}
}

// take calls b.Take and fails the test on an error. It returns the
// Decision without its Receipt, which is the backend's own, so that
// Decisions compare by what they say.
func take(t *testing.T, b keyrate.Backend, key string, n int) keyrate.Decision {
	t.Helper()
	d, err := b.TakeContext(context.Background(), key, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	d.Receipt = keyrate.Receipt{}
	return d
}

const s = time.Second

// single completes want, whose numbers allowed or refused set, into the
// Decision a backend of one unnamed policy (limit per window) returns: the
// same numbers are that policy's part, and backend.Combine of that part is the
// Decision.
func single(limit int, window time.Duration, want keyrate.Decision) keyrate.Decision {
	return backend.Combine(keyrate.PolicyDecision{
		Policy:  keyrate.Policy{Limit: limit, Window: window},
		Allowed: want.Allowed, Remaining: want.Remaining,
		RetryAfter: want.RetryAfter, ResetAfter: want.ResetAfter, RefillAfter: want.RefillAfter,
	})
}

func allowed(remaining int, refill, reset time.Duration) keyrate.Decision {
	return keyrate.Decision{Allowed: true, Remaining: remaining, RefillAfter: refill, ResetAfter: reset}
}

func refused(remaining int, retry, refill, reset time.Duration) keyrate.Decision {
	return keyrate.Decision{Remaining: remaining, RetryAfter: retry, RefillAfter: refill, ResetAfter: reset}
}

// testTrace walks one key through filling, refusal, sliding, weights and the
// weights that can never fit, checking every field at every step.
func testTrace(t *testing.T, newBackend NewBackend) {
	runTrace(t, newBackend, 3, 10*s, []step{
		// RefillAfter: when the oldest event in the window leaves.
		{0, "k", 1, allowed(2, 10*s, 10*s)},
		{1 * s, "k", 1, allowed(1, 9*s, 10*s)},
		{2 * s, "k", 1, allowed(0, 8*s, 10*s)},
		// Full: the event at 0 leaves at 10s; the newest, at 2s, at 12s.
		{3 * s, "k", 1, refused(0, 7*s, 7*s, 9*s)},
		{9500 * time.Millisecond, "k", 1, refused(0, 500*time.Millisecond, 500*time.Millisecond, 2500*time.Millisecond)},
		// At 10s the event at 0 has left: (0, 10] is the window.
		{10 * s, "k", 1, allowed(0, 1*s, 10*s)},
		{10 * s, "k", 1, refused(0, 1*s, 1*s, 10*s)},
		// Held: 2s, 10s. Weight 2 needs the event at 2s gone.
		{11 * s, "k", 2, refused(1, 1*s, 1*s, 9*s)},
		{12 * s, "k", 2, allowed(0, 8*s, 10*s)},
		// Everything has left by 25s.
		{25 * s, "k", 0, allowed(3, 0, 0)},
		{25 * s, "k", 3, allowed(0, 10*s, 10*s)},
		{26 * s, "k", 4, refused(0, 0, 9*s, 9*s)},
		{26 * s, "k", -1, refused(0, 0, 9*s, 9*s)},
		{26 * s, "k", 0, allowed(0, 9*s, 9*s)},
		{35 * s, "k", 3, allowed(0, 10*s, 10*s)},
	})
}

// testBoundaryBurst is the case that separates a sliding window from a fixed
// one: 10 per 10s, 10 requests at 00:09 and 10 at 00:11. A fixed window
// admits all 20 within two seconds; the sliding log admits 10 and refuses
// the rest until 00:19.
func testBoundaryBurst(t *testing.T, newBackend NewBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, 10, 10*s, clock)
	admitted := 0
	for _, at := range []time.Duration{9 * s, 11 * s} {
		clock.Set(start.Add(at))
		for range 10 {
			if take(t, b, "burst", 1).Allowed {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of 20 requests at 00:09 and 00:11, want 10", admitted)
	}
	want := single(10, 10*s, refused(0, 8*s, 8*s, 8*s))
	if got := take(t, b, "burst", 1); got != want {
		t.Fatalf("at 00:11 after the burst: got %+v, want %+v", got, want)
	}
	clock.Set(start.Add(19 * s))
	for i := range 10 {
		if d := take(t, b, "burst", 1); !d.Allowed || d.Remaining != 9-i {
			t.Fatalf("at 00:19, request %d: got %+v, want allowed with %d remaining", i, d, 9-i)
		}
	}
}

// testSliding checks that each event leaves the window on its own, exactly
// one window after it was admitted, not with a whole window at a time.
func testSliding(t *testing.T, newBackend NewBackend) {
	runTrace(t, newBackend, 2, 10*s, []step{
		{0, "k", 1, allowed(1, 10*s, 10*s)},
		{5 * s, "k", 1, allowed(0, 5*s, 10*s)},
		{9 * s, "k", 1, refused(0, 1*s, 1*s, 6*s)},
		{10 * s, "k", 1, allowed(0, 5*s, 10*s)},
		{14 * s, "k", 1, refused(0, 1*s, 1*s, 6*s)},
		{15 * s, "k", 1, allowed(0, 5*s, 10*s)},
		{15 * s, "k", 1, refused(0, 5*s, 5*s, 10*s)},
	})
}

// testWeights checks that a weight of n counts as n events, all or nothing.
func testWeights(t *testing.T, newBackend NewBackend) {
	runTrace(t, newBackend, 5, 10*s, []step{
		{0, "w", 3, allowed(2, 10*s, 10*s)},
		// 3 + 3 > 5: refused whole, and fits once the first 3 leave.
		{1 * s, "w", 3, refused(2, 9*s, 9*s, 9*s)},
		{1 * s, "w", 2, allowed(0, 9*s, 10*s)},
		// Held: 3 at 0, 2 at 1s. One more needs the 3 at 0 gone.
		{2 * s, "w", 1, refused(0, 8*s, 8*s, 9*s)},
		{10 * s, "w", 4, refused(3, 1*s, 1*s, 1*s)},
		{10 * s, "w", 3, allowed(0, 1*s, 10*s)},
		// A weight of the whole limit fits on a fresh key at once.
		{10 * s, "fresh", 5, allowed(0, 10*s, 10*s)},
	})
}

// testSeparateKeys checks that keys never share a budget.
func testSeparateKeys(t *testing.T, newBackend NewBackend) {
	runTrace(t, newBackend, 1, 10*s, []step{
		{0, "a", 1, allowed(0, 10*s, 10*s)},
		{0, "a", 1, refused(0, 10*s, 10*s, 10*s)},
		{0, "b", 1, allowed(0, 10*s, 10*s)},
		{1 * s, "A", 1, allowed(0, 10*s, 10*s)},
		{1 * s, "a ", 1, allowed(0, 10*s, 10*s)},
		{2 * s, "b", 1, refused(0, 8*s, 8*s, 8*s)},
		{10 * s, "a", 1, allowed(0, 10*s, 10*s)},
	})
}

// testRetryAfterIsExact waits exactly RetryAfter and finds the request fits,
// and one microsecond less and finds it does not.
func testRetryAfterIsExact(t *testing.T, newBackend NewBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, 4, 3*s, clock)
	for _, at := range []time.Duration{0, 700 * time.Millisecond, 1234567 * time.Microsecond, 2 * s} {
		clock.Set(start.Add(at))
		if d := take(t, b, "r", 1); !d.Allowed {
			t.Fatalf("at +%v: refused while filling: %+v", at, d)
		}
	}
	clock.Set(start.Add(2500 * time.Millisecond))
	for range 4 {
		d := take(t, b, "r", 1)
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("at %v: got %+v, want refused with RetryAfter > 0", clock.Now().Sub(start), d)
		}
		clock.Advance(d.RetryAfter - time.Microsecond)
		if d := take(t, b, "r", 1); d.Allowed {
			t.Fatalf("admitted 1µs before RetryAfter, at %v: %+v", clock.Now().Sub(start), d)
		}
		clock.Advance(time.Microsecond)
		if d := take(t, b, "r", 1); !d.Allowed {
			t.Fatalf("refused at RetryAfter, at %v: %+v", clock.Now().Sub(start), d)
		}
	}
}

// testRefusalsRecordNothing hammers a full key with refusals; none of them
// may count, so the key is whole again exactly one window after it filled.
func testRefusalsRecordNothing(t *testing.T, newBackend NewBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, 2, 10*s, clock)
	if d := take(t, b, "x", 2); !d.Allowed {
		t.Fatalf("filling: %+v", d)
	}
	for i := 1; i < 10; i++ {
		clock.Set(start.Add(time.Duration(i) * s))
		for _, n := range []int{1, 2, 1} {
			if d := take(t, b, "x", n); d.Allowed {
				t.Fatalf("at +%ds: weight %d admitted on a full key: %+v", i, n, d)
			}
		}
	}
	clock.Set(start.Add(10 * s))
	want := single(2, 10*s, allowed(0, 10*s, 10*s))
	if got := take(t, b, "x", 2); got != want {
		t.Fatalf("at +10s: got %+v, want %+v (refusals must not have been recorded)", got, want)
	}
}

// testInvalidWeights checks n == 0, n < 0 and n > limit on a fresh key: the
// first always fits, the others never do (RetryAfter 0), and none records
// anything.
func testInvalidWeights(t *testing.T, newBackend NewBackend) {
	runTrace(t, newBackend, 3, 10*s, []step{
		{0, "z", 0, allowed(3, 0, 0)},
		{0, "z", -1, refused(3, 0, 0, 0)},
		{0, "z", -1 << 30, refused(3, 0, 0, 0)},
		{0, "z", 4, refused(3, 0, 0, 0)},
		{0, "z", 1 << 30, refused(3, 0, 0, 0)},
		{0, "z", 3, allowed(0, 10*s, 10*s)},
		{1 * s, "z", 0, allowed(0, 9*s, 9*s)},
		{1 * s, "z", 4, refused(0, 0, 9*s, 9*s)},
		{1 * s, "z", -2, refused(0, 0, 9*s, 9*s)},
	})
}

// testConcurrent fires many calls for one key at one instant: exactly limit
// are admitted, each with a distinct Remaining, whatever the interleaving.
func testConcurrent(t *testing.T, newBackend NewBackend) {
	for _, c := range []struct{ calls, limit int }{{20, 3}, {100, 50}} {
		clock := keyrate.NewManualClock(start)
		b := newBackend(t, c.limit, 10*s, clock)
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			remaining = map[int]int{}
			errs      []error
		)
		ready := make(chan struct{})
		for range c.calls {
			wg.Go(func() {
				<-ready
				d, err := b.TakeContext(context.Background(), "hot", 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if d.Allowed {
					remaining[d.Remaining]++
				}
			})
		}
		close(ready)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d concurrent calls: %d errors, first: %v", c.calls, len(errs), errs[0])
		}
		if len(remaining) != c.limit {
			t.Fatalf("%d concurrent calls, limit %d: admitted %d distinct Remaining values %v, want %d",
				c.calls, c.limit, len(remaining), remaining, c.limit)
		}
		for r, k := range remaining {
			if r < 0 || r >= c.limit || k != 1 {
				t.Fatalf("%d concurrent calls, limit %d: Remaining %d seen %d times", c.calls, c.limit, r, k)
			}
		}
	}
}

// testDoneContext checks that a call with a done context fails and records
// nothing.
func testDoneContext(t *testing.T, newBackend NewBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, 1, 10*s, clock)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := b.TakeContext(ctx, "c", 1); err == nil {
		t.Fatalf("Take with a cancelled context: got %+v and no error", d)
	}
	if d := take(t, b, "c", 1); !d.Allowed {
		t.Fatalf("after a cancelled call: got %+v, want allowed (the cancelled call must record nothing)", d)
	}
}
