package redislimit

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// Calendar policies (keyrate.Policy.Calendar) are counted by the sliding
// log's script beside the sliding windows, in the same run and the same
// Redis key (slidinglog.go keeps a counter per calendar). Time zones stay
// in Go: for each calendar policy the client sends, in the tier's ARGV, the
// calendar's id and four boundaries around its own now (the previous
// period's start, the current one's start and end, and the next one's
// end), and the script picks the period that holds the server's instant,
// so that a client clock a little off still counts in Redis's period.

// calendarID identifies a calendar in the counters a key keeps: a hash of
// its description (kind, day and zone), never 0 (an empty counter), so
// that two policies of one calendar share a counter and a key whose tier
// changes keeps the count of every calendar both tiers have.
func calendarID(c keyrate.Calendar) uint32 {
	h := fnv.New32a()
	h.Write([]byte(c.String()))
	return max(h.Sum32(), 1)
}

// checkCalendar returns why the i-th policy p of field, a calendar one,
// cannot be counted, wrapping keyrate.ErrConfig, or nil.
func checkCalendar(field string, i int, p keyrate.Policy) error {
	at := calendarField(field, i)
	c := p.Calendar
	desc := c.String()
	var day int
	switch {
	case p.Window != 0:
		return fmt.Errorf("%w: %s has a Window of %v and a Calendar (%s), want one of them", keyrate.ErrConfig, at, p.Window, desc)
	case strings.HasPrefix(desc, "monthly") && (sscan(desc, "monthly on day %d", &day) != nil || day < 1 || day > 31):
		return fmt.Errorf("%w: %s is %s, want a billing day of 1 to 31", keyrate.ErrConfig, at, desc)
	case strings.HasPrefix(desc, "weekly from %!"):
		return fmt.Errorf("%w: %s is %s, want a time.Weekday", keyrate.ErrConfig, at, desc)
	}
	if start, _ := backend.Period(c, time.Unix(0, 0)); start.IsZero() {
		return fmt.Errorf("%w: %s has a nil location, want a time zone (time.UTC, time.LoadLocation)", keyrate.ErrConfig, at)
	}
	return nil
}

func sscan(s, format string, day *int) error {
	_, err := fmt.Sscanf(s, format, day)
	return err
}

// calendarField names the Calendar of the i-th policy of field in errors.
func calendarField(field string, i int) string {
	if field == "" {
		return "calendar"
	}
	return fmt.Sprintf("%s[%d].Calendar", field, i)
}

// appendBoundaries appends the boundaries of c around wall that the
// script picks the server's period from, in microseconds since the Unix
// epoch: the previous period's start, the current one's start and end,
// and the next one's end.
func appendBoundaries(args []any, c keyrate.Calendar, wall time.Time) []any {
	start, end := backend.Period(c, wall)
	prev, _ := backend.Period(c, start.Add(-time.Nanosecond))
	_, next := backend.Period(c, end)
	return append(args, prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro())
}

// checkAlgorithm refuses a tier with calendar policies under an algorithm
// other than the sliding log, whose state alone keeps their counters.
func (t *tier) checkAlgorithm(a keyrate.Algorithm) error {
	if t.calendar && a != keyrate.SlidingLog {
		return fmt.Errorf("%w: %s has a calendar policy, which needs the sliding log, not %v: only its state keeps the per-period counters", keyrate.ErrConfig, tierName(t.field), a)
	}
	return nil
}

// tierName names a tier in errors: its field, or "the limiter's policies".
func tierName(field string) string {
	if field == "" || field == "policies" {
		return "the limiter's policies"
	}
	return field
}

// calendarNow returns the client's instant that a batch's calendar
// boundaries are computed around: a test's hook, the test's clock at the
// batch's instant (µs), or the wall clock.
func (l *Limiter) calendarNow(instant int64) time.Time {
	switch {
	case l.calNow != nil:
		return l.calNow()
	case l.clock != nil:
		return time.UnixMicro(instant)
	}
	return time.Now()
}
