package keyrate

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// model is the naive reference: per tracked key a plain slice of the
// instants it admitted, scanned in full, once per policy, for each decision.
// It mirrors the limiter's observable state (which keys are tracked, the
// newest instant each was decided at, the floor left by evictions, and that
// a key forgets what left its longest window) but none of its arithmetic:
// no ring, no shared log, no one-comparison rule, no binary search.
type model struct {
	policies []Policy
	keys     map[string]*modelKey
	floor    int64
	history  map[string][]int64 // every admitted instant, for the exactness check
}

type modelKey struct {
	events []int64
	last   int64
}

func newModel(policies []Policy) *model {
	return &model{policies: policies, keys: map[string]*modelKey{}, history: map[string][]int64{}}
}

func (m *model) longest() int64 {
	var w time.Duration
	for _, p := range m.policies {
		w = max(w, p.Window)
	}
	return int64(w)
}

func (m *model) minLimit() int {
	l := m.policies[0].Limit
	for _, p := range m.policies {
		l = min(l, p.Limit)
	}
	return l
}

// inWindow returns the events in (now-window, now].
func inWindow(events []int64, now, window int64) []int64 {
	var in []int64
	for _, e := range events {
		if now-window < e && e <= now {
			in = append(in, e)
		}
	}
	return in
}

func (m *model) decide(key string, n int, now int64, record bool) Decision {
	k, tracked := m.keys[key]
	if !tracked {
		k = &modelKey{last: m.floor}
		if record && n >= 1 && n <= m.minLimit() {
			m.keys[key] = k
		}
	}
	now = max(now, k.last)
	k.last = now
	k.events = inWindow(k.events, now, m.longest())

	var d Decision
	d.nparts = len(m.policies)
	parts := d.parts[:d.nparts]
	allowed := true
	for i, p := range m.policies {
		w := int64(p.Window)
		in := inWindow(k.events, now, w)
		parts[i] = PolicyDecision{Policy: p, Remaining: max(p.Limit-len(in), 0)}
		switch {
		case n == 0:
			parts[i].Allowed = true
		case n < 0 || n > p.Limit:
		case len(in)+n <= p.Limit:
			parts[i].Allowed = true
		default:
			// The earliest instant t >= now at which the events still in
			// (t-w, t] leave room for n, found by trying every candidate.
			best := int64(-1)
			for _, e := range in {
				t := e + w
				if len(inWindow(in, t, w))+n <= p.Limit && (best < 0 || t < best) {
					best = t
				}
			}
			parts[i].RetryAfter = time.Duration(best - now)
		}
		allowed = allowed && parts[i].Allowed
	}
	admitted := allowed && n > 0
	if admitted && record {
		for range n {
			k.events = append(k.events, now)
			m.history[key] = append(m.history[key], now)
		}
	}
	for i, p := range m.policies {
		w := int64(p.Window)
		in := inWindow(k.events, now, w)
		if admitted && !record {
			in = append(in, now) // Peek describes the window as Take would leave it
		}
		if admitted {
			parts[i].Remaining -= n
		}
		if len(in) > 0 {
			parts[i].RefillAfter = time.Duration(slices.Min(in) + w - now)
			parts[i].ResetAfter = time.Duration(slices.Max(in) + w - now)
		}
	}

	// The binding part: refused, the first that can never fit, else the
	// first of the longest RetryAfter; admitted, the first of the least
	// Remaining.
	b := parts[0]
	if allowed {
		b = slices.MinFunc(parts, func(x, y PolicyDecision) int { return x.Remaining - y.Remaining })
	} else {
		var refusing []PolicyDecision
		for _, p := range parts {
			if !p.Allowed {
				refusing = append(refusing, p)
			}
		}
		b = slices.MaxFunc(refusing, func(x, y PolicyDecision) int { return int(x.RetryAfter - y.RetryAfter) })
		if i := slices.IndexFunc(refusing, func(p PolicyDecision) bool { return p.RetryAfter == 0 }); i >= 0 {
			b = refusing[i]
		}
	}
	d.Allowed, d.Policy, d.Limit, d.Window = allowed, b.Name, b.Limit, b.Window
	d.Remaining, d.RetryAfter, d.ResetAfter, d.RefillAfter = b.Remaining, b.RetryAfter, b.ResetAfter, b.RefillAfter
	return d
}

