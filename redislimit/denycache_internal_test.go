package redislimit

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// TestDenyCacheClock traces the cache's clock mapping at fixed local
// instants: exact when one clock drives both sides, and lapsing early by
// 0.1% of the time held when the server's clock may run at another rate.
func TestDenyCacheClock(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	tr := mustTier(t, keyrate.Policy{Limit: 3, Window: 20 * s})
	part := keyrate.PolicyDecision{Policy: tr.policies[0], RetryAfter: 10 * s, RefillAfter: 4 * s, ResetAfter: 12 * s}
	refusal := backend.Combine(part)
	at := func(el time.Duration) keyrate.Decision {
		p := part
		p.RetryAfter -= el
		p.RefillAfter -= el
		p.ResetAfter -= el
		return backend.Combine(p)
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
		{false, 1, 1500 * ms, at(1500 * ms), true},
		{false, 1, 4*s - time.Microsecond, at(4*s - time.Microsecond), true},
		{false, 1, 4*s - time.Nanosecond, keyrate.Decision{}, false}, // rounds up to the server's next microsecond
		{false, 1, 4 * s, keyrate.Decision{}, false},
		{false, 2, 0, keyrate.Decision{}, false}, // another weight: ask Redis
		{false, 1, -time.Microsecond, keyrate.Decision{}, false},
		{true, 1, 0, refusal, true},
		{true, 1, 1 * s, at(1001 * ms), true},
		{true, 1, 3996 * ms, at(3999996 * time.Microsecond), true},
		{true, 1, 3997 * ms, keyrate.Decision{}, false},
	} {
		dc := newDenyCache(10, time.Hour, c.stretch)
		dc.store("k", tr, 1, sent, refusal)
		got, ok := dc.refuse("k", tr, c.n, sent+int64(c.at))
		if ok != c.ok || got != c.want {
			t.Errorf("stretch %v, weight %d at +%v: got %+v, %v; want %+v, %v", c.stretch, c.n, c.at, got, ok, c.want, c.ok)
		}
	}
}

