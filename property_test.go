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

// model is the naive reference: per tracked key a plain slice of every
// instant it admitted, scanned in full for each decision. It mirrors the
// limiter's observable state (which keys are tracked, the newest instant
// each was decided at, the floor left by evictions) but none of its
// arithmetic: no ring, no pruning, no one-comparison rule.
type model struct {
	limit   int
	window  int64
	keys    map[string]*modelKey
	floor   int64
	history map[string][]int64 // every admitted instant, for the exactness check
}

type modelKey struct {
	events []int64
	last   int64
}

func newModel(limit int, window time.Duration) *model {
	return &model{limit: limit, window: int64(window), keys: map[string]*modelKey{}, history: map[string][]int64{}}
}

func (m *model) inWindow(k *modelKey, now int64) []int64 {
	var in []int64
	for _, e := range k.events {
		if now-m.window < e && e <= now {
			in = append(in, e)
		}
	}
	return in
}

func (m *model) decide(key string, n int, now int64, record bool) Decision {
	k, tracked := m.keys[key]
	if !tracked {
		k = &modelKey{last: m.floor}
		if record && n >= 1 && n <= m.limit {
			m.keys[key] = k
		}
	}
	now = max(now, k.last)
	k.last = now
	in := m.inWindow(k, now)
	d := Decision{Limit: m.limit, Remaining: m.limit - len(in)}
	switch {
	case n == 0:
		d.Allowed = true
	case n < 0 || n > m.limit:
	case len(in)+n <= m.limit:
		d.Allowed = true
		d.Remaining -= n
		if record {
			for range n {
				k.events = append(k.events, now)
				m.history[key] = append(m.history[key], now)
			}
		}
		in = append(in, now)
	default:
		// The earliest instant t >= now at which the events still in
		// (t-window, t] leave room for n, found by trying every candidate.
		best := int64(-1)
		for _, e := range in {
			t := e + m.window
			left := 0
			for _, f := range in {
				if f > t-m.window {
					left++
				}
			}
			if left+n <= m.limit && (best < 0 || t < best) {
				best = t
			}
		}
		d.RetryAfter = time.Duration(best - now)
	}
	if len(in) > 0 {
		d.RefillAfter = time.Duration(slices.Min(in) + m.window - now)
		d.ResetAfter = time.Duration(slices.Max(in) + m.window - now)
	}
	return single(time.Duration(m.window), d)
}

// overflowDecision is the refusal of an untracked key when WithMaxKeys is
// full: every wait is the window, an estimate of when room comes back.
func overflowDecision(limit int, window time.Duration) Decision {
	return single(window, Decision{Limit: limit, RetryAfter: window, RefillAfter: window, ResetAfter: window, Overflow: true})
}

func (m *model) sweep(now int64) int {
	evicted := 0
	for key, k := range m.keys {
		eff := max(now, k.last)
		k.last = eff // a sweep looks at every key at its instant
		if len(m.inWindow(k, eff)) == 0 {
			m.floor = max(m.floor, eff)
			delete(m.keys, key)
			evicted++
		}
	}
	return evicted
}

// checkExact asserts the invariant: no half-open interval of one window
// holds more than limit admitted events of one key.
func (m *model) checkExact(t require.TestingT) {
	for key, h := range m.history {
		for i, end := range h {
			in := 0
			for _, e := range h[:i+1] {
				if end-m.window < e {
					in++
				}
			}
			require.LessOrEqual(t, in, m.limit, "key %q: %d events in the window ending at %v", key, in, time.Duration(end))
		}
	}
}

func TestMatchesReferenceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 6).Draw(t, "limit")
		window := time.Duration(rapid.IntRange(1, 8).Draw(t, "window")) * time.Second
		maxKeys := rapid.IntRange(0, 3).Draw(t, "maxKeys")
		c := NewManualClock(t0)
		l, err := New(limit, window, WithClock(c), WithJanitorInterval(0), WithMaxKeys(maxKeys))
		require.NoError(t, err)
		defer l.Close()
		m := newModel(limit, window)
		keys := []string{"a", "b", "c", "d"}

		for i := range rapid.IntRange(1, 150).Draw(t, "steps") {
			// Half-second steps land exactly on window edges often; a few go backwards.
			c.Advance(time.Duration(rapid.IntRange(-4, 12).Draw(t, "step")) * time.Second / 2)
			now := int64(c.Now().Sub(t0))
			key := rapid.SampledFrom(keys).Draw(t, "key")
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 6:
				n := rapid.IntRange(-1, limit+1).Draw(t, "n")
				allowN := rapid.Bool().Draw(t, "allowN")
				admissible := n >= 1 && n <= limit
				var want Decision
				if _, tracked := m.keys[key]; !tracked && admissible && maxKeys > 0 && len(m.keys) >= maxKeys {
					want = overflowDecision(limit, window)
				} else if admissible || !allowN {
					want = m.decide(key, n, now, true)
				} else {
					want.Allowed = n == 0 // AllowN answers these without looking at the key
				}
				if allowN {
					require.Equal(t, want.Allowed, l.AllowN(key, n), "step %d: AllowN(%q, %d) at %v", i, key, n, time.Duration(now))
				} else {
					require.Equal(t, want, l.Take(key, n), "step %d: Take(%q, %d) at %v", i, key, n, time.Duration(now))
				}
			case op < 8:
				want := m.decide(key, 1, now, false)
				if _, tracked := m.keys[key]; !tracked && maxKeys > 0 && len(m.keys) >= maxKeys {
					want = overflowDecision(limit, window)
				}
				require.Equal(t, want, l.Peek(key), "step %d: Peek(%q) at %v", i, key, time.Duration(now))
			case op < 9:
				require.Equal(t, m.sweep(now), l.sweep(now), "step %d: sweep at %v", i, time.Duration(now))
			default:
				l.Reset(key)
				delete(m.keys, key)
				m.history[key] = nil
			}
			require.Equal(t, len(m.keys), l.Len(), "step %d: tracked keys", i)
		}
		m.checkExact(t)
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
	m := &model{limit: limit, window: int64(window), history: map[string][]int64{}}
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

	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				c.Advance(time.Millisecond)
			}
		}
	})
	var calls sync.WaitGroup
	for g := range 8 {
		calls.Go(func() {
			for i := range 3000 {
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
	close(stop)
	ticker.Wait()

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
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				c.Advance(time.Microsecond)
			}
		}
	})
	var calls sync.WaitGroup
	for g := range goroutines {
		calls.Go(func() {
			for range callsEach {
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
	close(stop)
	ticker.Wait()

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
		require.Equal(t, single(10*s, allow(3, 2, 10*s, 10*s)), l.Take("k", 1), "the other call, at 00:08")
	}
	assert.Equal(t, single(10*s, allow(3, 1, 10*s, 10*s)), l.Take("k", 1), "decided at 00:08: both events leave at 00:18")
	c.Set(t0.Add(17 * s))
	assert.Equal(t, single(10*s, allow(3, 0, 1*s, 10*s)), l.Peek("k"))
}
