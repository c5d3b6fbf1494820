package redislimit

import (
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/redis/go-redis/v9"
)

// NewPolicies returns a Limiter that admits a request for a key only when
// every policy has room, and then records it against all of them, as
// keyrate.NewPolicies does, atomically across every client of the Redis:
// one script run, one round trip and one Redis key, holding the longest
// window's events. It takes 1 to backend.MaxPolicies policies, each with a
// Limit of 1 to math.MaxInt32 and a Window of at least 1ms in whole
// microseconds, or a Calendar with Window 0, and a Name of its own when
// there are several; else, or for an invalid option, an error wrapping
// keyrate.ErrConfig names the field. It does not contact Redis.
func NewPolicies(client redis.UniversalClient, policies []keyrate.Policy, opts ...Option) (*Limiter, error) {
	def, err := newTier("policies", policies)
	if err != nil {
		return nil, err
	}
	return newLimiter(client, def, opts)
}

// tier is the set of policies that decide a key together: the Limiter's
// own (the default tier) or one of WithTiers'. It is immutable once built,
// so that decisions read it without a lock while SetTier publishes another,
// and a deny cache entry made under it is recognised by its address.
type tier struct {
	field    string // where the policies came from, for errors (see newTier)
	name     string // the tier's name, "" for the default tier
	policies []keyrate.Policy
	// args are the scripts' ARGV after the weight and the instant: limit
	// and window (in microseconds, 0 for a calendar policy) of each
	// policy, boxed once.
	args []any
	// calendar reports a calendar policy among them; ids[i] is policy i's
	// calendarID, 0 for a sliding one.
	calendar bool
	ids      []uint32
}

// newTier validates policies and builds their tier. field names where they
// came from in the caller's terms ("policies", `tiers["pro"]`), and "" for
// New's one policy, whose errors name its arguments (limit, window) alone.
func newTier(field string, policies []keyrate.Policy) (*tier, error) {
	// The core's check, with each calendar policy's period as a stand-in
	// window: the calendar is checked here.
	check := make([]keyrate.Policy, len(policies))
	for i, p := range policies {
		if check[i] = p; p.Calendar != (keyrate.Calendar{}) {
			check[i].Window, check[i].Calendar = time.Hour, keyrate.Calendar{}
		}
	}
	if err := backend.CheckPolicies(field, check); err != nil {
		return nil, err
	}
	t := &tier{field: field, policies: make([]keyrate.Policy, len(policies)), args: make([]any, 0, 2*len(policies)),
		ids: make([]uint32, len(policies))}
	copy(t.policies, policies)
	for i, p := range t.policies {
		if p.Calendar != (keyrate.Calendar{}) {
			if err := checkCalendar(field, i, p); err != nil {
				return nil, err
			}
			t.calendar, t.ids[i] = true, calendarID(p.Calendar)
			t.args = append(t.args, p.Limit, int64(0))
			continue
		}
		if p.Window < time.Millisecond || p.Window%time.Microsecond != 0 {
			// The scripts count in the microseconds of Redis TIME.
			return nil, fmt.Errorf("%w: %s is %v, want at least 1ms in whole microseconds", keyrate.ErrConfig, windowField(field, i), p.Window)
		}
		t.args = append(t.args, p.Limit, p.Window.Microseconds())
	}
	return t, nil
}

// lengthen makes t's scripts look back d further than its windows, as
// every decision of a Limiter with leases of d must (lease.go); its
// policies, which Decisions name, keep their windows. Only a tier not yet
// published may be lengthened.
func (t *tier) lengthen(d time.Duration) {
	for i := 1; i < len(t.args); i += 2 {
		if t.ids[i/2] != 0 {
			continue // a calendar policy: WithLeases refuses its tier
		}
		t.args[i] = t.args[i].(int64) + d.Microseconds()
	}
}

// minLimit returns the least limit of t's policies.
func (t *tier) minLimit() int {
	m := t.policies[0].Limit
	for _, p := range t.policies[1:] {
		m = min(m, p.Limit)
	}
	return m
}

// Policies returns a copy of the default tier's policies, in the order they
// were given: for New, one policy with an empty name. Middleware reads it to
// advertise them when it has no Decision at hand. A key in another tier
// (WithTiers) is under that tier's policies, which its Decisions list.
func (l *Limiter) Policies() []keyrate.Policy {
	return append([]keyrate.Policy(nil), l.tiers.Load().def.policies...)
}

// Limit returns the limit of the default tier's first policy: New's limit.
// A Limiter of several policies lists them all with Policies.
func (l *Limiter) Limit() int { return l.tiers.Load().def.policies[0].Limit }

// Window returns the window of the default tier's first policy: New's
// window. A Limiter of several policies lists them all with Policies.
func (l *Limiter) Window() time.Duration { return l.tiers.Load().def.policies[0].Window }

// checkResolution returns an error wrapping keyrate.ErrConfig when a
// policy's window is shorter than the resolution res (0: none): an event
// moved up to res later would then count against that policy for more than
// twice its window.
func (t *tier) checkResolution(res time.Duration) error {
	for i, p := range t.policies {
		if p.Window >= res || p.Calendar != (keyrate.Calendar{}) {
			continue
		}
		return fmt.Errorf("%w: %s is %v, shorter than the resolution %v", keyrate.ErrConfig, windowField(t.field, i), p.Window, res)
	}
	return nil
}

// windowField names the Window of the i-th policy of field in errors, as
// backend.CheckPolicies does.
func windowField(field string, i int) string {
	if field == "" {
		return "window"
	}
	return fmt.Sprintf("%s[%d].Window", field, i)
}
