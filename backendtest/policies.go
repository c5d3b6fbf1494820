package backendtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// NewPoliciesBackend returns a fresh backend for one multi-policy scenario:
// a key is admitted only when every one of policies admits it, deciding at
// clock's instants, with no events recorded for any key. It should register
// its own cleanup with t.Cleanup.
type NewPoliciesBackend func(t *testing.T, policies []keyrate.Policy, clock *keyrate.ManualClock) keyrate.Backend

// RunPolicies runs the suite's multi-policy scenarios against the backends
// newBackend makes, each as a subtest. Windows are whole seconds and
// instants whole microseconds, as in Run.
func RunPolicies(t *testing.T, newBackend NewPoliciesBackend) {
	t.Run("Trace", func(t *testing.T) { testPoliciesTrace(t, newBackend) })
	t.Run("RefusalsRecordNothing", func(t *testing.T) { testPoliciesRefusalsRecordNothing(t, newBackend) })
	t.Run("RetryAfterIsExact", func(t *testing.T) { testPoliciesRetryAfterIsExact(t, newBackend) })
	t.Run("Concurrent", func(t *testing.T) { testPoliciesConcurrent(t, newBackend) })
}

// fits is a policy's part when it has room for the request; full, when it
// has not. The trace fills in the policy.
func fits(remaining int, refill, reset time.Duration) keyrate.PolicyDecision {
	return keyrate.PolicyDecision{Allowed: true, Remaining: remaining, RefillAfter: refill, ResetAfter: reset}
}

func full(remaining int, retry, refill, reset time.Duration) keyrate.PolicyDecision {
	return keyrate.PolicyDecision{Remaining: remaining, RetryAfter: retry, RefillAfter: refill, ResetAfter: reset}
}

// policyStep is one row of a multi-policy trace: at offset from start,
// Take(key, n) must be decided by the policy named bind, with each policy's
// part as given, in the order of the policies.
type policyStep struct {
	at    time.Duration
	key   string
	n     int
	bind  string
	parts []keyrate.PolicyDecision
}

func runPolicyTrace(t *testing.T, newBackend NewPoliciesBackend, policies []keyrate.Policy, steps []policyStep) {
	t.Helper()
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, policies, clock)
	for i, s := range steps {
		clock.Set(start.Add(s.at))
		for j := range s.parts {
			s.parts[j].Policy = policies[j]
		}
		want := backend.Combine(s.parts...)
		got := take(t, b, s.key, s.n)
		if got != want || got.Policy != s.bind {
			t.Errorf("step %d: at +%v Take(%q, %d), binding %q\n got %+v\nwant %+v", i, s.at, s.key, s.n, s.bind, got, want)
		}
	}
}

// testPoliciesTrace walks keys under 3 per 2s and 5 per minute through
// every way the two can bind: the burst, the minute, a weight the burst can
// never fit, a weightless request, and ties.
func testPoliciesTrace(t *testing.T, newBackend NewPoliciesBackend) {
	const ms = time.Millisecond
	policies := []keyrate.Policy{{Name: "burst", Limit: 3, Window: 2 * s}, {Name: "minute", Limit: 5, Window: 60 * s}}
	runPolicyTrace(t, newBackend, policies, []policyStep{
		// Admitted: the policy with the least Remaining binds.
		{0, "k", 1, "burst", parts(fits(2, 2*s, 2*s), fits(4, 60*s, 60*s))},
		{0, "k", 2, "burst", parts(fits(0, 2*s, 2*s), fits(2, 60*s, 60*s))},
		// The burst refuses; the minute alone had room, and keeps it.
		{1 * s, "k", 1, "burst", parts(full(0, 1*s, 1*s, 1*s), fits(2, 59*s, 59*s))},
		{2 * s, "k", 2, "minute", parts(fits(1, 2*s, 2*s), fits(0, 58*s, 60*s))},
		// The minute refuses, the burst alone had room.
		{2500 * ms, "k", 1, "minute", parts(fits(1, 1500*ms, 1500*ms), full(0, 57500*ms, 57500*ms, 59500*ms))},
		// Above the burst's limit: never, so the burst binds with RetryAfter 0.
		{2500 * ms, "k", 4, "burst", parts(full(1, 0, 1500*ms, 1500*ms), full(0, 59500*ms, 57500*ms, 59500*ms))},
		{2500 * ms, "k", 0, "minute", parts(fits(1, 1500*ms, 1500*ms), fits(0, 57500*ms, 59500*ms))},
		{2500 * ms, "k", -1, "burst", parts(full(1, 0, 1500*ms, 1500*ms), full(0, 0, 57500*ms, 59500*ms))},
		// At 60s the three events of 0s leave the minute. A tie goes to the
		// policy given first, admitted or refused.
		{60 * s, "k", 3, "burst", parts(fits(0, 2*s, 2*s), fits(0, 2*s, 60*s))},
		{61 * s, "k", 1, "burst", parts(full(0, 1*s, 1*s, 1*s), full(0, 1*s, 1*s, 59*s))},
		{62 * s, "k", 1, "minute", parts(fits(2, 2*s, 2*s), fits(1, 58*s, 60*s))},
		// Another key is untouched by all of it.
		{62 * s, "other", 3, "burst", parts(fits(0, 2*s, 2*s), fits(2, 60*s, 60*s))},
	})
}

