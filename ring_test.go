package keyrate

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestScaleTicks pins the tick of an exact log for the windows the package
// doc names, and checks that each is the finest of the series in range.
func TestScaleTicks(t *testing.T) {
	for _, c := range []struct {
		window time.Duration
		tick   int64
	}{
		{time.Second, 1},
		{2 * time.Second, 1},
		{3 * time.Second, 2},
		{10 * time.Second, 5},
		{time.Minute, 50},
		{time.Hour, 2_000},
		{24 * time.Hour, 50_000},
		{7 * 24 * time.Hour, 500_000},
	} {
		s := newScale(int64(c.window), 0)
		assert.Equal(t, c.tick, s.unit, "window %v", c.window)
		assert.Less(t, int64(c.window)/s.unit, int64(maxTicks), "window %v fits its ticks", c.window)
		step := uint8(0)
		for unitOf(step) != s.unit {
			step++
		}
		if step > 0 {
			assert.GreaterOrEqual(t, int64(c.window)/unitOf(step-1), int64(maxTicks), "window %v: a finer tick would not fit", c.window)
		}
		assert.True(t, s.holds(int64(c.window)))
		assert.True(t, s.holds(int64(s.span())), "window %v: the span %v holds", c.window, s.span())
		assert.False(t, s.holds(int64(s.span())+1), "window %v: nothing past the span %v", c.window, s.span())
		assert.Zero(t, int64(time.Millisecond)%s.unit, "a millisecond is whole ticks")
	}
}

// TestScaleDivision checks the division by multiplication against Go's
// division, for every tick of the series, resolutions of any length, and
// dividends across the whole range it serves.
func TestScaleDivision(t *testing.T) {
	check := func(t require.TestingT, s scale, n int64) {
		require.Equal(t, n/s.unit, s.quo(n), "%d / %d", n, s.unit)
		f := n / s.unit
		if n%s.unit != 0 {
			f++
		}
		require.Equal(t, f, s.ceil(n), "ceil(%d / %d)", n, s.unit)
		q := -n / s.unit
		if -n%s.unit != 0 {
			q--
		}
		require.Equal(t, q, s.floor(-n), "floor(%d / %d)", -n, s.unit)
	}
	edges := func(unit int64) []int64 {
		edges := []int64{0, 1, unit - 1, unit, unit + 1, 1<<62 - unit, 1<<62 - unit - 1}
		if unit < 1<<62/maxTicks {
			edges = append(edges, maxTicks*unit)
		}
		return edges
	}
	for step := range uint8(29) { // windows up to 2^63ns
		s := newScale(int64(maxTicks)*unitOf(step)-1, 0)
		require.Equal(t, unitOf(step), s.unit)
		for _, n := range edges(s.unit) {
			check(t, s, n)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		unit := rapid.Int64Range(1, int64(365*24*time.Hour)).Draw(t, "unit")
		s := newScale(unit, unit)
		n := rapid.OneOf(rapid.Int64Range(0, 1<<62-unit), rapid.SampledFrom(edges(unit))).Draw(t, "n")
		check(t, s, n)
	})
}

