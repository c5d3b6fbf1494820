package keyrate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

// t0 is the instant every trace starts at: 00:00:00.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newManual returns a limiter on a manual clock at t0, with no janitor
// goroutine, closed when the test ends.
func newManual(t *testing.T, limit int, window time.Duration, opts ...Option) (*Limiter, *ManualClock) {
	t.Helper()
	c := NewManualClock(t0)
	l, err := New(limit, window, append([]Option{WithClock(c), WithJanitorInterval(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, c
}

// step is one call in a trace: at offset at from t0, Take(key, n) must
// return want.
type step struct {
	at   time.Duration
	key  string
	n    int
	want Decision
}

// allow is an admitted Decision. refill is RefillAfter: until the oldest
// event in the window, this request's included, leaves it.
func allow(limit, remaining int, refill, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, RefillAfter: refill, ResetAfter: reset}
}

// deny is a refused Decision.
func deny(limit, remaining int, retry, refill, reset time.Duration) Decision {
	return Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, RefillAfter: refill, ResetAfter: reset}
}

// noReceipt returns d without its Receipt, for comparing Decisions made at
// different places: a Receipt names the log that holds the events.
func noReceipt(d Decision) Decision {
	d.Receipt = Receipt{}
	return d
}

// single completes d, whose fields allow or deny set, into the Decision a
// limiter of one unnamed policy of d.Limit per window returns: d's numbers
// are that policy's part too.
func single(window time.Duration, d Decision) Decision {
	overflow := d.Overflow
	d = combine(PolicyDecision{
		Policy:  Policy{Limit: d.Limit, Window: window},
		Allowed: d.Allowed, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, RefillAfter: d.RefillAfter,
	})
	d.Overflow = overflow
	return d
}

func TestTraces(t *testing.T) {
	s := time.Second
	traces := []struct {
		name   string
		limit  int
		window time.Duration
		steps  []step
	}{
		{"three at one instant, then the window passes", 3, 10 * s, []step{
			{0, "a", 1, allow(3, 2, 10*s, 10*s)},
			{0, "a", 1, allow(3, 1, 10*s, 10*s)},
			{0, "a", 1, allow(3, 0, 10*s, 10*s)},
			{0, "a", 1, deny(3, 0, 10*s, 10*s, 10*s)},
			{5 * s, "a", 1, deny(3, 0, 5*s, 5*s, 5*s)},
			{10*s - 1, "a", 1, deny(3, 0, 1, 1, 1)},
			{10 * s, "a", 1, allow(3, 2, 10*s, 10*s)}, // (0s,10s] no longer holds the events at 0s
		}},
		{"staggered events leave one by one", 3, 10 * s, []step{
			{0, "a", 1, allow(3, 2, 10*s, 10*s)},
			{1 * s, "a", 1, allow(3, 1, 9*s, 10*s)}, // the event at 0s leaves first
			{2 * s, "a", 1, allow(3, 0, 8*s, 10*s)},
			{3 * s, "a", 1, deny(3, 0, 7*s, 7*s, 9*s)},
			{10 * s, "a", 1, allow(3, 0, 1*s, 10*s)},
			{10 * s, "a", 1, deny(3, 0, 1*s, 1*s, 10*s)},
			{11 * s, "a", 1, allow(3, 0, 1*s, 10*s)},
			{25 * s, "a", 1, allow(3, 2, 10*s, 10*s)},
		}},
		{"weights count every event", 5, 10 * s, []step{
			{0, "a", 3, allow(5, 2, 10*s, 10*s)},
			{1 * s, "a", 3, deny(5, 2, 9*s, 9*s, 9*s)},
			{1 * s, "a", 2, allow(5, 0, 9*s, 10*s)},
			{5 * s, "a", 1, deny(5, 0, 5*s, 5*s, 6*s)},
			{10 * s, "a", 4, deny(5, 3, 1*s, 1*s, 1*s)},
			{11 * s, "a", 4, allow(5, 1, 10*s, 10*s)},
			{11 * s, "a", 5, deny(5, 1, 10*s, 10*s, 10*s)},
		}},
		{"weights that never or always fit", 5, 10 * s, []step{
			{0, "a", 2, allow(5, 3, 10*s, 10*s)},
			{1 * s, "a", 0, allow(5, 3, 9*s, 9*s)},
			{1 * s, "a", -1, deny(5, 3, 0, 9*s, 9*s)},
			{1 * s, "a", 6, deny(5, 3, 0, 9*s, 9*s)},
			{1 * s, "a", 3, allow(5, 0, 9*s, 10*s)},
			{2 * s, "a", 0, allow(5, 0, 8*s, 9*s)},
		}},
		{"untracked keys and bad weights create nothing", 2, time.Minute, []step{
			{0, "x", 0, allow(2, 2, 0, 0)},
			{0, "x", -3, deny(2, 2, 0, 0, 0)},
			{0, "x", 3, deny(2, 2, 0, 0, 0)},
			{0, "y", 2, allow(2, 0, time.Minute, time.Minute)},
		}},
		{"keys keep separate budgets", 1, 10 * s, []step{
			{0, "a", 1, allow(1, 0, 10*s, 10*s)},
			{0, "b", 1, allow(1, 0, 10*s, 10*s)},
			{1 * s, "a", 1, deny(1, 0, 9*s, 9*s, 9*s)},
			{1 * s, "c", 1, allow(1, 0, 10*s, 10*s)},
		}},
	}
	for _, tr := range traces {
		t.Run(tr.name, func(t *testing.T) {
			l, c := newManual(t, tr.limit, tr.window)
			for i, st := range tr.steps {
				c.Set(t0.Add(st.at))
				assert.Equal(t, single(tr.window, st.want), noReceipt(l.Take(st.key, st.n)), "step %d: Take(%q, %d) at %v", i, st.key, st.n, st.at)
			}
		})
	}
}

// TestBoundaryBurst is the case fixed windows get wrong: 10 per 10s, 10
// calls at 00:09 and 10 at 00:11. A window reset at 00:10 would admit all 20.
func TestBoundaryBurst(t *testing.T) {
	l, c := newManual(t, 10, 10*time.Second)
	admitted := func() int {
		n := 0
		for range 10 {
			if l.Allow("client") {
				n++
			}
		}
		return n
	}
	c.Set(t0.Add(9 * time.Second))
	assert.Equal(t, 10, admitted(), "00:09")
	c.Set(t0.Add(11 * time.Second))
	assert.Equal(t, 0, admitted(), "00:11")
	d := l.Peek("client")
	assert.Equal(t, 8*time.Second, d.RetryAfter, "the 00:09 events leave at 00:19")
	c.Set(t0.Add(19 * time.Second))
	assert.Equal(t, 10, admitted(), "00:19")
}

func TestSequentialAndConcurrentCalls(t *testing.T) {
	l, _ := newManual(t, 3, time.Minute)
	got := 0
	for range 5 {
		if l.Allow("seq") {
			got++
		}
	}
	assert.Equal(t, 3, got, "five sequential calls with limit 3")

	for _, clock := range []string{"manual", "system"} {
		t.Run(clock, func(t *testing.T) {
			var l *Limiter
			if clock == "manual" {
				l, _ = newManual(t, 3, time.Minute)
			} else {
				var err error
				l, err = New(3, time.Hour)
				require.NoError(t, err)
				defer l.Close()
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 20 {
				wg.Go(func() {
					<-start
					if l.Allow("hot") {
						admitted.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			assert.Equal(t, int64(3), admitted.Load(), "twenty concurrent calls with limit 3")
		})
	}
}

func TestPeekRecordsNothing(t *testing.T) {
	l, c := newManual(t, 2, 10*time.Second)
	assert.Equal(t, single(10*time.Second, allow(2, 1, 10*time.Second, 10*time.Second)), l.Peek("k"))
	assert.Equal(t, 0, l.Len(), "Peek must not track an untracked key")
	l.Allow("k")
	c.Advance(time.Second)
	for range 3 {
		assert.Equal(t, single(10*time.Second, allow(2, 0, 9*time.Second, 10*time.Second)), l.Peek("k"))
	}
	assert.Equal(t, l.Peek("k"), noReceipt(l.Take("k", 1)), "Peek answers what Take(1) then does")
	assert.Equal(t, single(10*time.Second, deny(2, 0, 9*time.Second, 9*time.Second, 10*time.Second)), l.Peek("k"))
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name  string
		limit int
		win   time.Duration
		opts  []Option
		field string
	}{
		{"zero limit", 0, time.Second, nil, "limit"},
		{"negative limit", -1, time.Second, nil, "limit"},
		{"huge limit", 1 << 40, time.Second, nil, "limit"},
		{"zero window", 1, 0, nil, "window"},
		{"negative window", 1, -time.Second, nil, "window"},
		{"negative janitor interval", 1, time.Second, []Option{WithJanitorInterval(-time.Second)}, "janitor interval"},
		{"negative max keys", 1, time.Second, []Option{WithMaxKeys(-1)}, "max keys"},
		{"refusing new keys without a bound", 1, time.Second, []Option{WithRefuseNewKeys()}, "WithMaxKeys"},
		{"nil clock", 1, time.Second, []Option{WithClock(nil)}, "clock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.limit, tc.win, tc.opts...)
			assert.Nil(t, l)
			require.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

// relativeClock is a Clock with an After method and nothing else, as a
// user's simulated clock might be: Wait must sleep on its After.
type relativeClock struct{ c *ManualClock }

func (r relativeClock) Now() time.Time                         { return r.c.Now() }
func (r relativeClock) After(d time.Duration) <-chan time.Time { return r.c.After(d) }

func TestWaitUnderManualClock(t *testing.T) {
	for _, name := range []string{"ManualClock", "a Clock with After"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := NewManualClock(t0)
				var clock Clock = c
				if name != "ManualClock" {
					clock = relativeClock{c}
				}
				l, err := New(1, 10*time.Second, WithClock(clock), WithJanitorInterval(0))
				require.NoError(t, err)
				defer l.Close()
				require.True(t, l.Allow("k"))
				done := make(chan error, 1)
				go func() { done <- l.Wait(context.Background(), "k") }()
				for _, step := range []time.Duration{3 * time.Second, 6 * time.Second, 999 * time.Millisecond} {
					c.Advance(step)
					synctest.Wait() // the waiter has run as far as it can
					select {
					case err := <-done:
						t.Fatalf("Wait returned %v at %v, before the slot freed at 00:10", err, c.Now().Sub(t0))
					default:
					}
				}
				c.Advance(time.Millisecond)
				synctest.Wait()
				select {
				case err := <-done:
					require.NoError(t, err)
				default:
					t.Fatal("Wait still blocked at 00:10")
				}
				assert.Equal(t, 0, l.Peek("k").Remaining, "Wait recorded its event")
			})
		})
	}
}

// TestWaitWakesAtTheDecisionsInstant moves the clock to the instant the
// slot frees right after Wait's Take reads it, so that the Take is refused
// at the earlier reading and Wait registers its wake-up under the moved
// clock. Wait must wake at the refusal's instant plus RetryAfter, which
// the clock has already reached, not RetryAfter past the moved clock.
func TestWaitWakesAtTheDecisionsInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const s = time.Second
		c := &movingClock{ManualClock: NewManualClock(t0)}
		l, err := New(1, 10*s, WithClock(c), WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		require.True(t, l.Allow("k"))
		c.Set(t0.Add(3 * s)) // Wait's Take is refused here, RetryAfter 7s
		moved := false
		c.after = func() {
			moved = true
			c.Set(t0.Add(10 * s))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Wait(ctx, "k") }()
		synctest.Wait()
		select {
		case err := <-done:
			require.NoError(t, err)
		default:
			cancel()
			<-done
			t.Fatal("Wait slept past 00:10, where its slot freed and the clock already was")
		}
		cancel()
		require.True(t, moved)
		assert.Equal(t, single(10*s, deny(1, 0, 10*s, 10*s, 10*s)), l.Peek("k"), "Wait recorded its event at 00:10")
	})
}

// movingClock is a ManualClock that runs after once, right after the next
// reading: a clock moved between a decision's reading and what the
// decision does next. Embedding the ManualClock keeps its wake-ups at
// absolute instants, which Wait prefers.
type movingClock struct {
	*ManualClock
	after func() // run once, after the next reading
}

func (c *movingClock) Now() time.Time {
	now := c.ManualClock.Now()
	if f := c.after; f != nil {
		c.after = nil
		f()
	}
	return now
}

func TestWait(t *testing.T) {
	t.Run("waits exactly RetryAfter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err := New(2, 10*time.Second)
			require.NoError(t, err)
			defer l.Close()
			start := time.Now()
			require.True(t, l.AllowN("k", 2))
			time.Sleep(4 * time.Second)
			require.NoError(t, l.Wait(context.Background(), "k"))
			assert.Equal(t, 10*time.Second, time.Since(start))
			require.NoError(t, l.WaitN(context.Background(), "k", 0), "n=0 returns at once")
			assert.Equal(t, 10*time.Second, time.Since(start))
		})
	})
	t.Run("deadline too close returns at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err := New(1, time.Minute)
			require.NoError(t, err)
			defer l.Close()
			require.True(t, l.Allow("k"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err = l.Wait(ctx, "k")
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Zero(t, time.Since(start), "must not wait for a slot the deadline cannot reach")
			assert.Equal(t, 0, l.Peek("k").Remaining, "a failed wait records nothing")
		})
	})
	t.Run("cancellation ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err := New(1, time.Minute)
			require.NoError(t, err)
			defer l.Close()
			require.True(t, l.Allow("k"))
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(5*time.Second, cancel)
			start := time.Now()
			require.ErrorIs(t, l.Wait(ctx, "k"), context.Canceled)
			assert.Equal(t, 5*time.Second, time.Since(start))
		})
	})
	t.Run("weights that can never fit", func(t *testing.T) {
		l, _ := newManual(t, 3, time.Minute)
		require.ErrorIs(t, l.WaitN(context.Background(), "k", 4), ErrExceedsLimit)
		require.ErrorIs(t, l.WaitN(context.Background(), "k", -1), ErrExceedsLimit)
		assert.Equal(t, 0, l.Len())
	})
	t.Run("many waiters share the slots exactly", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err := New(2, 10*time.Second)
			require.NoError(t, err)
			defer l.Close()
			start := time.Now()
			var mu sync.Mutex
			var at []time.Duration
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					assert.NoError(t, l.Wait(context.Background(), "k"))
					mu.Lock()
					at = append(at, time.Since(start))
					mu.Unlock()
				})
			}
			wg.Wait()
			want := []time.Duration{0, 0, 10 * time.Second, 10 * time.Second, 20 * time.Second, 20 * time.Second}
			assert.ElementsMatch(t, want, at)
		})
	})
}

func TestClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	l, err := New(1, time.Minute, WithJanitorInterval(time.Millisecond))
	require.NoError(t, err)
	require.True(t, l.Allow("k"))

	waiting := make(chan error, 1)
	go func() { waiting <- l.Wait(context.Background(), "k") }()
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "Close is idempotent")
	require.ErrorIs(t, <-waiting, ErrClosed, "a pending Wait is woken with ErrClosed")
	require.ErrorIs(t, l.Wait(context.Background(), "k"), ErrClosed)
	_, err = l.TakeContext(context.Background(), "k", 1)
	require.ErrorIs(t, err, ErrClosed)
	assert.False(t, l.Allow("k"), "decisions stay exact after Close")
	assert.True(t, l.Allow("other"))
}

func TestTakeContext(t *testing.T) {
	l, _ := newManual(t, 1, time.Minute)
	d, err := l.TakeContext(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = l.TakeContext(ctx, "j", 1)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, l.Len(), "a cancelled call records nothing")
}

func TestReset(t *testing.T) {
	l, _ := newManual(t, 2, time.Minute)
	require.True(t, l.AllowN("k", 2))
	require.False(t, l.Allow("k"))
	l.Reset("k")
	l.Reset("never-seen")
	assert.Equal(t, 0, l.Len())
	assert.Equal(t, single(time.Minute, allow(2, 1, time.Minute, time.Minute)), noReceipt(l.Take("k", 1)))
}

