package keyrate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/stretchr/testify/require"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestCalendarPeriods: each period turns at local midnight of its
// boundary day: a billing day past a short month's end on its last day,
// leap years, daylight saving in New York both ways (23 and 25 hours), a
// week from Sunday, Tokyo's midnight.
func TestCalendarPeriods(t *testing.T) {
	ny, tokyo := zone(t, "America/New_York"), zone(t, "Asia/Tokyo")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	for _, c := range []struct {
		name       string
		cal        keyrate.Calendar
		t          time.Time
		start, end time.Time
	}{
		{"billing day 31 in February", keyrate.Monthly(31, time.UTC), at(time.UTC, 2027, 2, 28, 12, 0), at(time.UTC, 2027, 2, 28, 0, 0), at(time.UTC, 2027, 3, 31, 0, 0)},
		{"the day before", keyrate.Monthly(31, time.UTC), at(time.UTC, 2027, 2, 27, 23, 59), at(time.UTC, 2027, 1, 31, 0, 0), at(time.UTC, 2027, 2, 28, 0, 0)},
		{"a leap year's February", keyrate.Monthly(31, time.UTC), at(time.UTC, 2028, 2, 28, 12, 0), at(time.UTC, 2028, 1, 31, 0, 0), at(time.UTC, 2028, 2, 29, 0, 0)},
		{"day 30 in April", keyrate.Monthly(30, time.UTC), at(time.UTC, 2027, 4, 30, 0, 0), at(time.UTC, 2027, 4, 30, 0, 0), at(time.UTC, 2027, 5, 30, 0, 0)},
		{"day 1 across a year", keyrate.Monthly(1, time.UTC), at(time.UTC, 2027, 12, 31, 23, 59), at(time.UTC, 2027, 12, 1, 0, 0), at(time.UTC, 2028, 1, 1, 0, 0)},
		{"billing day 15 in January", keyrate.Monthly(15, ny), at(ny, 2027, 1, 3, 9, 0), at(ny, 2026, 12, 15, 0, 0), at(ny, 2027, 1, 15, 0, 0)},
		{"spring forward: 23 hours", keyrate.Daily(ny), at(ny, 2027, 3, 14, 12, 0), at(ny, 2027, 3, 14, 0, 0), at(ny, 2027, 3, 15, 0, 0)},
		{"fall back: 25 hours", keyrate.Daily(ny), at(ny, 2027, 11, 7, 12, 0), at(ny, 2027, 11, 7, 0, 0), at(ny, 2027, 11, 8, 0, 0)},
		{"a week from Sunday", keyrate.Weekly(time.Sunday, time.UTC), at(time.UTC, 2027, 1, 6, 12, 0), at(time.UTC, 2027, 1, 3, 0, 0), at(time.UTC, 2027, 1, 10, 0, 0)},
		{"a week from Monday, on Sunday", keyrate.Weekly(time.Monday, time.UTC), at(time.UTC, 2027, 1, 10, 23, 0), at(time.UTC, 2027, 1, 4, 0, 0), at(time.UTC, 2027, 1, 11, 0, 0)},
		{"Tokyo's midnight, in UTC", keyrate.Daily(tokyo), time.Date(2027, 1, 1, 14, 59, 0, 0, time.UTC), at(tokyo, 2027, 1, 1, 0, 0), at(tokyo, 2027, 1, 2, 0, 0)},
		{"Tokyo's next day", keyrate.Daily(tokyo), time.Date(2027, 1, 1, 15, 0, 0, 0, time.UTC), at(tokyo, 2027, 1, 2, 0, 0), at(tokyo, 2027, 1, 3, 0, 0)},
	} {
		start, end := backend.Period(c.cal, c.t)
		require.True(t, start.Equal(c.start), "%s: start %v, want %v", c.name, start, c.start)
		require.True(t, end.Equal(c.end), "%s: end %v, want %v", c.name, end, c.end)
	}
	s, e := backend.Period(keyrate.Daily(ny), at(ny, 2027, 3, 14, 12, 0))
	require.Equal(t, 23*time.Hour, e.Sub(s))
	s, e = backend.Period(keyrate.Daily(ny), at(ny, 2027, 11, 7, 12, 0))
	require.Equal(t, 25*time.Hour, e.Sub(s))
}

// TestCalendarPeriodsTile: over years, in several zones, each period
// starts where the one before ended, and holds the instants it is asked
// for.
func TestCalendarPeriodsTile(t *testing.T) {
	for _, loc := range []*time.Location{time.UTC, zone(t, "America/New_York"), zone(t, "Asia/Tokyo"), zone(t, "Australia/Lord_Howe")} {
		for _, cal := range []keyrate.Calendar{keyrate.Daily(loc), keyrate.Weekly(time.Wednesday, loc), keyrate.Monthly(29, loc), keyrate.Monthly(31, loc)} {
			now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			_, prev := backend.Period(cal, now)
			for range 400 {
				start, end := backend.Period(cal, prev)
				require.True(t, start.Equal(prev), "%v: the period after the one ending %v starts %v", cal, prev, start)
				require.True(t, end.After(start))
				mid := start.Add(end.Sub(start) / 2)
				s, e := backend.Period(cal, mid)
				require.True(t, s.Equal(start) && e.Equal(end), "%v at %v", cal, mid)
				s, _ = backend.Period(cal, end.Add(-time.Nanosecond))
				require.True(t, s.Equal(start), "%v: the last instant of a period", cal)
				prev = end
			}
		}
	}
}

// ExampleMonthly: a quota that turns on the 31st turns on a shorter
// month's last day.
func ExampleMonthly() {
	billing := keyrate.Monthly(31, time.UTC)
	for _, d := range []string{"2027-02-10", "2027-03-31", "2027-04-15"} {
		t, _ := time.Parse(time.DateOnly, d)
		start, end := backend.Period(billing, t)
		fmt.Printf("%s: %s to %s\n", d, start.Format(time.DateOnly), end.Format(time.DateOnly))
	}
	// Output:
	// 2027-02-10: 2027-01-31 to 2027-02-28
	// 2027-03-31: 2027-03-31 to 2027-04-30
	// 2027-04-15: 2027-03-31 to 2027-04-30
}
