package keyrate

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCalendarJanitor: the janitor keeps a key while a count of a period
// not yet over is above 0, whatever tier counted it, and evicts it once
// every period has turned and no window holds an event.
func TestCalendarJanitor(t *testing.T) {
	start := time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)
	for _, a := range []Algorithm{SlidingLog, FixedWindow, GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			c := NewManualClock(start)
			plan := func(key string) string { return key }
			l, err := NewPolicies([]Policy{{Name: "minute", Limit: 10, Window: time.Minute}, {Name: "month", Limit: 10, Calendar: Monthly(1, time.UTC)}},
				WithClock(c), WithJanitorInterval(0), WithAlgorithm(a),
				WithTiers(plan, map[string][]Policy{"day": {{Name: "day", Limit: 3, Calendar: Daily(time.UTC)}}}))
			require.NoError(t, err)
			defer l.Close()
			require.True(t, l.AllowN("k", 10))
			for _, step := range []time.Duration{2 * time.Minute, 11 * 24 * time.Hour, time.Hour} {
				c.Advance(step)
				assert.Zero(t, l.sweep(l.now()), "the month holds its count")
				require.False(t, l.Allow("k"), "the month is spent")
			}
			c.Set(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC))
			assert.Equal(t, 1, l.sweep(l.now()), "a new month: nothing held")

			// A key that a tier without its calendar decided last is still
			// held by the count it left.
			require.True(t, l.AllowN("day", 3))
			require.NoError(t, l.SetTier("day", []Policy{{Limit: 5, Window: time.Second}}))
			require.True(t, l.Allow("day"))
			c.Advance(time.Hour)
			assert.Zero(t, l.sweep(l.now()), "the day's count of 3 holds the key")
			require.NoError(t, l.SetTier("day", []Policy{{Name: "day", Limit: 3, Calendar: Daily(time.UTC)}}))
			assert.False(t, l.Allow("day"), "the day is still spent")
			c.Advance(23 * time.Hour)
			assert.Equal(t, 1, l.sweep(l.now()))
		})
	}
}

// TestCalendarMakeRoomStartsAfresh: WithMaxKeys evicts the least recently
// decided keys, counts and all: the key evicted starts a fresh period.
func TestCalendarMakeRoomStartsAfresh(t *testing.T) {
	c := NewManualClock(time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC))
	l, err := NewPolicies([]Policy{{Limit: 1, Calendar: Monthly(1, time.UTC)}}, WithClock(c), WithJanitorInterval(0), WithMaxKeys(1))
	require.NoError(t, err)
	defer l.Close()
	require.True(t, l.Allow("a"))
	require.False(t, l.Allow("a"))
	c.Advance(time.Second)
	require.True(t, l.Allow("b"), "b makes room: a goes")
	assert.True(t, l.Allow("a"), "a's month starts again, as documented")
}

// TestMemoryPerCalendarKey fills keys under calendar policies alone to
// their whole limit and measures the live heap they cost, key strings and
// the map included: a counter per policy, whatever the limit.
func TestMemoryPerCalendarKey(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("fills 100k keys, slow under -short and the race detector")
	}
	for _, policies := range [][]Policy{
		{{Limit: 1_000_000, Calendar: Monthly(15, time.UTC)}},
		{{Name: "day", Limit: 10_000, Calendar: Daily(time.UTC)}, {Name: "week", Limit: 50_000, Calendar: Weekly(time.Monday, time.UTC)},
			{Name: "month", Limit: 1_000_000, Calendar: Monthly(1, time.UTC)}, {Name: "year", Limit: 2_000_000, Calendar: Monthly(1, time.UTC)}},
	} {
		l, err := NewPolicies(policies, WithJanitorInterval(0))
		require.NoError(t, err)
		const keys = 100_000
		names := make([]string, keys)
		limit := minLimitOf(policies)
		before := heapInUse()
		for i := range names {
			names[i] = fmt.Sprintf("client-%08d", i)
			for range 10 {
				require.True(t, l.AllowN(names[i], limit/10))
			}
			require.False(t, l.Allow(names[i]), "full")
		}
		perKey := float64(heapInUse()-before) / keys
		runtime.KeepAlive(names)
		t.Logf("%d calendar policies: %.1f bytes per key, each full", len(policies), perKey)
		assert.LessOrEqual(t, perKey, 256.0)
		l.Close()
	}
}