func TestSweepEvictsOnlyIdleKeys(t *testing.T) {
	l, c := newManual(t, 3, 10*time.Second)
	l.Allow("old")
	c.Advance(5 * time.Second)
	l.AllowN("new", 2)
	require.Equal(t, 2, l.Len())

	assert.Equal(t, 0, l.sweep(l.now()), "both keys still hold events")
	c.Advance(5 * time.Second) // 00:10: the event at 00:00 has left
	before := l.Peek("old")
	assert.Equal(t, 1, l.sweep(l.now()))
	assert.Equal(t, 1, l.Len())
	assert.Equal(t, before, l.Peek("old"), "eviction must not change the answer")
	assert.Equal(t, single(10*time.Second, deny(3, 1, 5*time.Second, 5*time.Second, 5*time.Second)), noReceipt(l.Take("new", 2)))
	c.Advance(10 * time.Second)
	assert.Equal(t, 1, l.sweep(l.now()))
	assert.Equal(t, 0, l.Len())
}

func TestSweepShrinksTheMap(t *testing.T) {
	l, c := newManual(t, 3, 10*time.Second)
	empty := l.keys.m.Stats().TotalBuckets
	for i := range 5000 {
		l.Allow(fmt.Sprint("flood-", i))
	}
	grown := l.keys.m.Stats().TotalBuckets
	require.Greater(t, grown, 8*empty, "5000 keys should have grown the table")
	c.Advance(10 * time.Second)
	assert.Equal(t, 5000, l.sweep(l.now()))
	assert.Less(t, l.keys.m.Stats().TotalBuckets, grown/4, "the sweep should give the table back")
	assert.True(t, l.Allow("flood-7"), "an evicted key starts afresh")
	assert.Equal(t, 1, l.Len())
}

func TestJanitorGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(5, 10*time.Second, WithJanitorInterval(3*time.Second))
		require.NoError(t, err)
		for i := range 100 {
			l.Allow(fmt.Sprint("key-", i))
		}
		time.Sleep(9 * time.Second) // three sweeps, all inside the window
		synctest.Wait()
		assert.Equal(t, 100, l.Len())
		time.Sleep(3 * time.Second) // 00:12: the sweep at 00:12 finds every key idle
		synctest.Wait()
		assert.Equal(t, 0, l.Len())
		require.NoError(t, l.Close())
		// synctest.Test fails if the janitor goroutine outlives the bubble.
	})
}

func TestDefaultJanitorInterval(t *testing.T) {
	for _, tc := range []struct {
		windows []time.Duration
		want    time.Duration
	}{
		{[]time.Duration{time.Millisecond}, time.Second},
		{[]time.Duration{10 * time.Second}, 10 * time.Second},
		{[]time.Duration{time.Hour}, time.Minute},
		{[]time.Duration{time.Second, 20 * time.Second}, 20 * time.Second}, // the longest window
	} {
		var policies []Policy
		for i, w := range tc.windows {
			policies = append(policies, Policy{Name: fmt.Sprint(i), Limit: 1, Window: w})
		}
		def, err := newTier("policies", policies)
		require.NoError(t, err)
		cfg, _, err := newConfig(def, nil)
		require.NoError(t, err)
		assert.Equal(t, tc.want, cfg.janitorInterval, "windows %v", tc.windows)
	}
}

