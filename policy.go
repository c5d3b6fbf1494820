package keyrate

import (
	"errors"
	"fmt"
	"github.com/keyrate/keyrate/internal/access"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Policy is one limit: at most Limit events per key in any span of length
// Window, or, for a calendar policy, in each period of its Calendar.
type Policy struct {
	// Name names the policy in headers and metrics; "" only for a tier's
	// one policy.
	Name string
	// Limit is 1 to math.MaxInt32; Window positive, or 0 with a Calendar.
	Limit  int
	Window time.Duration
	// Calendar (Daily, Weekly, Monthly) makes a calendar policy, counted
	// per period (see Calendar), 12 bytes a key whatever the limit.
	// Default: none, a sliding window.
	Calendar Calendar
}

// maxPolicies is the most policies a Limiter or one of its tiers enforces
// together (backend.MaxPolicies): a Decision carries each one's numbers
// inline, with no allocation.
const maxPolicies = access.MaxPolicies

// ErrConfig is wrapped by every error for an invalid argument or option, of
// New, NewPolicies, NewConcurrency and SetTier; it names the field at fault.
var ErrConfig = errors.New("keyrate: invalid configuration")

// Algorithm is how a Limiter counts (WithAlgorithm). Decisions, policies,
// tiers, refunds and Wait work alike under each; the guarantee differs.
type Algorithm uint8

const (
	// SlidingLog, the default, is exact: at most limit events in any span
	// as long as the window, a log of their instants per key.
	SlidingLog Algorithm = iota
	// FixedWindow counts per calendar window (multiples of its length since
	// the Unix epoch), O(1) per key, but a client may spend a limit at the
	// end of one window and another at the start of the next: twice the
	// limit within one window's span.
	FixedWindow
	// GCRA is a token bucket of limit tokens refilled one per window/limit,
	// O(1) per key; after a burst it admits at the refill rate, so a span
	// of one window may hold nearly twice the limit.
	GCRA
)

// String names the algorithm.
func (a Algorithm) String() string {
	switch a {
	case SlidingLog:
		return "sliding log"
	case FixedWindow:
		return "fixed window"
	case GCRA:
		return "GCRA"
	}
	return fmt.Sprintf("Algorithm(%d)", a)
}

// tier is the set of policies that decide a key together: the Limiter's
// own (the default tier) or one of WithTiers'. It is immutable once built,
// so that decisions read it without a lock while SetTier publishes another.
type tier struct {
	policies []Policy
	// longest is the longest window, in nanoseconds: how long a key's log
	// keeps an event. Whatever left it no policy of the tier counts.
	longest int64
	// capacity bounds the ring of a key under this tier: the events left in
	// the longest window were all admitted by that window's policy, so they
	// number at most its limit.
	capacity int
	// minLimit is the smallest limit: a heavier request never fits.
	minLimit int
	// id is the tier's index in tierTable.byID. A log keeps the id of the
	// tier that last decided it, for the janitor.
	id uint16
	// scale is how the limiter's logs write instants (see scale), the same
	// in every tier; entries bounds their rings, and spans[i] the entries
	// policy i's window holds: its limit, or under WithResolution what its
	// window's ticks number if that is less.
	scale   scale
	entries int
	spans   [maxPolicies]uint32
	// ticks[i] is policy i's window in ticks when it is a whole number of
	// them (as every whole millisecond is), else 0: its windowAge is then
	// read off the decision's own tick, with no division (see lims).
	ticks [maxPolicies]uint32
	// longTicks is the longest window in ticks, when whole, else 0.
	longTicks uint32
	// cursors[i] is the inline slot of a log that keeps policy i's cursor
	// (eventLog.cursor), or -1: the policies shorter than the longest, by
	// widest span, take the free slots.
	cursors [maxPolicies]int8
	// cacheable reports that no cursor takes inline slot 0, where a narrow
	// log keeps its oldest entry's tick (eventLog.cache).
	cacheable bool
	// algorithm is the limiter's (WithAlgorithm). Under FixedWindow, wall
	// aligns the windows: the limiter's instant 0 is wall nanoseconds after
	// the Unix epoch. Under GCRA, refill[i] is policy i's ticks between
	// refills.
	algorithm Algorithm
	wall      int64
	refill    [maxPolicies]int64
	// cals has bit i set when policy i is a calendar policy, counted per
	// period (see calendarCounts); periods[i] caches its current period.
	cals    uint8
	periods [maxPolicies]atomic.Pointer[period]
	// lockFree reports that Allow may refuse under this tier without a
	// key's lock, from its refusal word: a sliding log with no calendar
	// policy, whose decision is the log's alone.
	lockFree bool
}

// checkPolicies returns why policies cannot be a tier, naming the field at
// fault in an error wrapping ErrConfig, or nil (see backend.CheckPolicies).
func checkPolicies(field string, policies []Policy) error {
	switch {
	case len(policies) == 0:
		return fmt.Errorf("%w: %s is empty, want 1 to %d policies", ErrConfig, field, maxPolicies)
	case len(policies) > maxPolicies:
		return fmt.Errorf("%w: %s has %d policies, want at most %d (backend.MaxPolicies)", ErrConfig, field, len(policies), maxPolicies)
	}
	for i, p := range policies {
		limit, window, name, calendar := policyField(field, i)
		err := p.Calendar.check()
		switch {
		case p.Limit < 1 || p.Limit > math.MaxInt32:
			return fmt.Errorf("%w: %s is %d, want 1 to %d", ErrConfig, limit, p.Limit, math.MaxInt32)
		case err != nil:
			return fmt.Errorf("%w: %s is %w", ErrConfig, calendar, err)
		case p.Calendar != (Calendar{}) && p.Window != 0:
			return fmt.Errorf("%w: %s is %v beside %s %v, want 0: a policy has a window or a calendar, not both", ErrConfig, window, p.Window, calendar, p.Calendar)
		case p.Calendar == (Calendar{}) && p.Window <= 0:
			return fmt.Errorf("%w: %s is %v, want > 0", ErrConfig, window, p.Window)
		case p.Name == "" && len(policies) > 1:
			return fmt.Errorf("%w: %s is empty, want a name for each of several policies", ErrConfig, name)
		}
		for j, q := range policies[:i] {
			if q.Name == p.Name {
				return fmt.Errorf("%w: %s %q repeats %s[%d].Name", ErrConfig, name, p.Name, field, j)
			}
		}
	}
	return nil
}

// policyField returns how checkPolicies names the Limit, Window, Name and
// Calendar of the i-th policy of field in its errors: "limit", "window", ""
// and "calendar" when field is "", else `tiers["pro"][1].Limit` and the
// like.
func policyField(field string, i int) (limit, window, name, calendar string) {
	if field == "" {
		return "limit", "window", "", "calendar"
	}
	at := fmt.Sprintf("%s[%d].", field, i)
	return at + "Limit", at + "Window", at + "Name", at + "Calendar"
}

// newTier validates policies (see checkPolicies) and builds their tier.
func newTier(field string, policies []Policy) (*tier, error) {
	if err := checkPolicies(field, policies); err != nil {
		return nil, err
	}
	t := &tier{policies: make([]Policy, len(policies)), minLimit: math.MaxInt32}
	copy(t.policies, policies)
	for i, p := range t.policies {
		t.minLimit = min(t.minLimit, p.Limit)
		if p.Calendar != (Calendar{}) {
			t.cals |= 1 << i
			continue // counted per period, not in the log
		}
		w := int64(p.Window)
		switch {
		case w > t.longest:
			t.longest, t.capacity = w, p.Limit
		case w == t.longest:
			t.capacity = min(t.capacity, p.Limit)
		}
	}
	return t, nil
}

// shortest returns the tier's shortest window, math.MaxInt64 when it has
// calendar policies alone.
func (t *tier) shortest() time.Duration {
	s := time.Duration(math.MaxInt64)
	for i, p := range t.policies {
		if !t.isCalendar(i) {
			s = min(s, p.Window)
		}
	}
	return s
}

// setup readies the tier for a limiter whose logs count in s's ticks
// (WithResolution's when s.res), with algorithm, whose instant 0 is wall
// nanoseconds after the Unix epoch, or returns why the tier's windows do
// not suit s: a resolution longer than a window, or a window longer than
// the ticks can hold.
func (t *tier) setup(s scale, algorithm Algorithm, wall int64) error {
	t.algorithm, t.wall, t.scale = algorithm, wall, s
	t.lockFree = algorithm == SlidingLog && t.cals == 0
	switch {
	case s.res && s.unit > int64(t.shortest()):
		return fmt.Errorf("%w: resolution is %v, want at most the shortest window, %v", ErrConfig, time.Duration(s.unit), t.shortest())
	case s.res && !s.holds(t.longest):
		return fmt.Errorf("%w: resolution is %v, want at least %v for the window %v",
			ErrConfig, time.Duration(s.unit), time.Duration(t.longest/maxTicks+1), time.Duration(t.longest))
	case !s.holds(t.longest):
		return fmt.Errorf("%w: window is %v, longer than this limiter holds (%v, from the longest window it was made with); make it with WithMaxWindow(%v)",
			ErrConfig, time.Duration(t.longest), s.span(), time.Duration(t.longest))
	}
	for i, p := range t.policies {
		t.refill[i] = 0
		if algorithm == GCRA && !t.isCalendar(i) {
			t.refill[i] = ceilDiv(ceilDiv(int64(p.Window), int64(p.Limit)), s.unit)
		}
	}
	t.entries = t.capacity
	t.longTicks = 0
	if t.longest%s.unit == 0 && s.holds(t.longest) {
		t.longTicks = uint32(t.longest / s.unit)
	}
	for i, p := range t.policies {
		t.ticks[i] = 0
		if w := int64(p.Window); w > 0 && w%s.unit == 0 && s.holds(w) {
			t.ticks[i] = uint32(w / s.unit)
		}
		t.spans[i] = uint32(p.Limit)
		if t.isCalendar(i) {
			t.spans[i] = 0
			continue
		}
		if s.res {
			ticks := int64(p.Window)/s.unit + 2
			t.spans[i] = uint32(min(int64(p.Limit), ticks))
			if int64(p.Window) == t.longest {
				t.entries = int(min(int64(t.entries), ticks))
			}
		}
	}
	t.placeCursors()
	return nil
}

// placeCursors gives the free inline slots of a heap log (two in a narrow
// log, slot 1 alone in a wide one) to the policies whose windows are
// shorter than the longest, widest span first, in slot 1: a cursor saves
// the most where a search would cover the most entries.
func (t *tier) placeCursors() {
	free := []int8{1, 0}
	order := make([]int, 0, len(t.policies))
	for i, p := range t.policies {
		t.cursors[i] = -1
		if int64(p.Window) < t.longest && !t.isCalendar(i) {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(t.spans[b]) - int(t.spans[a]) })
	for k, i := range order[:min(len(order), len(free))] {
		t.cursors[i] = free[k]
	}
	t.cacheable = len(order) < 2
}

// checkCoarse refuses a tier with a window no longer than WithCoarseClock's
// resolution (0: off), which could not tell its window's edges apart.
func checkCoarse(resolution time.Duration, t *tier) error {
	if s := t.shortest(); resolution > 0 && resolution >= s {
		return fmt.Errorf("%w: coarse clock resolution is %v, want > 0 and < the window %v", ErrConfig, resolution, s)
	}
	return nil
}

// isCalendar reports whether policy i of t is a calendar policy.
func (t *tier) isCalendar(i int) bool { return t.cals&(1<<i) != 0 }

// period returns the period of calendar policy i that holds instant now.
// Each tier keeps the period last found per policy, which serves every
// decision until it ends: a calendar's arithmetic runs once a period, not
// once a decision. The limiter's instant 0 is t.wall on the wall clock.
func (t *tier) period(i int, now int64) period {
	if p := t.periods[i].Load(); p != nil && p.start <= now && now < p.end {
		return *p
	}
	s, e := t.policies[i].Calendar.bounds(time.Unix(0, t.wall+now))
	p := &period{s.UnixNano() - t.wall, e.UnixNano() - t.wall}
	t.periods[i].Store(p)
	return *p
}
