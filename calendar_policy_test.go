package keyrate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// calendarLimiter returns a limiter of policies on a manual clock at start,
// with no janitor.
func calendarLimiter(t *testing.T, start time.Time, policies ...keyrate.Policy) (*keyrate.Limiter, *keyrate.ManualClock) {
	t.Helper()
	c := keyrate.NewManualClock(start)
	l, err := keyrate.NewPolicies(policies, keyrate.WithClock(c), keyrate.WithJanitorInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, c
}

// TestCalendarPolicyBoundaries spends a key's quota in one period and asks
// again a nanosecond before the next and at its first instant: refused
// with RetryAfter exactly the time until the turn, then admitted. The
// periods end on a short month's last day, in leap years and not, across
// daylight saving in New York both ways, on a week from Sunday, and at
// Tokyo's midnight.
func TestCalendarPolicyBoundaries(t *testing.T) {
	ny, tokyo := zone(t, "America/New_York"), zone(t, "Asia/Tokyo")
	utc := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }
	in := func(loc *time.Location, y int, m time.Month, d, h int) time.Time {
		return time.Date(y, m, d, h, 0, 0, 0, loc)
	}
	for _, c := range []struct {
		name     string
		cal      keyrate.Calendar
		at, turn time.Time
		period   time.Duration // of the period at
	}{
		{"billing day 31, February", keyrate.Monthly(31, time.UTC), utc(2027, 2, 10, 9), utc(2027, 2, 28, 0), 28 * 24 * time.Hour},
		{"billing day 31, April", keyrate.Monthly(31, time.UTC), utc(2027, 4, 15, 9), utc(2027, 4, 30, 0), 30 * 24 * time.Hour},
		{"billing day 30, a leap February", keyrate.Monthly(30, time.UTC), utc(2028, 2, 10, 9), utc(2028, 2, 29, 0), 30 * 24 * time.Hour},
		{"billing day 29, a leap year's", keyrate.Monthly(29, time.UTC), utc(2028, 2, 28, 23), utc(2028, 2, 29, 0), 31 * 24 * time.Hour},
		{"billing day 29, a common year's", keyrate.Monthly(29, time.UTC), utc(2027, 2, 27, 23), utc(2027, 2, 28, 0), 30 * 24 * time.Hour},
		{"spring forward: a day of 23 hours", keyrate.Daily(ny), in(ny, 2027, 3, 14, 12), in(ny, 2027, 3, 15, 0), 23 * time.Hour},
		{"fall back: a day of 25 hours", keyrate.Daily(ny), in(ny, 2027, 11, 7, 12), in(ny, 2027, 11, 8, 0), 25 * time.Hour},
		{"a month over spring forward", keyrate.Monthly(15, ny), in(ny, 2027, 3, 10, 12), in(ny, 2027, 3, 15, 0), 28*24*time.Hour - time.Hour},
		{"a week from Sunday", keyrate.Weekly(time.Sunday, time.UTC), utc(2027, 1, 6, 12), utc(2027, 1, 10, 0), 7 * 24 * time.Hour},
		{"a week from Sunday over fall back", keyrate.Weekly(time.Sunday, ny), in(ny, 2027, 11, 3, 12), in(ny, 2027, 11, 7, 0), 7 * 24 * time.Hour},
		{"Tokyo's midnight", keyrate.Daily(tokyo), utc(2027, 1, 1, 14), time.Date(2027, 1, 1, 15, 0, 0, 0, time.UTC), 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, clock := calendarLimiter(t, c.at, keyrate.Policy{Name: "quota", Limit: 3, Calendar: c.cal})
			until := c.turn.Sub(c.at)
			d := l.Take("k", 2)
			require.True(t, d.Allowed)
			assert.Equal(t, 1, d.Remaining)
			assert.Equal(t, c.period, d.Window, "the period's length")
			assert.Equal(t, c.period, d.Policies()[0].Period)
			assert.Equal(t, until, d.ResetAfter, "reset when the period turns")
			assert.Equal(t, until, d.RefillAfter)

			d = l.Take("k", 2)
			require.False(t, d.Allowed)
			assert.Equal(t, until, d.RetryAfter, "retry when the period turns, exactly")
			assert.Zero(t, l.Take("k", 4).RetryAfter, "more than the limit never fits")

			clock.Set(c.turn.Add(-time.Nanosecond))
			d = l.Take("k", 2)
			require.False(t, d.Allowed, "a nanosecond before the turn")
			assert.Equal(t, time.Nanosecond, d.RetryAfter)

			clock.Set(c.turn)
			d = l.Take("k", 3)
			require.True(t, d.Allowed, "the first instant of the next period")
			assert.Zero(t, d.Remaining)
			_, end := backend.Period(c.cal, c.turn)
			assert.Equal(t, end.Sub(c.turn), d.ResetAfter, "the next period's end")
			assert.Equal(t, end.Sub(c.turn), d.Window)
		})
	}
}