func TestBackwardClockNeverOverAdmits(t *testing.T) {
	l, c := newManual(t, 2, 10*time.Second)
	c.Set(t0.Add(20 * time.Second))
	require.True(t, l.AllowN("k", 2))
	c.Set(t0.Add(5 * time.Second)) // back 15s
	assert.False(t, l.Allow("k"), "the events at 00:20 still count")
	assert.Equal(t, 10*time.Second, l.Peek("k").RetryAfter, "decided at 00:20, the newest instant seen")

	// After eviction the floor carries the newest instant to the key's next log.
	c.Set(t0.Add(40 * time.Second))
	require.True(t, l.AllowN("j", 2))
	c.Set(t0.Add(60 * time.Second))
	require.Equal(t, 2, l.sweep(l.now()))
	c.Set(t0.Add(55 * time.Second))
	assert.True(t, l.AllowN("j", 2), "00:40's events left the window by 00:60")
	c.Set(t0.Add(50 * time.Second))
	assert.False(t, l.Allow("j"), "but the ones just recorded at 00:60 have not")
}

// TestEvictionFloorRace forces the interleaving in which a caller misses
// the key, and before it creates the key's log another caller creates it
// and records, the janitor evicts it (raising the floor), and the clock
// steps back. The late log must start at the eviction's floor: decided any
// earlier, its event would share a window with the evicted one.
func TestEvictionFloorRace(t *testing.T) {
	const s = time.Second
	l, c := newManual(t, 1, 10*s)
	c.Set(t0.Add(20 * s))
	interleaved := false
	testHookCreate = func() {
		if interleaved {
			return // the other caller's own insert
		}
		interleaved = true
		require.True(t, l.Allow("k"), "the other caller records at 00:20")
		c.Set(t0.Add(30 * s))
		require.Equal(t, 1, l.sweep(l.now()), "evicted at 00:30, idle by then")
		c.Set(t0.Add(25 * s))
	}
	defer func() { testHookCreate = nil }()
	assert.Equal(t, single(10*s, allow(1, 0, 10*s, 10*s)), noReceipt(l.Take("k", 1)))
	require.True(t, interleaved)
	c.Set(t0.Add(35 * s))
	assert.Equal(t, single(10*s, deny(1, 0, 5*s, 5*s, 5*s)), l.Peek("k"),
		"the late event is at 00:30, where the one at 00:20 had left the window")
}