// overflow is the refusal of an untracked key when WithMaxKeys is full:
// every policy's wait is the longest window, an estimate of when room comes
// back, and the first policy binds.
func (m *model) overflow() Decision {
	w := time.Duration(m.longest())
	d := Decision{Policy: m.policies[0].Name, Limit: m.policies[0].Limit, Window: m.policies[0].Window,
		RetryAfter: w, RefillAfter: w, ResetAfter: w, Overflow: true, nparts: len(m.policies)}
	for i, p := range m.policies {
		d.parts[i] = PolicyDecision{Policy: p, RetryAfter: w, RefillAfter: w, ResetAfter: w}
	}
	return d
}

// overflowDecision is the refusal of an untracked key under one unnamed
// policy when WithMaxKeys is full.
func overflowDecision(limit int, window time.Duration) Decision {
	return newModel([]Policy{{Limit: limit, Window: window}}).overflow()
}

// makeRoom mirrors a limiter at its bound of maxKeys that makes room for a
// new key: it reads which of the model's keys the limiter no longer tracks,
// checks that they are as many as one batch evicts and that none of them
// was decided after a key kept, and forgets them as the limiter did, raising
// the floor. Which of several keys decided at one instant goes is the
// limiter's choice.
func (m *model) makeRoom(t require.TestingT, maxKeys int, tracked func(key string) bool) {
	var gone []string
	for key := range m.keys {
		if !tracked(key) {
			gone = append(gone, key)
		}
	}
	require.Len(t, gone, min(max(maxKeys/roomShare, 1), len(m.keys)), "keys evicted to make room")
	for key, k := range m.keys {
		if slices.Contains(gone, key) {
			continue
		}
		for _, g := range gone {
			require.LessOrEqual(t, m.keys[g].last, k.last, "%q evicted, decided after %q that stays", g, key)
		}
	}
	for _, g := range gone {
		m.floor = max(m.floor, m.keys[g].last)
		delete(m.keys, g)
		m.history[g] = nil // its events are forgotten, as after Reset
	}
}

func (m *model) sweep(now int64) int {
	evicted := 0
	for key, k := range m.keys {
		eff := max(now, k.last)
		k.last = eff // a sweep looks at every key at its instant
		if k.events = inWindow(k.events, eff, m.longest()); len(k.events) == 0 {
			m.floor = max(m.floor, eff)
			delete(m.keys, key)
			evicted++
		}
	}
	return evicted
}

// checkExact asserts the invariant: for every policy, no half-open interval
// of its window holds more than its limit of one key's admitted events.
func (m *model) checkExact(t require.TestingT) {
	for _, p := range m.policies {
		for key, h := range m.history {
			for i, end := range h {
				in := len(inWindow(h[:i+1], end, int64(p.Window)))
				require.LessOrEqual(t, in, p.Limit, "key %q, policy %+v: %d events in the window ending at %v", key, p, in, time.Duration(end))
			}
		}
	}
}

// drawPolicies draws 1 to 3 policies with small limits and windows of whole
// seconds, sometimes equal, the only one sometimes unnamed.
func drawPolicies(t *rapid.T, label string) []Policy {
	policies := make([]Policy, rapid.IntRange(1, 3).Draw(t, label))
	for i := range policies {
		policies[i] = Policy{
			Name:   fmt.Sprint("p", i),
			Limit:  rapid.IntRange(1, 6).Draw(t, label+" limit"),
			Window: time.Duration(rapid.IntRange(1, 8).Draw(t, label+" window")) * time.Second,
		}
	}
	if len(policies) == 1 && rapid.Bool().Draw(t, label+" unnamed") {
		policies[0].Name = ""
	}
	return policies
}

