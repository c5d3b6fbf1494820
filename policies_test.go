package keyrate

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// newPolicies returns a limiter of policies on a manual clock at t0, with no
// janitor goroutine, closed when the test ends.
func newPolicies(t *testing.T, policies []Policy, opts ...Option) (*Limiter, *ManualClock) {
	t.Helper()
	c := NewManualClock(t0)
	l, err := NewPolicies(policies, append([]Option{WithClock(c), WithJanitorInterval(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, c
}

// fits is a policy's part when it has room; full, when it has not. The
// trace fills in the policy itself.
func fits(remaining int, refill, reset time.Duration) PolicyDecision {
	return PolicyDecision{Allowed: true, Remaining: remaining, RefillAfter: refill, ResetAfter: reset}
}

func full(remaining int, retry, refill, reset time.Duration) PolicyDecision {
	return PolicyDecision{Remaining: remaining, RetryAfter: retry, RefillAfter: refill, ResetAfter: reset}
}

// policyStep is one call in a trace under several policies: at offset at
// from t0, Take(key, n) must be decided by the policy named bind, with each
// policy's part as given.
type policyStep struct {
	at    time.Duration
	n     int
	bind  string
	parts []PolicyDecision
}

// runPolicyTrace plays steps on a limiter of policies through Take, and on
// a twin through AllowN, which must give the same answers.
func runPolicyTrace(t *testing.T, policies []Policy, l, twin *Limiter, c *ManualClock, steps []policyStep) {
	t.Helper()
	for i, st := range steps {
		c.Set(t0.Add(st.at))
		require.Len(t, st.parts, len(policies))
		for j := range st.parts {
			st.parts[j].Policy = policies[j]
		}
		want := combine(st.parts...)
		got := noReceipt(l.Take("k", st.n))
		assert.Equal(t, want, got, "step %d: Take(%d) at %v", i, st.n, st.at)
		assert.Equal(t, st.bind, got.Policy, "step %d: binding policy", i)
		assert.Equal(t, st.parts, got.Policies(), "step %d: parts", i)
		assert.Equal(t, want.Allowed, twin.AllowN("k", st.n), "step %d: AllowN(%d) at %v", i, st.n, st.at)
	}
}

// TestSecondAndDayTrace is the case the policies exist for: 10 per second
// and 1,000 per day. 99 seconds of full bursts bring the day to 990; from
// then on the day binds, and its refusals leave the second's budget whole.
func TestSecondAndDayTrace(t *testing.T) {
	const s, day = time.Second, 24 * time.Hour
	ms := time.Millisecond
	policies := []Policy{{Name: "second", Limit: 10, Window: s}, {Name: "day", Limit: 1000, Window: day}}
	l, c := newPolicies(t, policies)
	twin, err := NewPolicies(policies, WithClock(c), WithJanitorInterval(0))
	require.NoError(t, err)
	defer twin.Close()
	for i := range 99 {
		c.Set(t0.Add(time.Duration(i) * s))
		require.True(t, l.Take("k", 10).Allowed, "burst at %ds", i)
		require.True(t, twin.AllowN("k", 10), "burst at %ds", i)
	}
	runPolicyTrace(t, policies, l, twin, c, []policyStep{
		// The day's 1,000th event: both spent, the second binds (a tie goes
		// to the first given). The day's oldest events, from 0s, leave at 24h.
		{99 * s, 10, "second", []PolicyDecision{fits(0, s, s), fits(0, day-99*s, day)}},
		// Both refuse; the day's wait is the longer.
		{99*s + 500*ms, 1, "day", []PolicyDecision{
			full(0, 500*ms, 500*ms, 500*ms),
			full(0, day-99*s-500*ms, day-99*s-500*ms, day-500*ms)}},
		// The second has room, the day has none: refused, and nothing is
		// recorded against the second, whatever the weight.
		{100 * s, 1, "day", []PolicyDecision{fits(10, 0, 0), full(0, day-100*s, day-100*s, day-s)}},
		{100 * s, 10, "day", []PolicyDecision{fits(10, 0, 0), full(0, day-100*s, day-100*s, day-s)}},
		// Above the second's limit: it can never fit, so the second binds
		// with RetryAfter 0, though the day would make room for 11 at 24h+1s.
		{100 * s, 11, "second", []PolicyDecision{full(10, 0, 0, 0), full(0, day-99*s, day-100*s, day-s)}},
		// At 24h the events of 0s leave the day: room for 10.
		{day, 10, "second", []PolicyDecision{fits(0, s, s), fits(0, s, day)}},
		// Both refuse, both until 24h+1s (the second's events of 24h, the
		// day's of 1s): the tie goes to the second.
		{day, 1, "second", []PolicyDecision{full(0, s, s, s), full(0, s, s, day)}},
		{day + s, 10, "second", []PolicyDecision{fits(0, s, s), fits(0, s, day)}},
	})
	assert.Equal(t, l.Peek("k"), twin.Peek("k"), "the two paths recorded the same events")
}

// TestRefusalByLongPolicyRecordsNothing is the stacking bug: two limiters
// in a row record a request in the first even when the second refuses it.
// Here the refusals at 55s, by the minute, must not fill the short window,
// or the pair at 60s, when the minute frees two, would be refused.
func TestRefusalByLongPolicyRecordsNothing(t *testing.T) {
	l, c := newPolicies(t, []Policy{{Name: "burst", Limit: 2, Window: 10 * time.Second}, {Name: "minute", Limit: 3, Window: time.Minute}})
	require.True(t, l.AllowN("k", 2))
	c.Set(t0.Add(10 * time.Second))
	require.True(t, l.Allow("k"))
	c.Set(t0.Add(55 * time.Second))
	for range 5 {
		d := l.Take("k", 1)
		require.False(t, d.Allowed)
		require.Equal(t, "minute", d.Policy)
		require.True(t, d.Policies()[0].Allowed, "the burst alone has room")
		require.Equal(t, 2, d.Policies()[0].Remaining, "and keeps all of it")
	}
	c.Set(t0.Add(60 * time.Second))
	assert.True(t, l.AllowN("k", 2), "the minute freed two and the burst window holds nothing")
}

// TestPoliciesConcurrent fires 50 goroutines at one instant on 3 per second
// and 5 per minute: exactly 3 are admitted. A second later the second has
// room again but the minute only for 2; a second after that, for none.
func TestPoliciesConcurrent(t *testing.T) {
	l, c := newPolicies(t, []Policy{{Name: "second", Limit: 3, Window: time.Second}, {Name: "minute", Limit: 5, Window: time.Minute}})
	for _, phase := range []struct {
		admitted int
		bind     string // of the refusals
		retry    time.Duration
	}{
		{3, "second", time.Second},
		{2, "minute", 59 * time.Second},
		{0, "minute", 58 * time.Second},
	} {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		refusals := map[string]int{}
		start := make(chan struct{})
		for g := range 50 {
			wg.Go(func() {
				<-start
				if g%2 == 0 {
					if l.Allow("hot") {
						admitted.Add(1)
					}
					return
				}
				d := l.Take("hot", 1)
				if d.Allowed {
					admitted.Add(1)
					return
				}
				mu.Lock()
				refusals[fmt.Sprint(d.Policy, " ", d.RetryAfter)]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(phase.admitted), admitted.Load(), "at %v", c.Now().Sub(t0))
		for k := range refusals {
			assert.Equal(t, fmt.Sprint(phase.bind, " ", phase.retry), k, "at %v", c.Now().Sub(t0))
		}
		c.Advance(time.Second)
	}
}

// TestCombine checks the binding rule on its own, as every backend applies
// it.
func TestCombine(t *testing.T) {
	p := func(name string, allowed bool, remaining int, retry time.Duration) PolicyDecision {
		return PolicyDecision{Policy: Policy{Name: name, Limit: 10, Window: time.Minute}, Allowed: allowed, Remaining: remaining,
			RetryAfter: retry, ResetAfter: time.Minute, RefillAfter: time.Second}
	}
	cases := []struct {
		name    string
		parts   []PolicyDecision
		allowed bool
		bind    string
	}{
		{"one part allowed", []PolicyDecision{p("a", true, 3, 0)}, true, "a"},
		{"one part refused", []PolicyDecision{p("a", false, 0, 5)}, false, "a"},
		{"allowed: least remaining", []PolicyDecision{p("a", true, 4, 0), p("b", true, 2, 0), p("c", true, 3, 0)}, true, "b"},
		{"allowed: ties to the first", []PolicyDecision{p("a", true, 4, 0), p("b", true, 2, 0), p("c", true, 2, 0)}, true, "b"},
		{"refused: longest wait", []PolicyDecision{p("a", false, 0, 5), p("b", false, 0, 9), p("c", false, 0, 7)}, false, "b"},
		{"refused: ties to the first", []PolicyDecision{p("a", false, 0, 5), p("b", false, 0, 9), p("c", false, 0, 9)}, false, "b"},
		{"refused: a part with room never binds", []PolicyDecision{p("a", true, 0, 0), p("b", false, 3, 4)}, false, "b"},
		{"refused: never fits binds first", []PolicyDecision{p("a", false, 0, 9), p("b", false, 5, 0), p("c", false, 5, 0)}, false, "b"},
		{"refused: fewer remaining does not matter", []PolicyDecision{p("a", false, 9, 9), p("b", false, 0, 1)}, false, "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := combine(tc.parts...)
			assert.Equal(t, tc.allowed, d.Allowed)
			var b PolicyDecision
			for _, p := range tc.parts {
				if p.Name == tc.bind {
					b = p
				}
			}
			assert.Equal(t, tc.bind, d.Policy)
			assert.Equal(t, []any{b.Limit, b.Window, b.Remaining, b.RetryAfter, b.ResetAfter, b.RefillAfter},
				[]any{d.Limit, d.Window, d.Remaining, d.RetryAfter, d.ResetAfter, d.RefillAfter})
			assert.Equal(t, tc.parts, d.Policies())
			assert.False(t, d.Overflow)
		})
	}
	t.Run("no parts: refused", func(t *testing.T) {
		d := combine()
		assert.Equal(t, Decision{}, d)
		assert.Empty(t, d.Policies())
	})
	t.Run("more than maxPolicies", func(t *testing.T) {
		parts := []PolicyDecision{p("a", true, 5, 0), p("b", true, 5, 0), p("c", true, 5, 0), p("d", true, 5, 0), p("e", false, 0, 3)}
		require.Greater(t, len(parts), maxPolicies)
		d := combine(parts...)
		assert.False(t, d.Allowed, "every part counts")
		assert.Equal(t, "e", d.Policy)
		assert.Equal(t, time.Duration(3), d.RetryAfter)
		assert.Equal(t, parts[:maxPolicies], d.Policies())
	})
	t.Run("Policies does not let appends write into the Decision", func(t *testing.T) {
		d := combine(p("a", true, 1, 0))
		_ = append(d.Policies(), p("x", false, 0, 0))
		assert.Len(t, d.Policies(), 1)
		assert.Equal(t, PolicyDecision{}, d.parts[1])
	})
}

// TestTiers gives keys tiers by the prefix before "-": free keys get the
// default tier, "pro" keys their own, and keys naming a missing tier or
// whose tier function panics get the default tier.
func TestTiers(t *testing.T) {
	minute := time.Minute
	tierOf := func(key string) string {
		name, _, _ := strings.Cut(key, "-")
		if name == "panic" {
			panic("tier lookup failed")
		}
		return name
	}
	l, c := newPolicies(t, []Policy{{Name: "minute", Limit: 3, Window: minute}},
		WithTiers(tierOf, map[string][]Policy{"pro": {{Name: "minute", Limit: 10, Window: minute}}}))
	admitted := func(key string) int {
		n := 0
		for range 20 {
			if l.Allow(key) {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 3, admitted("free-a"))
	assert.Equal(t, 10, admitted("pro-a"))
	assert.Equal(t, 3, admitted("gold-a"), "a tier the map lacks: the default tier")
	assert.Equal(t, 3, admitted("panic-a"), "a tier function that panics: the default tier")
	d := l.Take("panic-a", 1)
	assert.Equal(t, Policy{Name: "minute", Limit: 3, Window: minute}, d.Policies()[0].Policy)
	assert.Equal(t, 0, noReceipt(l.Take("pro-a", 0)).Remaining, "pro-a spent its 10")

	// A new tier takes effect at the next decision, and counts the events
	// its keys already have.
	require.NoError(t, l.SetTier("gold", []Policy{{Name: "burst", Limit: 2, Window: time.Second}, {Name: "minute", Limit: 5, Window: minute}}))
	d = l.Take("gold-a", 1)
	require.False(t, d.Allowed, "gold-a's 3 events are in the burst window")
	assert.Equal(t, "burst", d.Policy)
	c.Advance(time.Second)
	d = l.Take("gold-a", 2)
	require.True(t, d.Allowed)
	assert.Equal(t, []int{0, 0}, []int{d.Policies()[0].Remaining, d.Policies()[1].Remaining}, "3 old events and 2 new against the minute")

	// Replacing a tier does the same, for every key in it.
	require.NoError(t, l.SetTier("pro", []Policy{{Name: "minute", Limit: 12, Window: minute}}))
	assert.Equal(t, 2, admitted("pro-a"))
	require.NoError(t, l.SetTier("", []Policy{{Name: "minute", Limit: 4, Window: minute}}))
	assert.Equal(t, 1, admitted("free-a"))
	assert.Equal(t, []Policy{{Name: "minute", Limit: 4, Window: minute}}, l.Policies())
	assert.Equal(t, 4, l.Policies()[0].Limit)
	assert.Equal(t, minute, l.Policies()[0].Window)
}

// TestTierChangeKeepsOnlyRetainedEvents moves a key from a tier of short
// windows to one of long windows: the events its old tier had already
// dropped do not count, those it still held do.
func TestTierChangeKeepsOnlyRetainedEvents(t *testing.T) {
	var tierName atomic.Value
	tierName.Store("short")
	l, c := newPolicies(t, []Policy{{Name: "hour", Limit: 100, Window: time.Hour}}, WithTiers(
		func(string) string { return tierName.Load().(string) },
		map[string][]Policy{"short": {{Name: "ten", Limit: 5, Window: 10 * time.Second}}, "long": {{Name: "minute", Limit: 5, Window: time.Minute}}}))
	require.True(t, l.AllowN("k", 3))
	c.Set(t0.Add(20 * time.Second))
	require.True(t, l.AllowN("k", 2)) // drops the events at 0s, gone from the ten-second window
	tierName.Store("long")
	d := l.Take("k", 0)
	assert.Equal(t, "minute", d.Policy)
	assert.Equal(t, 3, d.Remaining, "only the 2 events at 20s count against the minute")

	// A limit lowered below what a key holds leaves it no room, not less.
	require.NoError(t, l.SetTier("long", []Policy{{Name: "minute", Limit: 1, Window: time.Minute}}))
	d = l.Take("k", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 0, d.Remaining)
	assert.Equal(t, time.Minute, d.RetryAfter, "both events at 20s must leave")
}

// TestSetTierUnderTraffic swaps the default tier between two policy sets
// while goroutines decide on a few keys, for the race detector. Every
// Decision lists one set or the other, never a mix, and the events recorded
// under both are exactly the ones later decisions count.
func TestSetTierUnderTraffic(t *testing.T) {
	a := []Policy{{Name: "a", Limit: 5, Window: time.Minute}}
	b := []Policy{{Name: "b1", Limit: 3, Window: time.Minute}, {Name: "b2", Limit: 4, Window: time.Hour}}
	l, _ := newPolicies(t, a, WithMaxWindow(time.Hour))
	keys := []string{"k0", "k1", "k2", "k3"}
	var admitted [4]atomic.Int64
	stop := make(chan struct{})
	var setter sync.WaitGroup
	setter.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			next := a
			if i%2 == 0 {
				next = b
			}
			assert.NoError(t, l.SetTier("", next))
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := (g + i) % len(keys)
				d := l.Take(keys[k], 1)
				var names []string
				for _, p := range d.Policies() {
					names = append(names, p.Name)
				}
				if s := strings.Join(names, ","); s != "a" && s != "b1,b2" {
					t.Errorf("a Decision mixing policy sets: %s", s)
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	setter.Wait()
	require.NoError(t, l.SetTier("", a))
	for k, key := range keys {
		n := int(admitted[k].Load())
		assert.LessOrEqual(t, n, 5, "key %s", key)
		assert.GreaterOrEqual(t, n, 3, "key %s: each set admits at least 3", key)
		assert.Equal(t, 5-n, l.Take(key, 0).Remaining, "key %s: every admitted event counts", key)
	}
}

func TestPoliciesConfigErrors(t *testing.T) {
	s := time.Second
	tierOf := func(string) string { return "" }
	cases := []struct {
		name     string
		policies []Policy
		opts     []Option
		field    string
	}{
		{"none", nil, nil, "policies is empty"},
		{"too many", []Policy{{Name: "a", Limit: 1, Window: s}, {Name: "b", Limit: 1, Window: s}, {Name: "c", Limit: 1, Window: s}, {Name: "d", Limit: 1, Window: s}, {Name: "e", Limit: 1, Window: s}}, nil, "policies has 5 policies"},
		{"zero limit", []Policy{{Name: "a", Limit: 1, Window: s}, {Name: "b", Limit: 0, Window: s}}, nil, "policies[1].Limit"},
		{"huge limit", []Policy{{Name: "a", Limit: 1 << 31, Window: s}}, nil, "policies[0].Limit"},
		{"zero window", []Policy{{Name: "a", Limit: 1, Window: 0}}, nil, "policies[0].Window"},
		{"negative window", []Policy{{Name: "a", Limit: 1, Window: s}, {Name: "b", Limit: 1, Window: -s}}, nil, "policies[1].Window"},
		{"duplicate names", []Policy{{Name: "a", Limit: 1, Window: s}, {Name: "b", Limit: 2, Window: s}, {Name: "a", Limit: 3, Window: s}}, nil, `policies[2].Name "a" repeats policies[0].Name`},
		{"unnamed among several", []Policy{{Name: "a", Limit: 1, Window: s}, {Name: "", Limit: 2, Window: s}}, nil, "policies[1].Name is empty"},
		{"nil tier function", []Policy{{Name: "a", Limit: 1, Window: s}}, []Option{WithTiers(nil, nil)}, "tier function"},
		{"invalid tier", []Policy{{Name: "a", Limit: 1, Window: s}}, []Option{WithTiers(tierOf, map[string][]Policy{"pro": {{Name: "a", Limit: 1, Window: 0}}})}, `tiers["pro"][0].Window`},
		{"empty tier", []Policy{{Name: "a", Limit: 1, Window: s}}, []Option{WithTiers(tierOf, map[string][]Policy{"pro": {}})}, `tiers["pro"] is empty`},
		{"default tier in the map", []Policy{{Name: "a", Limit: 1, Window: s}}, []Option{WithTiers(tierOf, map[string][]Policy{"": {{Name: "a", Limit: 1, Window: s}}})}, `tiers[""]`},
		{"tier window within the coarse clock", []Policy{{Name: "a", Limit: 1, Window: s}}, []Option{WithCoarseClock(10 * time.Millisecond),
			WithTiers(tierOf, map[string][]Policy{"pro": {{Name: "a", Limit: 1, Window: 5 * time.Millisecond}}})}, "coarse clock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewPolicies(tc.policies, tc.opts...)
			assert.Nil(t, l)
			require.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), tc.field)
		})
	}

	t.Run("SetTier", func(t *testing.T) {
		plain, _ := newPolicies(t, []Policy{{Name: "a", Limit: 1, Window: s}})
		err := plain.SetTier("pro", []Policy{{Name: "a", Limit: 2, Window: s}})
		require.ErrorIs(t, err, ErrConfig, "no tier function: no key could be in it")
		assert.Contains(t, err.Error(), "WithTiers")
		require.ErrorIs(t, plain.SetTier("", nil), ErrConfig)
		err = plain.SetTier("", []Policy{{Name: "a", Limit: 0, Window: s}})
		require.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), "policies[0].Limit")
		assert.Equal(t, []Policy{{Name: "a", Limit: 1, Window: s}}, plain.Policies(), "a refused SetTier changes nothing")

		tiered, _ := newPolicies(t, []Policy{{Name: "a", Limit: 1, Window: s}}, WithTiers(tierOf, nil))
		err = tiered.SetTier("pro", []Policy{{Name: "a", Limit: 1, Window: s}, {Name: "a", Limit: 2, Window: s}})
		require.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), `tiers["pro"][1].Name`)

		coarse, err := NewPolicies([]Policy{{Name: "a", Limit: 1, Window: s}}, WithCoarseClock(time.Millisecond), WithJanitorInterval(0))
		require.NoError(t, err)
		defer coarse.Close()
		err = coarse.SetTier("", []Policy{{Name: "a", Limit: 1, Window: time.Millisecond}})
		require.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), "coarse clock")

		err = plain.SetTier("", []Policy{{Name: "a", Limit: 1, Window: 3 * s}})
		require.ErrorIs(t, err, ErrConfig, "a 1ns tick counts at most 2.1s")
		assert.Contains(t, err.Error(), "WithMaxWindow(3s)")
	})
}

