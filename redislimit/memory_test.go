package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestMemoryPerKey checks what Redis itself reports (MEMORY USAGE, the
// value, its key and Redis's bookkeeping) for a key holding 1,000 events,
// and for one holding 5,000 events admitted within a minute under a
// resolution of a minute.
func TestMemoryPerKey(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		limit  int
		window time.Duration
		every  time.Duration
		opts   []redislimit.Option
		max    int64 // bytes
	}{
		{"1,000 events", 1000, time.Hour, time.Second, nil, 10_000},
		{"5,000 events in a minute at a minute's resolution", 5000, time.Minute, 10 * time.Millisecond,
			[]redislimit.Option{redislimit.WithResolution(time.Minute)}, 2_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := keyrate.NewManualClock(start)
			l := newLimiter(t, client, c.limit, c.window, append(c.opts, redislimit.WithClock(clock))...)
			for i := range c.limit {
				if d := mustTake(t, l, "user-42", 1); !d.Allowed {
					t.Fatalf("event %d refused: %+v", i, d)
				}
				clock.Advance(c.every)
			}
			if d := mustTake(t, l, "user-42", 1); d.Allowed {
				t.Fatalf("event %d of a limit of %d admitted: %+v", c.limit+1, c.limit, d)
			}
			used, err := client.MemoryUsage(ctx, l.StoreKey("user-42")).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("MEMORY USAGE of a key holding %d events: %d bytes", c.limit, used)
			if used > c.max {
				t.Fatalf("MEMORY USAGE of a key holding %d events: %d bytes, want at most %d", c.limit, used, c.max)
			}
		})
	}
}

// TestRingGrowsAndShrinks drives one key at 1,000 per 10s with a call
// every 10ms: the ring grows by about doubling, to room for 1,012 entries
// (the most its 8,192-byte allocation holds) and never more, then wraps
// around for 10s at the limit, each admission replacing the event that
// left. At one call a second the window drains to 10 events, and each time
// the ring is a quarter full it shrinks to about twice what it holds. The
// log holds the window's events throughout.
func TestRingGrowsAndShrinks(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 1000, 10*time.Second, redislimit.WithClock(clock))
	key := l.StoreKey("k")
	read := func() redislimit.Log {
		t.Helper()
		g, err := redislimit.ReadLog(ctx, client, key)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	var caps []int // each capacity the ring has had, in order
	var held []int // the entries it held when it took each
	step := func(every time.Duration, calls int, want func(i int) int) {
		t.Helper()
		for i := range calls {
			if d := mustTake(t, l, "k", 1); !d.Allowed {
				t.Fatalf("at +%v: refused %+v", clock.Now().Sub(start), d)
			}
			g := read()
			if want := want(i); len(g.Entries) != want || g.Held() != int64(want) {
				t.Fatalf("at +%v the log holds %d entries of weight %d, want %d", clock.Now().Sub(start), len(g.Entries), g.Held(), want)
			}
			if k := len(caps); k == 0 || caps[k-1] != g.Cap {
				caps, held = append(caps, g.Cap), append(held, len(g.Entries))
			}
			clock.Advance(every)
		}
	}
	step(10*time.Millisecond, 2000, func(i int) int { return min(i+1, 1000) })
	grown := len(caps)
	if last := caps[grown-1]; last != 1012 {
		t.Fatalf("capacities while filling: %v, want 1,012 at the end", caps)
	}
	for i := 1; i < grown; i++ {
		if caps[i] < caps[i-1]*3/2 && caps[i] != 1012 {
			t.Fatalf("capacities while filling: %v, want each at least 1.5 times the last", caps)
		}
	}
	// A call a second: the window (10s) holds 10 of them once the dense
	// calls have left.
	clock.Advance(time.Second - 10*time.Millisecond)
	step(time.Second, 30, func(i int) int {
		if i < 9 {
			return 1000 - 100*(i+1) + i + 1
		}
		return 10
	})
	if len(caps) < grown+2 || caps[len(caps)-1] > 32 {
		t.Fatalf("capacities: %v, want them to shrink below 32 entries", caps)
	}
	for i := grown; i < len(caps); i++ {
		// Twice the entries, and what the allocation's size class adds
		// (at most a quarter more).
		if caps[i] >= caps[i-1] || caps[i] < 2*held[i] || caps[i] > 5*held[i]/2+8 {
			t.Fatalf("capacities %v holding %v entries: want each shrink to about twice the entries", caps, held)
		}
	}
	t.Logf("capacities %v, holding %v entries", caps, held)
}