// TestMatchesReferenceModel drives a limiter of 1 to 3 policies and the
// model with one random sequence of calls, weights, clock moves (some
// backwards), sweeps, Resets and changes of policies, and compares every
// Decision whole, each policy's part included. A bound on the keys, when
// drawn, either makes room for new keys or refuses them.
func TestMatchesReferenceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policies := drawPolicies(t, "policies")
		maxKeys := rapid.IntRange(0, 3).Draw(t, "maxKeys")
		refuse := maxKeys > 0 && rapid.Bool().Draw(t, "refuse")
		c := NewManualClock(t0)
		opts := []Option{WithClock(c), WithJanitorInterval(0), WithMaxKeys(maxKeys)}
		if refuse {
			opts = append(opts, WithRefuseNewKeys())
		}
		l, err := NewPolicies(policies, opts...)
		require.NoError(t, err)
		defer l.Close()
		m := newModel(policies)
		keys := []string{"a", "b", "c", "d"}
		changed := false

		for i := range rapid.IntRange(1, 400).Draw(t, "steps") {
			// Half-second steps land exactly on window edges often; a few go
			// backwards; a third stay put, so that windows fill up.
			if rapid.IntRange(0, 2).Draw(t, "move") > 0 {
				c.Advance(time.Duration(rapid.IntRange(-4, 12).Draw(t, "step")) * time.Second / 2)
			}
			now := int64(c.Now().Sub(t0))
			key := rapid.SampledFrom(keys).Draw(t, "key")
			atBound := func() bool {
				_, tracked := m.keys[key]
				return !tracked && maxKeys > 0 && len(m.keys) >= maxKeys
			}
			switch op := rapid.IntRange(0, 19).Draw(t, "op"); {
			case op < 12:
				n := rapid.IntRange(-1, 7).Draw(t, "n")
				allowN := rapid.Bool().Draw(t, "allowN")
				admissible := n >= 1 && n <= m.minLimit()
				makesRoom := admissible && atBound() && !refuse
				var got Decision
				if allowN {
					got.Allowed = l.AllowN(key, n)
				} else {
					got = noReceipt(l.Take(key, n))
				}
				if makesRoom {
					m.makeRoom(t, maxKeys, func(k string) bool { return l.keys.load(k) != nil })
				}
				var want Decision
				if admissible && atBound() {
					want = m.overflow()
				} else if admissible || !allowN {
					want = m.decide(key, n, now, true)
				} else {
					want.Allowed = n == 0 // AllowN answers these without looking at the key
				}
				if allowN {
					require.Equal(t, want.Allowed, got.Allowed, "step %d: AllowN(%q, %d) at %v", i, key, n, time.Duration(now))
				} else {
					require.Equal(t, want, got, "step %d: Take(%q, %d) at %v", i, key, n, time.Duration(now))
					require.Equal(t, want.parts[:want.nparts], got.Policies())
				}
			case op < 16:
				want := m.decide(key, 1, now, false)
				if refuse && atBound() {
					want = m.overflow() // a Take would be refused; otherwise it would make room
				}
				require.Equal(t, want, l.Peek(key), "step %d: Peek(%q) at %v", i, key, time.Duration(now))
			case op < 18:
				require.Equal(t, m.sweep(now), l.sweep(now), "step %d: sweep at %v", i, time.Duration(now))
			case op < 19:
				l.Reset(key)
				delete(m.keys, key)
				m.history[key] = nil
			default:
				policies := drawPolicies(t, "new policies")
				require.NoError(t, l.SetTier("", policies))
				require.Equal(t, policies, l.Policies())
				m.policies = policies
				changed = true
			}
			require.Equal(t, len(m.keys), l.Len(), "step %d: tracked keys", i)
		}
		if !changed {
			m.checkExact(t)
		}
	})
}