// TestSweepWithPolicies evicts a key only once no event is left in the
// longest window of the tier that last decided it.
func TestSweepWithPolicies(t *testing.T) {
	tierOf := func(key string) string { name, _, _ := strings.Cut(key, "-"); return name }
	l, c := newPolicies(t, []Policy{{Name: "second", Limit: 1, Window: time.Second}, {Name: "minute", Limit: 5, Window: time.Minute}},
		WithTiers(tierOf, map[string][]Policy{"hourly": {{Name: "hour", Limit: 10, Window: time.Hour}}}))
	require.True(t, l.Allow("free-a"))
	require.True(t, l.Allow("hourly-a"))
	c.Set(t0.Add(30 * time.Second))
	assert.Equal(t, 0, l.sweep(l.now()), "both still hold an event in their longest window")
	c.Set(t0.Add(time.Minute))
	before := l.Peek("hourly-a")
	assert.Equal(t, 1, l.sweep(l.now()), "free-a is idle under its minute")
	assert.Equal(t, before, l.Peek("hourly-a"))
	c.Set(t0.Add(time.Hour))
	assert.Equal(t, 1, l.sweep(l.now()), "hourly-a is idle under its hour")
	assert.Equal(t, 0, l.Len())
}

// TestWaitWithPolicies waits for the policy with the longest wait: the
// second frees a slot a second after each event, the ten-second policy only
// when its oldest event leaves.
func TestWaitWithPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := NewPolicies([]Policy{{Name: "second", Limit: 1, Window: time.Second}, {Name: "ten", Limit: 2, Window: 10 * time.Second}})
		require.NoError(t, err)
		defer l.Close()
		start := time.Now()
		var at []time.Duration
		for range 4 {
			require.NoError(t, l.Wait(context.Background(), "k"))
			at = append(at, time.Since(start))
		}
		assert.Equal(t, []time.Duration{0, time.Second, 10 * time.Second, 11 * time.Second}, at)
		require.ErrorIs(t, l.WaitN(context.Background(), "k", 2), ErrExceedsLimit, "2 never fits the second")
	})
}