// TestRefuseNewKeys checks the fail-closed bound: a full limiter refuses
// new keys with Overflow and stores nothing, until the janitor makes room.
func TestRefuseNewKeys(t *testing.T) {
	l, c := newManual(t, 1, 10*time.Second, WithMaxKeys(2), WithRefuseNewKeys())
	require.True(t, l.Allow("a"))
	require.True(t, l.Allow("b"))
	d := l.Take("c", 1)
	assert.Equal(t, overflowDecision(1, 10*time.Second), d)
	assert.Equal(t, d, l.Peek("c"))
	assert.Equal(t, 2, l.Len())
	assert.False(t, l.Allow("a"), "tracked keys keep their own budget")
	c.Advance(10 * time.Second)
	assert.True(t, l.Allow("a"))
	assert.Equal(t, 1, l.sweep(l.now()), "b went idle")
	assert.True(t, l.Allow("c"), "room came back")

	t.Run("exact under concurrency", func(t *testing.T) {
		l, _ := newManual(t, 5, time.Minute, WithMaxKeys(10), WithRefuseNewKeys())
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					if l.Allow(fmt.Sprint(g, "-", i)) {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 10, l.Len())
		assert.Equal(t, int64(10), admitted.Load())
	})
}

func TestRingGrowsLazilyAndShrinks(t *testing.T) {
	l, c := newManual(t, 1000, 10*time.Second)
	l.Allow("k")
	g := l.keys.load("k")
	assert.Same(t, &g.inline[0], g.ring, "a key with one event keeps it inside the log")
	l.Allow("k")
	assert.Same(t, &g.inline[0], g.ring, "and a second")
	l.Allow("k")
	assert.Equal(t, uint32(4), g.size, "the third event moves the ring to the heap")
	assert.NotSame(t, &g.inline[0], g.ring)
	l.Allow("k")
	l.Allow("k")
	assert.Equal(t, uint32(8), g.size)
	for range 95 {
		l.Allow("k")
	}
	assert.Equal(t, uint32(128), g.size)
	for range 900 {
		l.Allow("k")
	}
	assert.Equal(t, uint32(1024), g.size, "capped at the limit, rounded up to the ring's size class: 4,096 bytes")
	assert.False(t, g.wide, "weight 1 keeps 4 bytes an event")
	c.Advance(10 * time.Second)
	l.Allow("k")
	assert.Same(t, &g.inline[0], g.ring, "the ring gives memory back as it empties")
	assert.Equal(t, 999, l.Peek("k").Remaining+1)
}

