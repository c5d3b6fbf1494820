package benchmarks

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Every adapter must admit exactly its budget of 100 on a fresh key, refuse
// the 101st, and keep keys apart. It runs in a synctest bubble, so the peers
// that read time.Now see a clock that does not move; go-limiter reads the
// raw clock, but a 1-minute window cannot pass during the test.
func TestAdaptersAdmitExactlyTheBudget(t *testing.T) {
	for _, p := range Peers {
		t.Run(p.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, err := p.New(Config{Limit: 100, Window: time.Minute, Sweep: NoSweep})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				for i := range 100 {
					if !l.Allow("a") {
						t.Fatalf("event %d of a fresh budget of 100 refused", i+1)
					}
				}
				if l.Allow("a") {
					t.Fatal("event 101 admitted")
				}
				if !l.Allow("b") {
					t.Fatal("another key was refused: keys share a budget")
				}
			})
		})
	}
}

// Exhaust must leave the key refused, and still refused half a window later
// (token buckets refill half their burst by then: the deficit covers it),
// save for a limiter that Refills, which has no deficit to put a key into:
// it admits again within its refill interval.
func TestExhaustKeepsTheKeyRefused(t *testing.T) {
	for _, p := range Peers {
		t.Run(p.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := NewVirtualClock(t0)
				cfg := Config{Limit: 100, Window: time.Minute, Sweep: NoSweep}
				if p.Clock {
					cfg.Now = clock.Now
				}
				l, err := p.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				l.Exhaust("a")
				if l.Allow("a") {
					t.Fatal("admitted right after Exhaust")
				}
				if p.Name == "golimiter" {
					return // reads the raw clock, which no test can move
				}
				clock.SleepUntil(t0.Add(30 * time.Second))
				time.Sleep(30 * time.Second) // the bubble's clock, for the others
				if got := l.Allow("a"); got != p.Refills {
					t.Fatalf("half a window after Exhaust: admitted %v, want %v (Refills)", got, p.Refills)
				}
			})
		})
	}
}