// TestErrorsCarryNoKey: keys are often credentials, so no error names one.
func TestErrorsCarryNoKey(t *testing.T) {
	const key = "sk-live-0123456789"
	synctest.Test(t, func(t *testing.T) {
		l, err := NewPolicies([]Policy{{Name: "second", Limit: 1, Window: time.Second}, {Name: "hour", Limit: 2, Window: time.Hour}})
		require.NoError(t, err)
		defer l.Close()
		require.True(t, l.Allow(key))
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		err = l.Wait(ctx, key)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotContains(t, err.Error(), key)
		err = l.WaitN(context.Background(), key, 2)
		require.ErrorIs(t, err, ErrExceedsLimit)
		assert.NotContains(t, err.Error(), key)
	})
}

// TestTakeAll checks a request that counts against several keys: admitted
// only when every key has room, recorded against all of them, and a
// refusal by one key leaves the others untouched.
func TestTakeAll(t *testing.T) {
	c := NewManualClock(t0)
	plan := func(key string) string { return key[:strings.IndexByte(key, ':')] }
	l, err := New(3, 10*time.Second, WithClock(c), WithJanitorInterval(0),
		WithTiers(plan, map[string][]Policy{"org": {{Name: "org", Limit: 4, Window: 10 * time.Second}}}))
	require.NoError(t, err)
	defer l.Close()

	ds, ok, _ := l.TakeAll(context.Background(), []Hit{{"user:a", 2}, {"org:x", 2}})
	require.True(t, ok)
	assert.Equal(t, []int{1, 2}, []int{ds[0].Remaining, ds[1].Remaining}, "each key under its own tier")

	c.Advance(time.Second)
	ds, ok, _ = l.TakeAll(context.Background(), []Hit{{"org:x", 3}, {"user:b", 3}})
	require.False(t, ok, "the org has 2 left")
	assert.False(t, ds[0].Allowed)
	assert.Equal(t, 9*time.Second, ds[0].RetryAfter)
	assert.True(t, ds[1].Allowed, "b had room")
	assert.Equal(t, 3, ds[1].Remaining, "and is described as it stands: nothing recorded")
	assert.Equal(t, 3, l.Peek("user:b").Remaining+1, "b holds nothing")
	assert.Equal(t, 2, l.Peek("org:x").Remaining+1, "nor does the org hold more")

	ds, ok, _ = l.TakeAll(context.Background(), []Hit{{"user:b", 1}, {"org:x", 1}, {"user:b", 1}})
	require.True(t, ok, "b counts twice: 2 of 3; the org once: 3 of 4")
	assert.Equal(t, ds[0], ds[2], "one Decision for both places of b")
	assert.Equal(t, 1, ds[0].Remaining)
	assert.Equal(t, 1, ds[1].Remaining)

	ds, ok, _ = l.TakeAll(context.Background(), []Hit{{"user:c", 4}, {"org:x", 4}})
	require.False(t, ok)
	assert.Zero(t, ds[0].RetryAfter, "4 can never fit user:c's limit of 3")
	assert.False(t, ds[0].Allowed)
	assert.Zero(t, l.Len()-3, "user:c was never tracked")

	ds, ok, _ = l.TakeAll(context.Background(), nil)
	assert.True(t, ok, "no key: nothing refuses")
	assert.Empty(t, ds)
}