// TestCalendarPolicyConfig: a calendar policy has no window, a valid
// calendar, and only so is it taken; the error names the field.
func TestCalendarPolicyConfig(t *testing.T) {
	for _, c := range []struct {
		policy keyrate.Policy
		field  string
	}{
		{keyrate.Policy{Limit: 1, Calendar: keyrate.Monthly(0, time.UTC)}, "policies[0].Calendar"},
		{keyrate.Policy{Limit: 1, Calendar: keyrate.Monthly(32, time.UTC)}, "policies[0].Calendar"},
		{keyrate.Policy{Limit: 1, Calendar: keyrate.Daily(nil)}, "policies[0].Calendar"},
		{keyrate.Policy{Limit: 1, Calendar: keyrate.Weekly(7, time.UTC)}, "policies[0].Calendar"},
		{keyrate.Policy{Limit: 1, Window: time.Hour, Calendar: keyrate.Daily(time.UTC)}, "policies[0].Window"},
		{keyrate.Policy{Limit: 0, Calendar: keyrate.Daily(time.UTC)}, "policies[0].Limit"},
	} {
		err := backend.CheckPolicies("policies", []keyrate.Policy{c.policy})
		require.ErrorIs(t, err, keyrate.ErrConfig, "%+v", c.policy)
		assert.Contains(t, err.Error(), c.field)
		_, err = keyrate.NewPolicies([]keyrate.Policy{c.policy})
		require.ErrorIs(t, err, keyrate.ErrConfig)
	}
	require.NoError(t, backend.CheckPolicies("policies", []keyrate.Policy{{Limit: 1, Calendar: keyrate.Monthly(31, time.UTC)}}))

	// SetTier adds calendars to a limiter made with one, not to another.
	plan := func(string) string { return "pro" }
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Limit: 1, Window: time.Second}}, keyrate.WithTiers(plan, nil))
	require.NoError(t, err)
	defer l.Close()
	err = l.SetTier("pro", []keyrate.Policy{{Limit: 1, Calendar: keyrate.Daily(time.UTC)}})
	require.ErrorIs(t, err, keyrate.ErrConfig)
	assert.Contains(t, err.Error(), "calendar")
	m, err := keyrate.NewPolicies([]keyrate.Policy{{Limit: 1, Window: time.Second}},
		keyrate.WithTiers(plan, map[string][]keyrate.Policy{"day": {{Limit: 5, Calendar: keyrate.Daily(time.UTC)}}}))
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.SetTier("pro", []keyrate.Policy{{Name: "month", Limit: 2, Calendar: keyrate.Monthly(1, time.UTC)}, {Name: "second", Limit: 1, Window: time.Second}}))
	assert.True(t, m.Allow("k"))
}

// TestCalendarReservations: 64 concurrent reservations of 600 under
// 10,000 a month: exactly 16 fit.
func TestCalendarReservations(t *testing.T) {
	for _, a := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			l, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "month", Limit: 10_000, Calendar: keyrate.Monthly(1, time.UTC)}}, keyrate.WithAlgorithm(a))
			require.NoError(t, err)
			defer l.Close()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 64 {
				wg.Go(func() {
					<-start
					if l.Take("org", 600).Allowed {
						admitted.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			assert.Equal(t, int64(16), admitted.Load())
			assert.Equal(t, 399, l.Peek("org").Remaining, "400 left, less Peek's own")
		})
	}
}