// TestRoundingUp checks an exact log's rounding against real instants that
// fall between ticks: an event counts from the end of its tick, so under a
// day's 50µs tick an event at 10µs holds its place until 24h+50µs, never
// leaving early, and a refusal's RetryAfter says so.
func TestRoundingUp(t *testing.T) {
	l, c := newManual(t, 1, 24*time.Hour)
	c.Set(t0.Add(10 * time.Microsecond))
	require.True(t, l.Allow("k"))
	d := l.Take("k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, 24*time.Hour+40*time.Microsecond, d.RetryAfter, "from 10µs to the end of its tick, 50µs, plus the window")
	c.Set(t0.Add(24*time.Hour + 49*time.Microsecond))
	assert.False(t, l.Allow("k"), "the event counts until its tick ends")
	c.Set(t0.Add(24*time.Hour + 50*time.Microsecond))
	assert.True(t, l.Allow("k"))
}

// TestWholeExpiryDropsInOneStep fills a log of a million events and lets
// the window pass: the next call finds the log empty and gives the ring
// back, and a log of which half expired keeps exactly the other half.
func TestWholeExpiryDropsInOneStep(t *testing.T) {
	l, c := newManual(t, 1_000_000, time.Minute)
	for range 500_000 {
		l.Allow("k")
	}
	c.Advance(30 * time.Second)
	for range 500_000 {
		l.Allow("k")
	}
	g := l.keys.load("k")
	require.Equal(t, uint32(1_000_000), g.n)
	require.False(t, g.wide)

	c.Advance(30 * time.Second)
	d := l.Take("k", 1)
	require.True(t, d.Allowed)
	assert.Equal(t, 499_999, d.Remaining, "the first half left at 60s, the second stays")
	c.Advance(time.Hour)
	d = l.Take("k", 1)
	require.True(t, d.Allowed)
	assert.Equal(t, 999_999, d.Remaining)
	assert.Same(t, &g.inline[0], g.ring, "the ring went back inside the log")
}

// TestTickFixedForLife moves a key between tiers whose longest windows
// are 10s and a day, and changes the default tier's policies: every event
// keeps the one tick the limiter chose for its longest window, 50µs, and
// keeps counting exactly. A window longer than that tick can count is
// refused, unless WithMaxWindow made room for it.
func TestTickFixedForLife(t *testing.T) {
	c := NewManualClock(t0)
	plan := func(key string) string { return key[:1] }
	l, err := NewPolicies([]Policy{{Name: "ten", Limit: 3, Window: 10 * time.Second}}, WithClock(c), WithJanitorInterval(0),
		WithTiers(plan, map[string][]Policy{"d": {{Name: "day", Limit: 5, Window: 24 * time.Hour}}}))
	require.NoError(t, err)
	defer l.Close()
	require.Equal(t, int64(50_000), l.scale.unit, "the day's tick, for every tier")

	require.True(t, l.AllowN("x", 2))
	c.Advance(3 * time.Second)
	require.NoError(t, l.SetTier("", []Policy{{Name: "day", Limit: 4, Window: 24 * time.Hour}}))
	d := l.Take("x", 1)
	require.True(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining, "both events of 0s still count, with this one")
	assert.Equal(t, 24*time.Hour-3*time.Second, d.RefillAfter, "the oldest, from 0s, leaves at 24h")

	c.Advance(time.Second)
	require.NoError(t, l.SetTier("", []Policy{{Name: "ten", Limit: 5, Window: 10 * time.Second}}))
	d = l.Take("x", 1)
	require.True(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining, "0s, 0s, 3s and 4s are all in the last 10s")
	assert.Equal(t, 6*time.Second, d.RefillAfter)

	err = l.SetTier("", []Policy{{Name: "long", Limit: 5, Window: 31 * time.Hour}})
	require.ErrorIs(t, err, ErrConfig, "a 50µs tick counts at most 29.8h")
	assert.Contains(t, err.Error(), "WithMaxWindow")
	assert.Equal(t, "ten", l.Policies()[0].Name, "a refused SetTier changes nothing")

	w, err := New(3, 10*time.Second, WithClock(c), WithJanitorInterval(0), WithMaxWindow(31*time.Hour))
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, int64(100_000), w.scale.unit)
	require.NoError(t, w.SetTier("", []Policy{{Name: "long", Limit: 5, Window: 31 * time.Hour}}))
	_, err = New(3, time.Second, WithMaxWindow(-1))
	require.ErrorIs(t, err, ErrConfig)
}

// TestResolutionMergesEntries checks WithResolution's entries: events of
// one tick share an entry, a weight is one entry whatever its size, and a
// key's log holds about window/d entries however high its limit.
func TestResolutionMergesEntries(t *testing.T) {
	l, c := newManual(t, 100_000, 24*time.Hour, WithResolution(time.Minute))
	for range 100 {
		c.Advance(time.Second) // 100 events from 1s to 100s: two ticks of a minute
		require.True(t, l.Allow("k"))
	}
	g := l.keys.load("k")
	assert.Equal(t, uint32(2), g.n)
	require.True(t, l.AllowN("k", 50_000))
	assert.Equal(t, uint32(2), g.n, "a weight joins the entry of its tick")
	d := l.Take("k", 49_901)
	require.False(t, d.Allowed)
	assert.Equal(t, 49_900, d.Remaining)
	// The events of 1-60s count from 1m, the end of their tick, and leave at
	// 24h+1m, up to a minute later than they would in an exact log.
	assert.Equal(t, 24*time.Hour+time.Minute-100*time.Second, d.RetryAfter)

	for range 24 * 60 {
		c.Advance(time.Minute)
		l.Allow("k")
	}
	assert.LessOrEqual(t, g.n, uint32(24*60+2), "a day of minutes, whatever the limit")
}