// TestTakeAllConcurrent runs requests over overlapping keys, given in every
// order, from many goroutines while the janitor sweeps: no call waits on
// another in a cycle, and each key admits exactly its limit, counting the
// requests that named it.
func TestTakeAllConcurrent(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	c := NewManualClock(t0)
	l, err := New(40, time.Minute, WithClock(c), WithJanitorInterval(0))
	require.NoError(t, err)
	defer l.Close()
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				a, b := keys[(w+i)%len(keys)], keys[(w*3+i*7)%len(keys)]
				if _, ok, _ := l.TakeAll(context.Background(), []Hit{{a, 1}, {b, 1}}); ok {
					mu.Lock()
					admitted[a]++
					admitted[b]++
					mu.Unlock()
				}
				if i%50 == 0 {
					l.sweep(l.now())
				}
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		assert.LessOrEqual(t, admitted[k], 40, "key %s", k)
		d, _, _ := l.TakeAll(context.Background(), []Hit{{k, 0}})
		assert.Equal(t, admitted[k], 40-d[0].Remaining, "key %s holds what was admitted", k)
	}
}

// TestTakeAllWeights decides each key at its own weight: a request is
// admitted only when every key has room for its own, and a refusal records
// nothing anywhere.
func TestTakeAllWeights(t *testing.T) {
	c := NewManualClock(t0)
	l, err := New(10, time.Minute, WithClock(c), WithJanitorInterval(0))
	require.NoError(t, err)
	defer l.Close()

	ds, ok, _ := l.TakeAll(context.Background(), []Hit{{"a", 3}, {"b", 7}})
	require.True(t, ok)
	assert.Equal(t, []int{7, 3}, []int{ds[0].Remaining, ds[1].Remaining})

	ds, ok, _ = l.TakeAll(context.Background(), []Hit{{"a", 7}, {"b", 4}})
	require.False(t, ok, "b has 3 left, not 4")
	assert.True(t, ds[0].Allowed, "a had room for 7")
	assert.Equal(t, 7, ds[0].Remaining, "and is described as it stands")
	assert.False(t, ds[1].Allowed)
	assert.Equal(t, 6, l.Peek("a").Remaining, "a holds 3: nothing recorded by the refusal")

	ds, ok, _ = l.TakeAll(context.Background(), []Hit{{"b", 1}, {"a", 0}, {"b", 2}})
	require.True(t, ok, "b's weights add up to its 3 left; a's 0 fits")
	assert.Zero(t, ds[0].Remaining)
	assert.Equal(t, ds[0], ds[2])
	assert.Equal(t, 7, ds[1].Remaining)

	for _, hits := range [][]Hit{{{"c", 1}, {"d", -1}}, {{"c", 11}}, {{"c", 6}, {"c", 6}}, {{"c", math.MaxInt32}, {"c", math.MaxInt32}}} {
		ds, ok, _ = l.TakeAll(context.Background(), hits)
		assert.False(t, ok, "%v can never fit", hits)
		assert.Zero(t, ds[len(ds)-1].RetryAfter, "%v: waiting cannot help", hits)
	}
	assert.Equal(t, 10, l.Peek("c").Remaining+1, "the refusals recorded nothing")
}

