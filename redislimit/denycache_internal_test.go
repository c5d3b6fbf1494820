package redislimit

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

// TestDenyCacheClock traces the cache's clock mapping at fixed local
// instants: exact when one clock drives both sides, and lapsing early by
// 0.1% of the time held when the server's clock may run at another rate.
func TestDenyCacheClock(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	refusal := keyrate.Decision{Limit: 3, Remaining: 0, RetryAfter: 10 * s, RefillAfter: 4 * s, ResetAfter: 12 * s}
	at := func(d keyrate.Decision, el time.Duration) keyrate.Decision {
		d.RetryAfter -= el
		d.RefillAfter -= el
		d.ResetAfter -= el
		return d
	}
	const sent = int64(5 * s)
	for _, c := range []struct {
		stretch bool
		n       int
		at      time.Duration // local, since the call was sent
		want    keyrate.Decision
		ok      bool
	}{
		{false, 1, 0, refusal, true},
		{false, 1, 1500 * ms, at(refusal, 1500*ms), true},
		{false, 1, 4*s - time.Microsecond, at(refusal, 4*s-time.Microsecond), true},
		{false, 1, 4*s - time.Nanosecond, keyrate.Decision{}, false}, // rounds up to the server's next microsecond
		{false, 1, 4 * s, keyrate.Decision{}, false},
		{false, 2, 0, keyrate.Decision{}, false}, // another weight: ask Redis
		{false, 1, -time.Microsecond, keyrate.Decision{}, false},
		{true, 1, 0, refusal, true},
		{true, 1, 1 * s, at(refusal, 1001*ms), true},
		{true, 1, 3996 * ms, at(refusal, 3999996*time.Microsecond), true},
		{true, 1, 3997 * ms, keyrate.Decision{}, false},
	} {
		dc := newDenyCache(10, c.stretch)
		dc.store("k", 1, sent, refusal)
		got, ok := dc.refuse("k", c.n, sent+int64(c.at))
		if ok != c.ok || got != c.want {
			t.Errorf("stretch %v, weight %d at +%v: got %+v, %v; want %+v, %v", c.stretch, c.n, c.at, got, ok, c.want, c.ok)
		}
	}
}

// TestDenyCacheBound checks that the cache keeps at most its size in
// entries, dropping the one that lapses soonest (or not taking a new one
// that would lapse sooner than all), and that refusals that can never fit
// or admissions are not kept.
func TestDenyCacheBound(t *testing.T) {
	dc := newDenyCache(2, false)
	refusal := func(refill time.Duration) keyrate.Decision {
		return keyrate.Decision{RetryAfter: refill, RefillAfter: refill, ResetAfter: refill}
	}
	dc.store("a", 1, 0, refusal(3*time.Second))
	dc.store("b", 1, 0, refusal(5*time.Second))
	dc.store("c", 1, 0, refusal(4*time.Second)) // a goes
	dc.store("d", 1, 0, refusal(1*time.Second)) // lapses before b and c: not kept
	dc.store("e", 1, 0, keyrate.Decision{Remaining: 1})
	dc.store("f", 1, 0, keyrate.Decision{Allowed: true, RefillAfter: time.Second})
	for key, want := range map[string]bool{"a": false, "b": true, "c": true, "d": false, "e": false, "f": false} {
		if _, ok := dc.refuse(key, 1, 0); ok != want {
			t.Errorf("key %s cached: %v, want %v", key, ok, want)
		}
	}
	if len(dc.entries) != 2 || len(dc.order) != 2 {
		t.Fatalf("%d entries, %d in the heap; want 2", len(dc.entries), len(dc.order))
	}
	// A lapsed entry makes room before anything live is dropped.
	dc.store("g", 1, int64(4500*time.Millisecond), refusal(time.Second))
	if _, ok := dc.refuse("b", 1, int64(4500*time.Millisecond)); !ok {
		t.Error("b was dropped for g, though c had lapsed")
	}
	if _, ok := dc.refuse("g", 1, int64(4500*time.Millisecond)); !ok {
		t.Error("g was not kept in place of the lapsed c")
	}
	dc.forget("b")
	if _, ok := dc.refuse("b", 1, 0); ok || len(dc.entries) != 1 || len(dc.order) != 1 {
		t.Errorf("after forget: b cached %v, %d entries", ok, len(dc.entries))
	}
}