// TestConcurrentExactness hammers a few keys from many goroutines while the
// janitor's sweep runs alongside. The clock moves only between phases, so
// every call of a phase is decided at one instant and the admitted count per
// key and phase is known exactly: whatever room the window leaves.
func TestConcurrentExactness(t *testing.T) {
	const (
		limit      = 7
		goroutines = 16
		callsEach  = 20
		phases     = 12
	)
	window := 10 * time.Second
	stride := 4 * time.Second // several phases share each window
	l, c := newManual(t, limit, window)
	keys := []string{"k0", "k1", "k2"}
	admittedAt := map[string][]time.Duration{} // phase instants, one entry per admitted event

	for p := range phases {
		var counts [3]atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var sweeper sync.WaitGroup
		sweeper.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					l.sweep(l.now())
				}
			}
		})
		for g := range goroutines {
			wg.Go(func() {
				for i := range callsEach {
					k := (g + i) % len(keys)
					if l.Allow(keys[k]) {
						counts[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sweeper.Wait()

		at := time.Duration(p) * stride
		for k, key := range keys {
			inWindow := 0
			for _, a := range admittedAt[key] {
				if a > at-window {
					inWindow++
				}
			}
			got := int(counts[k].Load())
			require.Equal(t, limit-inWindow, got, "phase %d key %s: admitted count", p, key)
			for range got {
				admittedAt[key] = append(admittedAt[key], at)
			}
		}
		c.Advance(stride)
	}
	m := newModel([]Policy{{Limit: limit, Window: window}})
	for key, ats := range admittedAt {
		for _, a := range ats {
			m.history[key] = append(m.history[key], int64(a))
		}
	}
	m.checkExact(t)
	require.Greater(t, len(admittedAt["k0"]), limit, "the run spans several windows")
}

// TestConcurrentMovingClock lets the clock move while calls are in flight.
// Each admitted call is bracketed by clock readings taken before and after
// it; the limiter reads the clock inside the call, so the event's instant
// lies in that bracket. Events whose whole bracket falls inside one window
// certainly happened in it, so they may number at most limit. A fixed or
// approximate window fails this check at its boundaries.
func TestConcurrentMovingClock(t *testing.T) {
	const limit = 5
	window := 50 * time.Millisecond
	l, c := newManual(t, limit, window)
	type bracket struct{ from, to time.Duration }
	var mu sync.Mutex
	admitted := map[string][]bracket{}

	// The callers move the clock themselves, a millisecond every tenth call,
	// so it crosses many windows while calls are in flight however the
	// scheduler runs them (a separate ticker goroutine could be starved
	// until the calls were done).
	var calls sync.WaitGroup
	for g := range 8 {
		calls.Go(func() {
			for i := range 3000 {
				if i%10 == 0 {
					c.Advance(time.Millisecond)
				}
				key := fmt.Sprint("k", (g+i)%2)
				from := c.Now().Sub(t0)
				ok := l.Allow(key)
				to := c.Now().Sub(t0)
				if ok {
					mu.Lock()
					admitted[key] = append(admitted[key], bracket{from, to})
					mu.Unlock()
				}
			}
		})
	}
	calls.Wait()

	elapsed := c.Now().Sub(t0)
	require.Greater(t, elapsed, 4*window, "the clock moved across several windows")
	for key, bs := range admitted {
		require.Greater(t, len(bs), limit, "key %s admitted across windows", key)
		for _, start := range bs {
			s := start.from - 1 // the window (s, s+window]
			in := 0
			for _, b := range bs {
				if b.from > s && b.to <= s+window {
					in++
				}
			}
			require.LessOrEqual(t, in, limit, "key %s: %d events surely inside (%v, %v]", key, in, s, s+window)
		}
	}
}

// TestDecisionInstantsInsideTheirCalls reads each decision's instant back
// from its Decision and checks that it lies between clock readings taken
// just before and just after the call, and that one key's instants never run
// backwards in the order its decisions were made. The limiter reads the
// clock before taking the key's lock, so a caller can read it early and lock
// late; deciding at the later of its reading and the key's newest instant
// must keep both properties while the clock moves under the calls.
func TestDecisionInstantsInsideTheirCalls(t *testing.T) {
	const goroutines, callsEach = 8, 2000
	window := time.Hour
	l, c := newManual(t, goroutines*callsEach+1, window)
	// The event at 00:00 stays the oldest, so every later admission's
	// RefillAfter is window minus its instant.
	require.True(t, l.Allow("k"))

	type call struct {
		from, at, to time.Duration
		remaining    int
	}
	results := make([][]call, goroutines)
	// The callers move the clock themselves, between their calls, so that it
	// moves while other calls are in flight however they are scheduled.
	var calls sync.WaitGroup
	for g := range goroutines {
		calls.Go(func() {
			for i := range callsEach {
				if i%4 == 0 {
					c.Advance(time.Microsecond)
				}
				from := c.Now().Sub(t0)
				d := l.Take("k", 1)
				to := c.Now().Sub(t0)
				if !d.Allowed {
					t.Errorf("refused with room left: %+v", d)
					return
				}
				results[g] = append(results[g], call{from, window - d.RefillAfter, to, d.Remaining})
			}
		})
	}
	calls.Wait()

	all := slices.Concat(results...)
	require.Len(t, all, goroutines*callsEach)
	for _, r := range all {
		require.True(t, r.from <= r.at && r.at <= r.to,
			"decided at %v, outside its call [%v, %v]", r.at, r.from, r.to)
	}
	// Remaining counts down one per admission: it orders the decisions.
	slices.SortFunc(all, func(a, b call) int { return b.remaining - a.remaining })
	for i := 1; i < len(all); i++ {
		require.Equal(t, all[i-1].remaining-1, all[i].remaining, "one admission per Remaining")
		require.LessOrEqual(t, all[i-1].at, all[i].at, "decision %d is before the one made just before it", i)
	}
	require.Greater(t, all[len(all)-1].at, all[0].at, "the clock moved during the calls")
}

// interleavingClock is a ManualClock that, on the reading after between is
// set, runs between after taking the reading and before handing it back: it
// lets another caller decide between a call's clock read and its lock.
type interleavingClock struct {
	*ManualClock
	between func()
}

func (c *interleavingClock) Now() time.Time {
	now := c.ManualClock.Now()
	if f := c.between; f != nil {
		c.between = nil
		f()
	}
	return now
}

// TestClockReadBeforeLockIsClamped pins the interleaving the concurrent test
// above can only hope for: a call reads the clock at 00:05, another call
// reads 00:08 and decides, and only then does the first take the key's lock.
// It must decide at 00:08, the newest instant the key has seen and one its
// own call spans, not at 00:05, before a decision made ahead of it.
func TestClockReadBeforeLockIsClamped(t *testing.T) {
	const s = time.Second
	c := &interleavingClock{ManualClock: NewManualClock(t0)}
	l, err := New(3, 10*s, WithClock(c), WithJanitorInterval(0))
	require.NoError(t, err)
	defer l.Close()
	c.Set(t0.Add(5 * s))
	c.between = func() {
		c.Set(t0.Add(8 * s))
		require.Equal(t, single(10*s, allow(3, 2, 10*s, 10*s)), noReceipt(l.Take("k", 1)), "the other call, at 00:08")
	}
	assert.Equal(t, single(10*s, allow(3, 1, 10*s, 10*s)), noReceipt(l.Take("k", 1)), "decided at 00:08: both events leave at 00:18")
	c.Set(t0.Add(17 * s))
	assert.Equal(t, single(10*s, allow(3, 0, 1*s, 10*s)), l.Peek("k"))
}

// drawWindows draws 1 to 3 policies with small limits and windows of any
// length from a millisecond to two days, to the nanosecond.
func drawWindows(t *rapid.T) []Policy {
	policies := make([]Policy, rapid.IntRange(1, 3).Draw(t, "policies"))
	for i := range policies {
		policies[i] = Policy{
			Name:   fmt.Sprint("p", i),
			Limit:  rapid.IntRange(1, 8).Draw(t, "limit"),
			Window: time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(48*time.Hour)).Draw(t, "window")),
		}
	}
	return policies
}

// TestMatchesReferenceModelOnTicks is TestMatchesReferenceModel for windows
// of any length, whose logs count in ticks of up to 50µs: at instants that
// are whole ticks, an exact log decides exactly as the naive model does.
func TestMatchesReferenceModelOnTicks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policies := drawWindows(t)
		c := NewManualClock(t0)
		l, err := NewPolicies(policies, WithClock(c), WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		m := newModel(policies)
		tick := time.Duration(newScale(m.longest(), 0).unit)
		longest := time.Duration(m.longest())

		for i := range rapid.IntRange(1, 200).Draw(t, "steps") {
			ticks := rapid.Int64Range(-2, int64(longest/tick)/4+2).Draw(t, "ticks")
			c.Advance(time.Duration(ticks) * tick)
			now := int64(c.Now().Sub(t0))
			n := rapid.IntRange(0, 4).Draw(t, "n")
			if rapid.Bool().Draw(t, "peek") {
				require.Equal(t, m.decide("k", 1, now, false), l.Peek("k"), "step %d: Peek at %v", i, time.Duration(now))
				continue
			}
			require.Equal(t, m.decide("k", n, now, true), noReceipt(l.Take("k", n)), "step %d: Take(%d) at %v", i, n, time.Duration(now))
		}
		m.checkExact(t)
	})
}