// mustTier returns the tier of policies.
func mustTier(t testing.TB, policies ...keyrate.Policy) *tier {
	t.Helper()
	tr, err := newTier("policies", policies)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestDenyCachePolicies traces a refusal under three policies: it is held
// until the first event leaves any policy's window (here a policy that had
// room), every policy's numbers counted down, and it is never used for the
// key under other policies, even ones equal to these.
func TestDenyCachePolicies(t *testing.T) {
	const s = time.Second
	policies := []keyrate.Policy{{Name: "second", Limit: 3, Window: s}, {Name: "minute", Limit: 5, Window: 60 * s}, {Name: "hour", Limit: 100, Window: 3600 * s}}
	tr := mustTier(t, policies...)
	parts := []keyrate.PolicyDecision{
		// Room under the second, whose one event leaves in 700ms: the
		// first change of any number.
		{Policy: policies[0], Allowed: true, Remaining: 2, RefillAfter: 700 * time.Millisecond, ResetAfter: 700 * time.Millisecond},
		{Policy: policies[1], Remaining: 0, RetryAfter: 30 * s, RefillAfter: 10 * s, ResetAfter: 59 * s},
		{Policy: policies[2], Allowed: true, Remaining: 95, RefillAfter: 3000 * s, ResetAfter: 3599 * s},
	}
	refusal := backend.Combine(parts...)
	if hold(&refusal) != 700*time.Millisecond {
		t.Fatalf("hold %v, want 700ms", hold(&refusal))
	}
	dc := newDenyCache(10, time.Hour, false)
	dc.store("k", tr, 1, 0, refusal)

	el := 699 * time.Millisecond
	got, ok := dc.refuse("k", tr, 1, int64(el))
	want := backend.Combine(
		keyrate.PolicyDecision{Policy: policies[0], Allowed: true, Remaining: 2, RefillAfter: time.Millisecond, ResetAfter: time.Millisecond},
		keyrate.PolicyDecision{Policy: policies[1], Remaining: 0, RetryAfter: 30*s - el, RefillAfter: 10*s - el, ResetAfter: 59*s - el},
		keyrate.PolicyDecision{Policy: policies[2], Allowed: true, Remaining: 95, RefillAfter: 3000*s - el, ResetAfter: 3599*s - el},
	)
	if !ok || got != want || got.Policy != "minute" || got.RetryAfter != 30*s-el {
		t.Fatalf("at +699ms: got %+v, %v\nwant %+v", got, ok, want)
	}
	if _, ok := dc.refuse("k", mustTier(t, policies...), 1, int64(el)); ok {
		t.Fatal("the refusal was used under another tier of the same policies")
	}
	dc.store("k", tr, 1, 0, refusal)
	if _, ok := dc.refuse("k", tr, 1, int64(700*time.Millisecond)); ok {
		t.Fatal("the refusal was used once the second's event had left its window")
	}
}

// TestDenyCacheBound checks that the cache keeps at most its size in
// entries, dropping the one that lapses soonest (or not taking a new one
// that would lapse sooner than all), and that refusals that can never fit
// or admissions are not kept.
func TestDenyCacheBound(t *testing.T) {
	dc := newDenyCache(2, time.Hour, false)
	tr := mustTier(t, keyrate.Policy{Limit: 1, Window: time.Minute})
	refusal := func(refill time.Duration) keyrate.Decision {
		return backend.Combine(keyrate.PolicyDecision{Policy: tr.policies[0], RetryAfter: refill, RefillAfter: refill, ResetAfter: refill})
	}
	dc.store("a", tr, 1, 0, refusal(3*time.Second))
	dc.store("b", tr, 1, 0, refusal(5*time.Second))
	dc.store("c", tr, 1, 0, refusal(4*time.Second)) // a goes
	dc.store("d", tr, 1, 0, refusal(1*time.Second)) // lapses before b and c: not kept
	dc.store("e", tr, 1, 0, backend.Combine(keyrate.PolicyDecision{Policy: tr.policies[0], Remaining: 1}))
	dc.store("f", tr, 1, 0, backend.Combine(keyrate.PolicyDecision{Policy: tr.policies[0], Allowed: true, RefillAfter: time.Second}))
	for key, want := range map[string]bool{"a": false, "b": true, "c": true, "d": false, "e": false, "f": false} {
		if _, ok := dc.refuse(key, tr, 1, 0); ok != want {
			t.Errorf("key %s cached: %v, want %v", key, ok, want)
		}
	}
	if len(dc.entries) != 2 || len(dc.order) != 2 {
		t.Fatalf("%d entries, %d in the heap; want 2", len(dc.entries), len(dc.order))
	}
	// A lapsed entry makes room before anything live is dropped.
	dc.store("g", tr, 1, int64(4500*time.Millisecond), refusal(time.Second))
	if _, ok := dc.refuse("b", tr, 1, int64(4500*time.Millisecond)); !ok {
		t.Error("b was dropped for g, though c had lapsed")
	}
	if _, ok := dc.refuse("g", tr, 1, int64(4500*time.Millisecond)); !ok {
		t.Error("g was not kept in place of the lapsed c")
	}
	dc.forget("b")
	if _, ok := dc.refuse("b", tr, 1, 0); ok || len(dc.entries) != 1 || len(dc.order) != 1 {
		t.Errorf("after forget: b cached %v, %d entries", ok, len(dc.entries))
	}
}

// TestDenyCacheMaxHold traces a refusal that Redis would stand by for an
// hour under a cache whose maximum hold is 1s: held, counted down, for
// just under the second, then asked of Redis again; and a refusal whose
// own hold is shorter than the maximum lapses at its own instant. With the
// clocks' rates allowed for, the bound lapses 0.1% early, like any hold.
func TestDenyCacheMaxHold(t *testing.T) {
	const s = time.Second
	tr := mustTier(t, keyrate.Policy{Limit: 1, Window: time.Hour})
	refusal := func(refill time.Duration) keyrate.Decision {
		return backend.Combine(keyrate.PolicyDecision{Policy: tr.policies[0], RetryAfter: refill, RefillAfter: refill, ResetAfter: refill})
	}
	for _, c := range []struct {
		stretch bool
		refill  time.Duration // Redis's RefillAfter: the refusal's own hold
		at      time.Duration // local, since the call was sent
		ok      bool
	}{
		{false, time.Hour, 0, true},
		{false, time.Hour, s - time.Microsecond, true},
		{false, time.Hour, s, false},
		{false, time.Hour, time.Minute, false},
		{false, 300 * time.Millisecond, 299 * time.Millisecond, true},
		{false, 300 * time.Millisecond, 300 * time.Millisecond, false},
		{true, time.Hour, 999 * time.Millisecond, true},
		{true, time.Hour, 999001 * time.Microsecond, false},
	} {
		dc := newDenyCache(10, s, c.stretch)
		dc.store("k", tr, 1, 0, refusal(c.refill))
		got, ok := dc.refuse("k", tr, 1, int64(c.at))
		if ok != c.ok {
			t.Errorf("stretch %v, refill %v, at +%v: cached %v, want %v", c.stretch, c.refill, c.at, ok, c.ok)
		}
		if ok && got.RetryAfter != c.refill-dc.elapsed(int64(c.at)) {
			t.Errorf("stretch %v, refill %v, at +%v: RetryAfter %v, want Redis's counted down", c.stretch, c.refill, c.at, got.RetryAfter)
		}
	}
}
