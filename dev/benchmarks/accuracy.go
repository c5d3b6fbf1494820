package benchmarks

import (
	"fmt"
	"sort"
	"time"
)

// Driver is the time an accuracy scenario runs in: a virtual clock the test
// moves, or the real one (which a testing/synctest bubble also fakes).
type Driver interface {
	// Now is the instant the limiter sees.
	Now() time.Time
	// SleepUntil returns at or after t.
	SleepUntil(t time.Time)
}

// VirtualClock is a Driver whose time moves only when a scenario sleeps; it
// is for limiters that accept a clock (Config.Now).
type VirtualClock struct{ t time.Time }

// NewVirtualClock returns a VirtualClock reading start.
func NewVirtualClock(start time.Time) *VirtualClock { return &VirtualClock{t: start} }

// Now returns the clock's instant.
func (c *VirtualClock) Now() time.Time { return c.t }

// SleepUntil moves the clock to t, never backwards.
func (c *VirtualClock) SleepUntil(t time.Time) {
	if t.After(c.t) {
		c.t = t
	}
}

// RealClock is a Driver on the system clock, for limiters that read it
// themselves. Inside a testing/synctest bubble its time is the bubble's.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// SleepUntil sleeps until t.
func (RealClock) SleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// Scenario is one accuracy workload on a single fresh key: it calls allow
// at instants it chooses (sleeping on d in between) and returns the offsets
// from its start at which calls were admitted.
type Scenario struct {
	Name string
	Run  func(d Driver, allow func() bool, limit int, window time.Duration) []time.Duration
}

// BoundaryBurst is the 00:09/00:11 burst, in units of the window W: one
// event at 0 (so that windows which start at a key's first event start
// there), then 2*limit calls at 0.9W and 2*limit more at 1.1W. A fixed
// window admits nearly 2*limit within 0.2W; an exact window admits limit.
var BoundaryBurst = Scenario{
	Name: "boundary burst",
	Run: func(d Driver, allow func() bool, limit int, window time.Duration) []time.Duration {
		start := d.Now()
		var admitted []time.Duration
		burst := func(at time.Duration, calls int) {
			d.SleepUntil(start.Add(at))
			for range calls {
				if allow() {
					admitted = append(admitted, d.Now().Sub(start))
				}
			}
		}
		burst(0, 1)
		burst(window*9/10, 2*limit)
		burst(window*11/10, 2*limit)
		return admitted
	},
}

// SteadyOverload calls at twenty times the limit, evenly spaced, for three
// windows. A token bucket lets its burst plus a window of refill through
// in the first window; an exact window admits limit in every window.
var SteadyOverload = Scenario{
	Name: "steady overload (20x)",
	Run: func(d Driver, allow func() bool, limit int, window time.Duration) []time.Duration {
		start := d.Now()
		step := window / time.Duration(20*limit)
		var admitted []time.Duration
		for i := range 3 * 20 * limit {
			d.SleepUntil(start.Add(time.Duration(i) * step))
			if allow() {
				admitted = append(admitted, d.Now().Sub(start))
			}
		}
		return admitted
	},
}

// Scenarios lists the accuracy scenarios in table order.
var Scenarios = []Scenario{BoundaryBurst, SteadyOverload}

// MaxInWindow returns the most of the given instants that fall in any
// half-open interval (t-window, t]: the number an exact limiter keeps at or
// below its limit.
func MaxInWindow(at []time.Duration, window time.Duration) int {
	s := append([]time.Duration(nil), at...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	best, lo := 0, 0
	for hi := range s {
		for s[lo] <= s[hi]-window {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// Accuracy runs scenario sc against a fresh limiter from p, driven by d
// (d's clock is handed to limiters that accept one), and returns the most
// events it admitted in any window-length interval.
func Accuracy(p Peer, sc Scenario, d Driver, limit int, window time.Duration) (int, error) {
	at, err := Admitted(p, sc, d, limit, window)
	if err != nil {
		return 0, err
	}
	return MaxInWindow(at, window), nil
}

// Admitted runs scenario sc as Accuracy does and returns the instants, as
// offsets from the scenario's start on d's clock, at which calls were
// admitted, so that they can be counted over spans other than the window.
func Admitted(p Peer, sc Scenario, d Driver, limit int, window time.Duration) ([]time.Duration, error) {
	cfg := Config{Limit: limit, Window: window, Sweep: NoSweep}
	if p.Clock {
		cfg.Now = d.Now
	}
	l, err := p.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	defer l.Close()
	key := Key(0)
	return sc.Run(d, func() bool { return l.Allow(key) }, limit, window), nil
}