// TestCalendarBesideSlidingConcurrent is LiteLLM's case: many concurrent
// calls of a few tokens each under 100 tokens a minute (a sliding window)
// and 1,000 a day (a calendar policy), over three days: no span of a
// minute and no day ever holds more than its limit, and both limits are
// reached.
func TestCalendarBesideSlidingConcurrent(t *testing.T) {
	ny := zone(t, "America/New_York")
	start := time.Date(2027, 3, 13, 20, 0, 0, 0, ny) // across a day of 23 hours
	l, clock := calendarLimiter(t, start,
		keyrate.Policy{Name: "minute", Limit: 100, Window: time.Minute},
		keyrate.Policy{Name: "day", Limit: 1000, Calendar: keyrate.Daily(ny)})
	type event struct {
		at time.Time
		n  int
	}
	var events []event
	var mu sync.Mutex
	refusedBy := map[string]int{}
	// Blocks of 90 rounds 20s apart, 6 hours between blocks: 78 hours.
	for round := range 12 * 90 {
		now := clock.Now()
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 4 {
					n := 1 + (g*7+i*3)%20
					d := l.Take("team", n)
					mu.Lock()
					if d.Allowed {
						events = append(events, event{now, n})
					} else {
						refusedBy[d.Policy]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if round%90 == 89 {
			clock.Advance(6 * time.Hour)
		} else {
			clock.Advance(20 * time.Second)
		}
	}
	require.Positive(t, refusedBy["minute"], "the minute's limit was reached")
	require.Positive(t, refusedBy["day"], "the day's limit was reached")
	perDay := map[time.Time]int{}
	for _, e := range events {
		s, _ := backend.Period(keyrate.Daily(ny), e.at)
		perDay[s] += e.n
		in := 0
		for _, f := range events {
			if since := f.at.Sub(e.at); since >= 0 && since < time.Minute {
				in += f.n
			}
		}
		require.LessOrEqual(t, in, 100, "the minute from %v", e.at)
	}
	for day, n := range perDay {
		require.LessOrEqual(t, n, 1000, "the day of %v", day)
	}
	require.GreaterOrEqual(t, len(perDay), 3)
}

// TestCalendarRefunds: a refund gives back to every policy, the calendar
// policy's count while its period lasts, and nothing to the next period.
func TestCalendarRefunds(t *testing.T) {
	start := time.Date(2027, 1, 31, 23, 58, 0, 0, time.UTC)
	l, clock := calendarLimiter(t, start,
		keyrate.Policy{Name: "minute", Limit: 10, Window: time.Minute},
		keyrate.Policy{Name: "month", Limit: 10, Calendar: keyrate.Monthly(1, time.UTC)})
	d := l.Take("k", 6)
	require.True(t, d.Allowed)
	clock.Advance(90 * time.Second) // the minute has let it go; the month still holds it
	require.NoError(t, l.RefundN(context.Background(), "k", &d, 2))
	peek := l.Peek("k")
	assert.Equal(t, 5, peek.Policies()[1].Remaining, "the month got 2 back: 4 held, and Peek's own")
	e := l.Take("k", 4)
	require.True(t, e.Allowed)
	clock.Set(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)) // a new month, the minute still holding e
	require.NoError(t, l.RefundN(context.Background(), "k", &e, 1), "the minute gives 1 back")
	peek = l.Peek("k")
	p := peek.Policies()
	assert.Equal(t, 6, p[0].Remaining, "the minute: 3 of e held, and Peek's own")
	assert.Equal(t, 9, p[1].Remaining, "the new month: Peek's own alone")
	require.True(t, l.Take("k", 2).Allowed, "the new month counts 2")
	clock.Advance(time.Hour)
	err := l.Refund(context.Background(), "k", &d)
	require.ErrorIs(t, err, keyrate.ErrNothingToRefund, "the month that held d is over, the minute let it go")
	peek = l.Peek("k")
	assert.Equal(t, 7, peek.Policies()[1].Remaining, "the new month gave nothing back for d: 2 held, and Peek's own")
}

// TestCalendarWait: Wait sleeps until the period turns.
func TestCalendarWait(t *testing.T) {
	start := time.Date(2027, 5, 31, 23, 0, 0, 0, time.UTC)
	l, clock := calendarLimiter(t, start, keyrate.Policy{Name: "day", Limit: 1, Calendar: keyrate.Daily(time.UTC)})
	require.True(t, l.Allow("k"))
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background(), "k") }()
	clock.Advance(59 * time.Minute)
	select {
	case err := <-done:
		t.Fatalf("woke before the turn: %v", err)
	default:
	}
	clock.Advance(time.Minute)
	require.NoError(t, <-done)
	assert.False(t, l.Allow("k"), "the wait took the new day's one")
}

// TestCalendarTakeAll: a user's daily quota and their organisation's
// monthly one, all or nothing.
func TestCalendarTakeAll(t *testing.T) {
	start := time.Date(2027, 6, 10, 12, 0, 0, 0, time.UTC)
	plan := func(key string) string {
		if key == "org" {
			return "org"
		}
		return ""
	}
	c := keyrate.NewManualClock(start)
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "day", Limit: 5, Calendar: keyrate.Daily(time.UTC)}},
		keyrate.WithClock(c), keyrate.WithJanitorInterval(0),
		keyrate.WithTiers(plan, map[string][]keyrate.Policy{"org": {{Name: "month", Limit: 8, Calendar: keyrate.Monthly(1, time.UTC)}}}))
	require.NoError(t, err)
	defer l.Close()
	_, ok, _ := l.TakeAll(context.Background(), []keyrate.Hit{{Key: "ann", Weight: 4}, {Key: "org", Weight: 4}})
	require.True(t, ok)
	ds, ok, _ := l.TakeAll(context.Background(), []keyrate.Hit{{Key: "ann", Weight: 2}, {Key: "org", Weight: 2}})
	require.False(t, ok, "ann's day has 1 left")
	assert.Equal(t, 12*time.Hour, ds[0].RetryAfter)
	_, ok, _ = l.TakeAll(context.Background(), []keyrate.Hit{{Key: "bob", Weight: 4}, {Key: "org", Weight: 4}})
	require.True(t, ok, "ann's refusal counted against neither")
	c.Advance(12 * time.Hour)
	ds, ok, _ = l.TakeAll(context.Background(), []keyrate.Hit{{Key: "ann", Weight: 1}, {Key: "org", Weight: 1}})
	require.False(t, ok, "the organisation's month is spent")
	assert.Equal(t, 20*24*time.Hour, ds[1].RetryAfter, "until July")
	assert.Equal(t, 4, l.Peek("ann").Remaining, "ann's new day is untouched")
}