func TestEventLogSize(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(eventLog{}), "a log is one 64-byte allocation")
}

func TestManualClockAfter(t *testing.T) {
	c := NewManualClock(t0)
	now := c.After(0)
	later := c.After(time.Second)
	assert.Equal(t, t0, <-now)
	c.Advance(999 * time.Millisecond)
	select {
	case <-later:
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Millisecond)
	assert.Equal(t, t0.Add(time.Second), <-later)

	reached := c.afterAt(t0) // an instant the clock has passed
	at := c.afterAt(t0.Add(2 * time.Second))
	assert.Equal(t, t0.Add(time.Second), <-reached)
	c.Set(t0.Add(3 * time.Second))
	assert.Equal(t, t0.Add(3*time.Second), <-at, "fires with the instant the clock was moved to")
}

func TestCoarseClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(1, 10*time.Millisecond, WithCoarseClock(time.Millisecond), WithJanitorInterval(0))
		require.NoError(t, err)
		require.True(t, l.Allow("k")) // stamped at the cached 0
		time.Sleep(9500 * time.Microsecond)
		synctest.Wait()
		d := l.Peek("k")
		assert.False(t, d.Allowed)
		assert.Equal(t, time.Millisecond, d.RetryAfter, "decided at the cached 9ms, not the real 9.5ms")
		time.Sleep(500 * time.Microsecond)
		synctest.Wait() // the clock goroutine has stored 10ms
		assert.True(t, l.Allow("k"))
		require.NoError(t, l.Close())
		// synctest.Test fails if the clock goroutine outlives Close.
	})
	for _, opts := range [][]Option{
		{WithCoarseClock(-time.Millisecond)},
		{WithCoarseClock(10 * time.Millisecond)},
		{WithCoarseClock(time.Millisecond), WithClock(NewManualClock(t0))},
	} {
		_, err := New(1, 10*time.Millisecond, opts...)
		require.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), "coarse clock")
	}
}

// TestDecisionFormat prints a Decision as its fields and its policies'
// parts, none of its backend's own.
func TestDecisionFormat(t *testing.T) {
	l, _ := newManual(t, 3, time.Minute)
	d := l.Take("k", 1)
	got := fmt.Sprintf("%+v", d)
	assert.Equal(t, "{Allowed:true Policy: Limit:3 Window:1m0s Remaining:2 RetryAfter:0s ResetAfter:1m0s RefillAfter:1m0s"+
		" Overflow:false Fallback:false Receipt:{At:2026-01-01 00:00:00 +0000 UTC N:1}"+
		" Policies:[{Policy:{Name: Limit:3 Window:1m0s} Allowed:true Remaining:2 RetryAfter:0s ResetAfter:1m0s RefillAfter:1m0s}]}", got)
	assert.Equal(t, "{true  3 1m0s 2 0s 1m0s 1m0s false false {0001-01-01 00:00:00 +0000 UTC 0} [{{ 3 1m0s} true 2 0s 1m0s 1m0s}]}", fmt.Sprint(l.Peek("other")), "Peek: as a Take would leave it, with no receipt")
}

// TestBinderMatchesBinding checks the binding part decide finds as it makes
// the parts against combine's rule (binding), over parts admitted, refused
// with a wait and refused for good, with equal numbers among them.
func TestBinderMatchesBinding(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := make([]PolicyDecision, rapid.IntRange(1, maxPolicies).Draw(t, "parts"))
		b := binder{wait: -1, never: -1}
		allowed := true
		for i := range parts {
			p := &parts[i]
			p.Allowed = rapid.Bool().Draw(t, "allowed")
			p.Remaining = rapid.IntRange(0, 3).Draw(t, "remaining")
			if !p.Allowed {
				p.RetryAfter = time.Duration(rapid.IntRange(0, 3).Draw(t, "retry"))
			}
			allowed = allowed && p.Allowed
			b.see(parts, i)
		}
		require.Equal(t, binding(parts, allowed), b.index(allowed))
	})
}