func parts(p ...keyrate.PolicyDecision) []keyrate.PolicyDecision { return p }

// testPoliciesRefusalsRecordNothing: refusals by the minute at 55s must not
// fill the 10s burst window, or the pair at 60s, when the minute frees two,
// would be refused. Two limiters stacked one after the other fail this.
func testPoliciesRefusalsRecordNothing(t *testing.T, newBackend NewPoliciesBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, []keyrate.Policy{{Name: "burst", Limit: 2, Window: 10 * s}, {Name: "minute", Limit: 3, Window: 60 * s}}, clock)
	for _, step := range []struct {
		at time.Duration
		n  int
	}{{0, 2}, {10 * s, 1}} {
		clock.Set(start.Add(step.at))
		if d := take(t, b, "x", step.n); !d.Allowed {
			t.Fatalf("filling at +%v: %+v", step.at, d)
		}
	}
	clock.Set(start.Add(55 * s))
	for range 5 {
		if d := take(t, b, "x", 1); d.Allowed || d.Policy != "minute" || !d.Policies()[0].Allowed {
			t.Fatalf("at +55s: got %+v, want refused by the minute alone", d)
		}
	}
	clock.Set(start.Add(60 * s))
	if d := take(t, b, "x", 2); !d.Allowed {
		t.Fatalf("at +60s: got %+v, want allowed (refusals must not have been recorded)", d)
	}
}

// testPoliciesRetryAfterIsExact waits exactly RetryAfter, which is the
// longest wait among the refusing policies, and finds the request fits;
// one microsecond less, and it does not.
func testPoliciesRetryAfterIsExact(t *testing.T, newBackend NewPoliciesBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, []keyrate.Policy{{Name: "short", Limit: 2, Window: 3 * s}, {Name: "long", Limit: 3, Window: 10 * s}}, clock)
	for _, at := range []time.Duration{0, 700 * time.Millisecond} {
		clock.Set(start.Add(at))
		if d := take(t, b, "r", 1); !d.Allowed {
			t.Fatalf("at +%v: refused while filling: %+v", at, d)
		}
	}
	clock.Set(start.Add(2500 * time.Millisecond))
	bound := map[string]bool{}
	for range 4 {
		d := take(t, b, "r", 1)
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("at %v: got %+v, want refused with RetryAfter > 0", clock.Now().Sub(start), d)
		}
		bound[d.Policy] = true
		clock.Advance(d.RetryAfter - time.Microsecond)
		if d := take(t, b, "r", 1); d.Allowed {
			t.Fatalf("admitted 1µs before RetryAfter, at %v: %+v", clock.Now().Sub(start), d)
		}
		clock.Advance(time.Microsecond)
		if d := take(t, b, "r", 1); !d.Allowed {
			t.Fatalf("refused at RetryAfter, at %v: %+v", clock.Now().Sub(start), d)
		}
	}
	if !bound["short"] || !bound["long"] {
		t.Fatalf("binding policies %v, want both to have bound a refusal", bound)
	}
}

// testPoliciesConcurrent fires 50 calls for one key at one instant under 3
// per second and 5 per minute: exactly 3 are admitted. A second later the
// minute has room for exactly 2 more.
func testPoliciesConcurrent(t *testing.T, newBackend NewPoliciesBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, []keyrate.Policy{{Name: "second", Limit: 3, Window: s}, {Name: "minute", Limit: 5, Window: 60 * s}}, clock)
	for _, want := range []int64{3, 2} {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		ready := make(chan struct{})
		for range 50 {
			wg.Go(func() {
				<-ready
				d, err := b.TakeContext(context.Background(), "hot", 1)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				} else if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		close(ready)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("50 concurrent calls: %d errors, first: %v", len(errs), errs[0])
		}
		if got := admitted.Load(); got != want {
			t.Fatalf("50 concurrent calls at +%v: admitted %d, want %d", clock.Now().Sub(start), got, want)
		}
		clock.Advance(s)
	}
}