// TestResolutionConfig checks WithResolution's bounds.
func TestResolutionConfig(t *testing.T) {
	for _, c := range []struct {
		d        time.Duration
		policies []Policy
		ok       bool
	}{
		{time.Second, []Policy{{Name: "s", Limit: 1, Window: time.Second}}, true},
		{time.Second + 1, []Policy{{Name: "s", Limit: 1, Window: time.Second}}, false},
		{0, []Policy{{Name: "s", Limit: 1, Window: time.Second}}, false},
		{-time.Second, []Policy{{Name: "s", Limit: 1, Window: time.Second}}, false},
		{time.Minute, []Policy{{Name: "m", Limit: 1, Window: time.Minute}, {Name: "d", Limit: 1, Window: 24 * time.Hour}}, true},
		{time.Minute, []Policy{{Name: "s", Limit: 1, Window: time.Second}, {Name: "d", Limit: 1, Window: 24 * time.Hour}}, false},
		{time.Microsecond, []Policy{{Name: "d", Limit: 1, Window: 24 * time.Hour}}, false}, // a day is more than 2^31 microseconds
		{50 * time.Microsecond, []Policy{{Name: "d", Limit: 1, Window: 24 * time.Hour}}, true},
	} {
		l, err := NewPolicies(c.policies, WithResolution(c.d))
		if c.ok {
			require.NoError(t, err, "d %v, %v", c.d, c.policies)
			l.Close()
			continue
		}
		require.ErrorIs(t, err, ErrConfig, "d %v, %v", c.d, c.policies)
		t.Log(err)
	}
	l, err := New(10, time.Minute, WithResolution(time.Second))
	require.NoError(t, err)
	defer l.Close()
	assert.ErrorIs(t, l.SetTier("", []Policy{{Name: "half", Limit: 1, Window: time.Second / 2}}), ErrConfig, "a window shorter than d")
	assert.Equal(t, time.Minute, l.Policies()[0].Window, "and nothing changed")
}

// BenchmarkExpiry times the call that finds a full log's window passed:
// wholly, or all but its newest half. It does not walk the events, so it
// costs about the same at a limit of 1,000 as at 1,000,000.
func BenchmarkExpiry(b *testing.B) {
	for _, limit := range []int{1_000, 1_000_000} {
		for _, part := range []string{"whole", "half"} {
			b.Run(fmt.Sprintf("limit=%d/%s", limit, part), func(b *testing.B) {
				c := NewManualClock(t0)
				l, err := New(limit, time.Minute, WithClock(c), WithJanitorInterval(0))
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				for b.Loop() {
					b.StopTimer()
					l.Reset("k")
					l.AllowN("k", limit/2)
					c.Advance(30 * time.Second)
					l.AllowN("k", limit/2)
					c.Advance(30 * time.Second)
					if part == "whole" {
						c.Advance(30 * time.Second)
					}
					b.StartTimer()
					if !l.Allow("k") {
						b.Fatal("refused after the window passed")
					}
				}
			})
		}
	}
}

// TestAgeBoundMatchesWindowAge checks the window start a decision reads off
// its own tick, for a window of whole ticks, against windowAge's division:
// for every tick of the series, instants on and between tick ends, and
// windows up to the longest the scale holds.
func TestAgeBoundMatchesWindowAge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := scaleOf(unitOf(uint8(rapid.IntRange(0, 20).Draw(t, "step"))))
		k := rapid.Uint32Range(1, maxTicks).Draw(t, "ticks")
		w := int64(k) * s.unit
		now := rapid.Int64Range(0, 1<<62-s.unit).Draw(t, "now")
		if rapid.Bool().Draw(t, "on a tick's end") {
			now -= now % s.unit
		}
		r := s.ceil(now)
		require.Equal(t, windowAge(now, w, r, &s), ageBound(now, w, r, k, &s), "now %d, window %d ticks of %dns", now, k, s.unit)
		require.Equal(t, windowAge(now, w, r, &s), ageBound(now, w, r, 0, &s), "k = 0 divides")
	})
}