func TestAccuracyOfKeyrateIsExact(t *testing.T) {
	p, _ := PeerByName("keyrate")
	for _, sc := range Scenarios {
		got, err := Accuracy(p, sc, NewVirtualClock(t0), 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got != 100 {
			t.Errorf("%s: keyrate admitted %d in one window, want exactly 100", sc.Name, got)
		}
	}
}

// keyrate's other algorithms trade exactness for O(1) memory, as their
// documentation says: FixedWindow lets a whole limit through on each side
// of a calendar boundary, GCRA a window's refill after its burst.
func TestAccuracyOfKeyrateAlgorithms(t *testing.T) {
	for _, c := range []struct {
		name           string
		burst, overrun int
	}{
		{"keyrate-fixed", 199, 100}, // 1 + 99 before the boundary at 1W, 100 after it; evenly spaced calls fill each window from its start
		{"keyrate-gcra", 120, 199},  // burst 100 at 0.9W plus 0.2W of refill; the burst plus a window's refill
	} {
		p, _ := PeerByName(c.name)
		for _, sc := range []struct {
			Scenario
			want int
		}{{BoundaryBurst, c.burst}, {SteadyOverload, c.overrun}} {
			got, err := Accuracy(p, sc.Scenario, NewVirtualClock(t0), 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got != sc.want {
				t.Errorf("%s, %s: %d in one window, want %d", c.name, sc.Name, got, sc.want)
			}
		}
	}
}

// A spent budget comes back within two seconds, across a calendar
// boundary, exactly for the limiters said to be Aligned (their window
// turns) or to Refill (their bucket refills one event every 600 ms): the
// two flags that set the deny benchmarks apart must describe the limiters.
func TestAlignedAndRefillsDescribeTheLimiters(t *testing.T) {
	for _, p := range Peers {
		if !p.Clock {
			continue // the flags are only set on limiters with a clock
		}
		t.Run(p.Name, func(t *testing.T) {
			clock := NewVirtualClock(t0.Add(59 * time.Second))
			l, err := p.New(Config{Limit: 100, Window: time.Minute, Now: clock.Now, Sweep: NoSweep})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			l.Exhaust("a")
			clock.SleepUntil(t0.Add(61 * time.Second))
			if got, want := l.Allow("a"), p.Aligned || p.Refills; got != want {
				t.Errorf("two seconds and a minute boundary after Exhaust: admitted %v, want %v (Aligned %v, Refills %v)", got, want, p.Aligned, p.Refills)
			}
		})
	}
}

func TestUntilClearOfBoundary(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		at   time.Time
		want time.Duration
	}{
		{t0, 0},                             // at a boundary: the next is a minute away
		{t0.Add(50 * s), 0},                 // exactly the margin away
		{t0.Add(50*s + 1), 10*s - 1},        // inside it: wait for the boundary
		{t0.Add(59*s + 500_000_000), s / 2}, // half a second before it
		{time.Unix(-30, 0), 0},              // before 1970, 30 s from the boundary at 0
		{time.Unix(-5, 0), 5 * s},
	} {
		if got := UntilClearOfBoundary(c.at, time.Minute, 10*s); got != c.want {
			t.Errorf("at %v: wait %v, want %v", c.at, got, c.want)
		}
	}
	if got := UntilClearOfBoundary(t0.Add(5*s), 10*s, 10*s); got != 0 {
		t.Errorf("a window no longer than the margin: wait %v, want 0 (it can never be clear)", got)
	}
}

// The harness must see over-admission where there is some: the token bucket
// lets its burst plus a window of refill through, the fixed window nearly
// twice its limit around a boundary.
func TestAccuracyCatchesOverAdmission(t *testing.T) {
	xrate, _ := PeerByName("xrate")
	for _, c := range []struct {
		sc   Scenario
		want int
	}{
		{BoundaryBurst, 120}, // burst 100 at 0.9W, plus 0.2W of refill at 1.1W
		{SteadyOverload, 199},
	} {
		got, err := Accuracy(xrate, c.sc, NewVirtualClock(t0), 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("xrate %s: %d in one window, want %d", c.sc.Name, got, c.want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		ulule, _ := PeerByName("ulule")
		got, err := Accuracy(ulule, BoundaryBurst, RealClock{}, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got != 199 {
			t.Errorf("ulule boundary burst: %d in one window, want 199 (99 + 100 across its boundary)", got)
		}
	})
}

func TestMaxInWindow(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		at   []time.Duration
		want int
	}{
		{nil, 0},
		{[]time.Duration{0}, 1},
		{[]time.Duration{0, 10 * s}, 1},               // (0, 10s] excludes 0: half-open
		{[]time.Duration{0, 10*s - 1}, 2},             // both inside one window
		{[]time.Duration{9 * s, 9 * s, 11 * s}, 3},    // the boundary burst
		{[]time.Duration{11 * s, 0, 9 * s, 5 * s}, 3}, // unsorted input
	} {
		if got := MaxInWindow(c.at, 10*s); got != c.want {
			t.Errorf("MaxInWindow(%v) = %d, want %d", c.at, got, c.want)
		}
	}
}

func TestPathCheck(t *testing.T) {
	for _, c := range []struct {
		p               Path
		admits, errs, n int
		ok              bool
	}{
		{Deny, 0, 0, 1000, true},
		{Deny, 10, 0, 1000, true},
		{Deny, 11, 0, 1000, false},
		{Admit, 1000, 0, 1000, true},
		{Admit, 999, 0, 1000, false}, // one refusal: a key went past its budget
		{Admit, 990, 10, 1000, true}, // errors are not refusals
		{Admit, 989, 10, 1000, false},
	} {
		if err := c.p.Check(c.admits, c.errs, c.n); (err == nil) != c.ok {
			t.Errorf("%s.Check(%d, %d, %d) = %v, want ok=%v", c.p, c.admits, c.errs, c.n, err, c.ok)
		}
	}
}

func TestKeysAndZipfStream(t *testing.T) {
	keys := Keys(1000)
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("key %q repeated", k)
		}
		seen[k] = true
	}
	stream, distinct := ZipfStream()
	if len(stream) != ZipfLen {
		t.Fatalf("stream has %d keys, want %d", len(stream), ZipfLen)
	}
	counts := map[string]int{}
	for _, k := range stream {
		counts[k]++
	}
	if len(counts) != len(distinct) {
		t.Fatalf("%d distinct keys in the stream, %d listed", len(counts), len(distinct))
	}
	// Zipf: the most popular key dwarfs the typical one, and the tail is long.
	if head := counts[Key(0)]; head < 50*len(stream)/len(distinct) {
		t.Errorf("key 0 drawn %d times of %d over %d keys: not skewed", head, len(stream), len(distinct))
	}
	if len(distinct) < ZipfKeys/4 {
		t.Errorf("only %d of %d keys drawn: no long tail", len(distinct), ZipfKeys)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := range 1000 {
		h.Add(time.Duration(i+1) * time.Nanosecond) // 1ns..1000ns
	}
	h.Add(5 * time.Millisecond)
	if got := h.Quantile(0.5); got != 502*time.Nanosecond { // 501ns sits in [501ns, 502ns)
		t.Errorf("p50 = %v, want the 501ns bucket's edge, 502ns", got)
	}
	if got := h.Quantile(1); got != 6*time.Millisecond {
		t.Errorf("p100 = %v, want the 5ms bucket's edge, 6ms", got)
	}
	if h.Max() != 5*time.Millisecond || h.Count() != 1001 || h.AtLeast(time.Millisecond) != 1 {
		t.Errorf("max %v, count %d, >=1ms %d", h.Max(), h.Count(), h.AtLeast(time.Millisecond))
	}
}

// In a synctest bubble the idle measurement runs in fake time: keyrate's
// janitor must give the memory back, x/time/rate (no sweeper) must keep it.
func TestMemoryAfterIdle(t *testing.T) {
	const keys = 20_000
	for _, c := range []struct {
		name     string
		returned bool
	}{{"keyrate", true}, {"xrate", false}} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := PeerByName(c.name)
			synctest.Test(t, func(t *testing.T) {
				full, err := BytesPerKey(p, keys, 1)
				if err != nil {
					t.Fatal(err)
				}
				idle, err := BytesPerKeyAfterIdle(p, keys)
				if err != nil {
					t.Fatal(err)
				}
				if full < 24 {
					t.Fatalf("%.0f B per tracked key: too little to be a key and its state", full)
				}
				if gaveBack := idle < full/10; gaveBack != c.returned {
					t.Fatalf("%.0f B per key tracked, %.0f B after idle: memory returned = %v, want %v", full, idle, gaveBack, c.returned)
				}
			})
		})
	}
}