// TestNeverOverLimit drives a limiter with windows of any length, instants
// to the nanosecond (some moving backwards) and, half the time, a
// resolution d, and checks against the real instants of the calls that no
// window of any policy ever holds more than its limit, and that a refusal
// is never more than d early (without a resolution, one tick of the exact
// log): an exact log whose windows were d longer would refuse it too.
func TestNeverOverLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policies := drawWindows(t)
		shortest, longest := policies[0].Window, policies[0].Window
		for _, p := range policies {
			shortest, longest = min(shortest, p.Window), max(longest, p.Window)
		}
		d := time.Duration(newScale(int64(longest), 0).unit)
		opts := []Option{WithJanitorInterval(0)}
		if rapid.Bool().Draw(t, "resolution") {
			least := longest/maxTicks + 1
			d = time.Duration(rapid.Int64Range(int64(least), int64(max(shortest, least))).Draw(t, "d"))
			opts = append(opts, WithResolution(d))
		}
		c := NewManualClock(t0)
		l, err := NewPolicies(policies, append(opts, WithClock(c))...)
		if d > shortest {
			require.ErrorIs(t, err, ErrConfig)
			return
		}
		require.NoError(t, err)
		defer l.Close()

		var events []int64 // real instants of every admitted event
		last := int64(0)   // the newest instant the key was decided at
		minLimit := slices.MinFunc(policies, func(a, b Policy) int { return a.Limit - b.Limit }).Limit
		for i := range rapid.IntRange(1, 300).Draw(t, "steps") {
			c.Advance(time.Duration(rapid.Int64Range(-int64(shortest)/4, int64(shortest)).Draw(t, "step")))
			n := rapid.IntRange(1, 3).Draw(t, "n")
			now := max(int64(c.Now().Sub(t0)), last)
			if l.Len() > 0 || n <= minLimit { // the key is, or is about to be, tracked
				last = now
			}
			got := l.Take("k", n)
			if got.Allowed {
				for range n {
					events = append(events, now)
				}
				for _, p := range policies {
					in := len(inWindow(events, now, int64(p.Window)))
					require.LessOrEqual(t, in, p.Limit, "step %d: policy %v holds %d", i, p, in)
				}
				continue
			}
			early := true
			for _, p := range policies {
				early = early && len(inWindow(events, now, int64(p.Window+d)))+n <= p.Limit
			}
			require.False(t, early, "step %d: refused %d at %v; an exact log of windows %v longer has room", i, n, time.Duration(now), d)
		}
	})
}