// TestTakeAllBesideAFullMap makes new keys, two per call, beside goroutines
// that keep deciding many more keys than a tiny bound holds, so that every
// other key is newer than the instant a call read before its own keys were
// created: each call's new logs stay pinned until it decides them, instead
// of evicting each other for ever, and every call returns.
func TestTakeAllBesideAFullMap(t *testing.T) {
	defer goleak.VerifyNone(t)
	l, err := New(1000, time.Minute, WithJanitorInterval(0), WithMaxKeys(6))
	require.NoError(t, err)
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					l.Allow(fmt.Sprint("busy", (w*9+i)%36))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2_000 {
			ds, _, _ := l.TakeAll(context.Background(), []Hit{{fmt.Sprint("new", i, "a"), 1}, {fmt.Sprint("new", i, "b"), 1}})
			if !assert.Len(t, ds, 2) {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a watchdog: the calls take about a second
		close(stop)
		t.Fatal("TakeAll beside a full map did not return")
	}
	close(stop)
	wg.Wait()
	assert.LessOrEqual(t, l.Len(), 6)
}

// TestTakeAllPastTheBound asks for more new keys at once than the bound
// holds: no room can be made for the last of them while the call holds the
// others, so the request is refused with Overflow, and nothing is recorded.
func TestTakeAllPastTheBound(t *testing.T) {
	l, err := New(5, time.Minute, WithJanitorInterval(0), WithMaxKeys(2))
	require.NoError(t, err)
	defer l.Close()
	ds, ok, _ := l.TakeAll(context.Background(), []Hit{{"a", 1}, {"b", 1}, {"c", 1}})
	require.False(t, ok)
	overflows := 0
	for _, d := range ds {
		if d.Overflow {
			overflows++
		}
	}
	assert.Equal(t, 1, overflows, "one key had no room: %+v", ds)
	assert.Equal(t, 2, l.Len())
	for _, k := range []string{"a", "b", "c"} {
		assert.Equal(t, 5, l.Peek(k).Remaining+1, "%s holds nothing", k)
	}
	ds, ok, _ = l.TakeAll(context.Background(), []Hit{{"a", 1}, {"b", 1}})
	assert.True(t, ok, "two keys fit: %+v", ds)
}

// TestTakeAllWhileMakingRoom runs requests over two keys each, from more
// goroutines than a tiny key bound can hold at once, so that new keys keep
// evicting others between a call's lookups and its locks: every call
// returns, and the bound holds.
func TestTakeAllWhileMakingRoom(t *testing.T) {
	l, err := New(1000, time.Minute, WithJanitorInterval(0), WithMaxKeys(6))
	require.NoError(t, err)
	defer l.Close()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 300 {
				ds, _, _ := l.TakeAll(context.Background(), []Hit{{fmt.Sprint("k", (w+i)%9), 1}, {fmt.Sprint("k", (w*5+i)%9), 1}})
				assert.Len(t, ds, 2)
				assert.LessOrEqual(t, l.Len(), 6)
			}
		})
	}
	wg.Wait()
}