// keyrate-coarse decides at a clock its own goroutine reads once per
// millisecond; in a synctest bubble that goroutine ticks in the bubble's
// time. A fresh key gets exactly the budget, the 101st call is refused, and
// the whole budget, no more, is back once a window and a tick have passed.
func TestKeyrateCoarseAdmitsExactlyItsBudget(t *testing.T) {
	p, ok := PeerByName("keyrate-coarse")
	if !ok || p.Resolution != CoarseResolution || p.Clock {
		t.Fatalf("keyrate-coarse: found %v, resolution %v, clock %v; want a %v resolution and no virtual clock", ok, p.Resolution, p.Clock, CoarseResolution)
	}
	synctest.Test(t, func(t *testing.T) {
		l, err := p.New(Config{Limit: 100, Window: time.Minute, Sweep: NoSweep})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for round := range 2 {
			for i := range 100 {
				if !l.Allow("a") {
					t.Fatalf("round %d: event %d of a fresh budget of 100 refused", round, i+1)
				}
			}
			if l.Allow("a") {
				t.Fatalf("round %d: event 101 admitted", round)
			}
			time.Sleep(time.Minute + CoarseResolution)
		}
	})
}

// keyrate refuses to combine a coarse clock with WithClock, so the adapter
// cannot silently ignore a virtual clock it is handed.
func TestKeyrateCoarseRefusesAVirtualClock(t *testing.T) {
	p, _ := PeerByName("keyrate-coarse")
	l, err := p.New(Config{Limit: 100, Window: time.Minute, Now: NewVirtualClock(t0).Now})
	if err == nil {
		l.Close()
		t.Fatal("keyrate-coarse accepted Config.Now")
	}
	if !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("error %v does not wrap keyrate.ErrConfig", err)
	}
}

// In a synctest bubble the coarse clock lags real time by at most one
// resolution, so keyrate-coarse admits at most its limit in any span of
// window minus resolution, the promise WithCoarseClock documents, whatever
// order the bubble runs the clock's goroutine and the caller in.
func TestAccuracyOfKeyrateCoarse(t *testing.T) {
	p, _ := PeerByName("keyrate-coarse")
	const window = time.Second
	for _, sc := range Scenarios {
		synctest.Test(t, func(t *testing.T) {
			at, err := Admitted(p, sc, RealClock{}, 100, window)
			if err != nil {
				t.Fatal(err)
			}
			if got := MaxInWindow(at, window-p.Resolution); got != 100 {
				t.Errorf("%s: %d admitted in one span of window - resolution, want exactly 100", sc.Name, got)
			}
		})
	}
}

