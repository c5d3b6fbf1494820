package keyrate

import (
	"fmt"
	"math"
	"time"
)

// Calendar is a policy's period as products sell quotas: a day, a week or
// a month of a time zone, turning at local midnight of its boundary day
// (daylight saving moves the instant, never the day). A policy with a
// Calendar (Window 0) admits at most Limit per period, counted per key,
// and starts from 0 when the period turns: no sliding. The zero Calendar
// is none.
type Calendar struct {
	kind calendarKind
	// day is, for Weekly, the time.Weekday it starts on; for Monthly, 1 to
	// 31. An int32 keeps a Calendar, and so a Policy and each part of a
	// Decision, 8 bytes smaller; a day past its range is kept at its end.
	day int32
	loc *time.Location
}

// clampDay returns d within int32, for Calendar.day: out of range either
// way, as check then says.
func clampDay(d int) int32 { return int32(max(min(d, math.MaxInt32), math.MinInt32)) }

type calendarKind uint8

const (
	noCalendar calendarKind = iota
	daily
	weekly
	monthly
)

// Daily returns the calendar day in loc, from local midnight to the next.
func Daily(loc *time.Location) Calendar { return Calendar{kind: daily, loc: loc} }

// Weekly returns the week in loc starting at local midnight of start.
func Weekly(start time.Weekday, loc *time.Location) Calendar {
	return Calendar{kind: weekly, day: clampDay(int(start)), loc: loc}
}

// Monthly returns the month in loc that turns at local midnight of day, a
// billing day of 1 to 31: in a month shorter than day, on its last day.
func Monthly(day int, loc *time.Location) Calendar {
	return Calendar{kind: monthly, day: clampDay(day), loc: loc}
}

// bounds returns the period of c that holds t: from start, inclusive, to
// end, exclusive; the zero span for the zero Calendar (backend.Period).
func (c Calendar) bounds(t time.Time) (start, end time.Time) {
	if c.kind == noCalendar || c.loc == nil {
		return time.Time{}, time.Time{}
	}
	lt := t.In(c.loc)
	y, m, d := lt.Date()
	switch c.kind {
	case daily:
		start = time.Date(y, m, d, 0, 0, 0, 0, c.loc)
		if start.After(t) { // a midnight that daylight saving skipped
			start = time.Date(y, m, d-1, 0, 0, 0, 0, c.loc)
		}
		return start, c.next(start)
	case weekly:
		back := (int(lt.Weekday()) - int(c.day) + 7) % 7
		start = time.Date(y, m, d-back, 0, 0, 0, 0, c.loc)
		if start.After(t) {
			start = time.Date(y, m, d-back-7, 0, 0, 0, 0, c.loc)
		}
		return start, c.next(start)
	}
	start = c.turn(y, m)
	if start.After(t) {
		start = c.turn(y, m-1)
	}
	return start, c.next(start)
}

// next returns the period after the one starting at start.
func (c Calendar) next(start time.Time) time.Time {
	y, m, d := start.In(c.loc).Date()
	switch c.kind {
	case daily:
		return time.Date(y, m, d+1, 0, 0, 0, 0, c.loc)
	case weekly:
		return time.Date(y, m, d+7, 0, 0, 0, 0, c.loc)
	}
	return c.turn(y, m+1)
}

// turn returns the instant a monthly period turns in month m of year y
// (normalised as time.Date does): local midnight of its day, or of the
// month's last day when the month is shorter.
func (c Calendar) turn(y int, m time.Month) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, c.loc)
	y, m, _ = first.Date()
	last := time.Date(y, m+1, 0, 0, 0, 0, 0, c.loc).Day()
	return time.Date(y, m, min(int(c.day), last), 0, 0, 0, 0, c.loc)
}

// String describes c: "daily in UTC", "weekly from Sunday in
// America/New_York", "monthly on day 31 in Asia/Tokyo".
func (c Calendar) String() string {
	zone := "nil location"
	if c.loc != nil {
		zone = c.loc.String()
	}
	switch c.kind {
	case daily:
		return "daily in " + zone
	case weekly:
		return fmt.Sprintf("weekly from %v in %s", time.Weekday(c.day), zone)
	case monthly:
		return fmt.Sprintf("monthly on day %d in %s", c.day, zone)
	}
	return "no calendar"
}

// check returns why c cannot be a policy's period, or nil.
func (c Calendar) check() error {
	switch {
	case c.kind == noCalendar:
		return nil
	case c.loc == nil:
		return fmt.Errorf("a nil location, want a time zone (time.UTC, time.LoadLocation)")
	case c.kind == weekly && (c.day < 0 || c.day > 6):
		return fmt.Errorf("weekly from day %d, want a time.Weekday", c.day)
	case c.kind == monthly && (c.day < 1 || c.day > 31):
		return fmt.Errorf("monthly on day %d, want 1 to 31", c.day)
	}
	return nil
}

// period is a calendar policy's period, in instants from the limiter's base:
// [start, end).
type period struct{ start, end int64 }