// The precision trade-off, pinned down in a synctest bubble with a 1s
// window: a full budget admitted half a tick after the clock's 9ms reading
// is stamped 9ms, so it leaves the window once the clock reads 1009ms, 999.5ms
// of real time later. A window-length span then holds twice the limit, and
// a span of window minus resolution still holds only the limit. A clock any
// coarser would let the second budget in earlier, and an exact one later.
func TestKeyrateCoarseTradesAtMostOneResolution(t *testing.T) {
	p, _ := PeerByName("keyrate-coarse")
	const window = time.Second
	synctest.Test(t, func(t *testing.T) {
		l, err := p.New(Config{Limit: 100, Window: window, Sweep: NoSweep})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		start := time.Now()
		var at []time.Duration
		callAt := func(offset time.Duration, calls int) {
			time.Sleep(time.Until(start.Add(offset)))
			for range calls {
				if l.Allow("a") {
					at = append(at, time.Since(start))
				}
			}
		}
		callAt(9*time.Millisecond+500*time.Microsecond, 100)
		for off := window; off <= window+12*time.Millisecond; off += 100 * time.Microsecond {
			callAt(off, 100)
		}
		if len(at) != 200 {
			t.Fatalf("admitted %d events, want two budgets of 100", len(at))
		}
		if first := at[100]; first < window+9*time.Millisecond || first > window+9*time.Millisecond+100*time.Microsecond {
			t.Errorf("second budget admitted from %v, want from when the clock reads %v", first, window+9*time.Millisecond)
		}
		if got := MaxInWindow(at, window); got != 200 {
			t.Errorf("%d admitted within one window of real time, want 200: the clock's lag lets the second budget in early", got)
		}
		if got := MaxInWindow(at, window-p.Resolution); got != 100 {
			t.Errorf("%d admitted within window - resolution, want 100", got)
		}
	})
}

// memoryCase returns the MemoryCase called name, with keys keys.
func memoryCase(t *testing.T, name string, keys int) MemoryCase {
	t.Helper()
	for _, c := range MemoryCases {
		if c.Name == name {
			c.Keys = keys
			return c
		}
	}
	t.Fatalf("no memory case %q", name)
	return MemoryCase{}
}

// At the full limit keyrate's log holds every event, 4 bytes each; with
// WithResolution(1m) at most a day's minutes of entries; FixedWindow and
// GCRA a counter per policy. Every event is admitted on the virtual clock.
func TestMemoryAtTheFullLimit(t *testing.T) {
	day := memoryCase(t, "100,000/day", 3)
	minute := memoryCase(t, "100/min", 2_000)
	full := func(name string, c MemoryCase) FullMemory {
		t.Helper()
		p, _ := PeerByName(name)
		m, err := BytesPerKeyFull(p, c)
		if err != nil {
			t.Fatal(err)
		}
		if m.Admitted != m.Calls || m.Calls != c.Policies[0].Limit || m.Limiters != 1 {
			t.Fatalf("%s, %s: %+v, want every one of %d events admitted by one limiter", name, c.Name, m, c.Policies[0].Limit)
		}
		return m
	}
	exact := full("keyrate", day)
	if exact.BytesPerKey < 4*100_000 {
		t.Errorf("keyrate, %s: %.0f B per key, less than 4 bytes per held event", day.Name, exact.BytesPerKey)
	}
	if m := full("keyrate-1m", day); m.BytesPerKey > exact.BytesPerKey/10 {
		t.Errorf("keyrate-1m, %s: %.0f B per key, over a tenth of the exact log's %.0f", day.Name, m.BytesPerKey, exact.BytesPerKey)
	}
	for _, name := range []string{"keyrate-fixed", "keyrate-gcra"} {
		if m := full(name, minute); m.BytesPerKey > 300 {
			t.Errorf("%s, %s: %.0f B per key, more than a key and its counter", name, minute.Name, m.BytesPerKey)
		}
	}
}

// Under two policies a peer is two limiters: on the virtual clock both
// admit every event; on a clock that does not move, the per-second one
// admits its 10 and no more. keyrate-1m cannot take a 1 s window.
func TestMemoryUnderTwoPolicies(t *testing.T) {
	c := memoryCase(t, "10/s + 1,000/day (NewPolicies)", 5)
	xrate, _ := PeerByName("xrate")
	m, err := BytesPerKeyFull(xrate, c)
	if err != nil {
		t.Fatal(err)
	}
	if m.Limiters != 2 || m.Admitted != 1_000 || m.Calls != 1_000 {
		t.Errorf("xrate: %+v, want 2 limiters admitting all 1000 events", m)
	}
	synctest.Test(t, func(t *testing.T) {
		ulule, _ := PeerByName("ulule")
		m, err := BytesPerKeyFull(ulule, c)
		if err != nil {
			t.Fatal(err)
		}
		if m.Limiters != 2 || m.Admitted != 10 || m.Calls != 1_000 {
			t.Errorf("ulule in a bubble whose clock stands still: %+v, want 2 limiters, 10 of 1000 events admitted", m)
		}
	})
	exact, _ := PeerByName("keyrate")
	if m, err := BytesPerKeyFull(exact, c); err != nil || m.Limiters != 1 || m.Admitted != 1_000 {
		t.Errorf("keyrate: %+v, %v; want one limiter admitting all 1000 events", m, err)
	}
	res, _ := PeerByName("keyrate-1m")
	if _, err := BytesPerKeyFull(res, c); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("keyrate-1m under a 1s window: error %v, want one wrapping keyrate.ErrConfig", err)
	}
}
