package keyrate

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/keyrate/keyrate/internal/identity"
)

// waiting returns how many callers wait for key's slots, and whether key
// has an entry at all.
func (c *Concurrency) waiting(key string) (n int, tracked bool) {
	g, ok := c.keys.Load(key)
	if !ok {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for w := g.first; w != nil; w = w.next {
		n++
	}
	return n, true
}

// awaitWaiters blocks until key has n waiters, inside a synctest bubble,
// where a waiter that has not queued yet is still running.
func awaitWaiters(t *testing.T, c *Concurrency, key string, n int) {
	t.Helper()
	synctest.Wait()
	got, _ := c.waiting(key)
	require.Equal(t, n, got, "waiters of %q", key)
}

func mustConcurrency(t *testing.T, limit int, tier func(string) string, tiers map[string]int) *Concurrency {
	t.Helper()
	c, err := NewConcurrency(limit, tier, tiers)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Twenty goroutines share a limit of 3, each taking and giving back a slot
// again and again, some waiting (Acquire), some not (TryAcquire), some
// giving up on a short deadline: no more than 3 are ever held, every
// success is counted once, and nothing is left behind.
func TestConcurrencyNeverHoldsMoreThanTheLimit(t *testing.T) {
	defer goleak.VerifyNone(t)
	const goroutines, rounds, limit = 20, 300, 3
	c := mustConcurrency(t, limit, nil, nil)
	var inside, most, taken, refused atomic.Int64
	hold := func(release func()) {
		n := inside.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		taken.Add(1)
		inside.Add(-1)
		release()
		release() // a second call gives back nothing more
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				switch (g + i) % 3 {
				case 0:
					release, err := c.Acquire(context.Background(), "k")
					if assert.NoError(t, err) {
						hold(release)
					}
				case 1:
					if release, ok, _ := c.TryAcquire(context.Background(), "k"); ok {
						hold(release)
					} else {
						refused.Add(1)
					}
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Microsecond)
					release, err := c.Acquire(ctx, "k")
					cancel()
					if err == nil {
						hold(release)
					} else {
						refused.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(limit), "slots held at once")
	assert.Equal(t, int64(goroutines*rounds), taken.Load()+refused.Load(), "every call either held a slot or was refused")
	assert.Equal(t, 0, c.Len(), "no entry left once every slot is back")
	for range limit {
		_, ok, _ := c.TryAcquire(context.Background(), "k")
		require.True(t, ok, "every slot came back")
	}
	_, ok, _ := c.TryAcquire(context.Background(), "k")
	assert.False(t, ok, "and no more than the limit")
}

func TestConcurrencyReleaseTwiceIsHarmless(t *testing.T) {
	c := mustConcurrency(t, 1, nil, nil)
	release, ok, _ := c.TryAcquire(context.Background(), "k")
	require.True(t, ok)
	release()
	release()
	first, ok, _ := c.TryAcquire(context.Background(), "k")
	require.True(t, ok)
	_, ok, _ = c.TryAcquire(context.Background(), "k")
	assert.False(t, ok, "a second release gave back a slot that was not held")
	first()
	assert.Equal(t, 0, c.Len())
}

func TestConcurrencyReleaseFromAnotherGoroutine(t *testing.T) {
	c := mustConcurrency(t, 1, nil, nil)
	release, ok, _ := c.TryAcquire(context.Background(), "k")
	require.True(t, ok)
	done := make(chan struct{})
	go func() { release(); close(done) }()
	<-done
	_, ok, _ = c.TryAcquire(context.Background(), "k")
	assert.True(t, ok)
}

func TestConcurrencyKeysAreSeparate(t *testing.T) {
	c := mustConcurrency(t, 2, nil, nil)
	for _, key := range []string{"a", "a", "b", "b", ""} {
		_, ok, _ := c.TryAcquire(context.Background(), key)
		require.True(t, ok, key)
	}
	_, ok, _ := c.TryAcquire(context.Background(), "a")
	assert.False(t, ok)
	assert.Equal(t, 3, c.Len())
}

// Acquire hands slots out in the order their callers asked, and
// TryAcquire never takes one from under a waiter.
func TestConcurrencyAcquireIsFirstComeFirstServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustConcurrency(t, 1, nil, nil)
		release, ok, _ := c.TryAcquire(context.Background(), "k")
		require.True(t, ok)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				r, err := c.Acquire(context.Background(), "k")
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				r()
			})
			awaitWaiters(t, c, "k", i+1) // queue them in a known order
		}
		_, ok, _ = c.TryAcquire(context.Background(), "k")
		assert.False(t, ok, "TryAcquire does not jump the queue")
		release()
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
		assert.Equal(t, 0, c.Len())
	})
}

func TestConcurrencyAcquireHonoursItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustConcurrency(t, 1, nil, nil)
		release, _, _ := c.TryAcquire(context.Background(), "k")
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r, err := c.Acquire(ctx, "k")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, r)
		assert.Equal(t, 3*time.Second, time.Since(start), "it waited exactly until the deadline")
		n, _ := c.waiting("k")
		assert.Zero(t, n, "the waiter left the queue")
		release()
		assert.Equal(t, 0, c.Len(), "the expired waiter left nothing behind")
	})
}

func TestConcurrencyAcquireStopsAtCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustConcurrency(t, 1, nil, nil)
		release, _, _ := c.TryAcquire(context.Background(), "k")
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error)
		go func() {
			_, err := c.Acquire(ctx, "k")
			errs <- err
		}()
		awaitWaiters(t, c, "k", 1)
		start := time.Now()
		cancel()
		assert.ErrorIs(t, <-errs, context.Canceled)
		assert.Zero(t, time.Since(start), "it returned at once")
		release()
		_, ok, _ := c.TryAcquire(context.Background(), "k")
		assert.True(t, ok, "the cancelled waiter took no slot")
	})
}

func TestConcurrencyAcquireWithDoneContextTakesNothing(t *testing.T) {
	c := mustConcurrency(t, 1, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Acquire(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	release, limit, err := c.AcquireSlot(ctx, "k", false)
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, release)
	assert.Equal(t, 1, limit)
	assert.Equal(t, 0, c.Len())
}

// A slot granted to a waiter just as its context ends (or Close is
// called) is never lost, whichever of the two the waiter's select sees
// first: the waiter keeps it, or hands it on and returns the error.
func TestConcurrencyGrantRacingCancelLosesNoSlot(t *testing.T) {
	for i := range 100 {
		c := mustConcurrency(t, 1, nil, nil)
		release, _, _ := c.TryAcquire(context.Background(), "k")
		w := &waiter{ready: make(chan struct{})}
		_, g := c.acquire("k", 1, w)
		require.NotNil(t, g)
		ctx, cancel := context.WithCancel(context.Background())
		release() // grants the slot to w
		if i%2 == 0 {
			cancel()
		} else {
			c.Close()
		}
		r, err := c.await(ctx, g, w)
		if err == nil {
			r()
		} else {
			assert.Nil(t, r, "an error comes with no slot")
		}
		require.Equal(t, 0, c.Len(), "the slot came back")
		_, ok, _ := c.TryAcquire(context.Background(), "k")
		require.True(t, ok)
		cancel()
	}
}

func TestConcurrencyClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) {
		c, err := NewConcurrency(1, nil, nil)
		require.NoError(t, err)
		release, _, _ := c.TryAcquire(context.Background(), "k")
		errs := make(chan error)
		go func() {
			_, err := c.Acquire(context.Background(), "k")
			errs <- err
		}()
		awaitWaiters(t, c, "k", 1)
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "Close is idempotent")
		assert.ErrorIs(t, <-errs, ErrClosed, "a waiter is woken with ErrClosed")
		_, err = c.Acquire(context.Background(), "j")
		assert.ErrorIs(t, err, ErrClosed)
		_, _, err = c.AcquireSlot(context.Background(), "j", false)
		assert.ErrorIs(t, err, ErrClosed)
		_, ok, _ := c.TryAcquire(context.Background(), "k")
		assert.False(t, ok, "TryAcquire still answers after Close")
		release()
		r, ok, _ := c.TryAcquire(context.Background(), "k")
		assert.True(t, ok, "slots given back after Close come back")
		r()
		assert.Equal(t, 0, c.Len())
	})
}

func TestConcurrencyAcquireSlot(t *testing.T) {
	c := mustConcurrency(t, 2, nil, nil)
	ctx := context.Background()
	r1, limit, err := c.AcquireSlot(ctx, "k", false)
	require.NoError(t, err)
	require.NotNil(t, r1)
	assert.Equal(t, 2, limit)
	r2, _, err := c.AcquireSlot(ctx, "k", true)
	require.NoError(t, err)
	r3, limit, err := c.AcquireSlot(ctx, "k", false)
	assert.NoError(t, err, "a full key is no error")
	assert.Nil(t, r3, "and no slot")
	assert.Equal(t, 2, limit)
	r1()
	r2()
	assert.Equal(t, 0, c.Len())
}

// An idle key costs nothing: its entry goes with its last slot, and a
// waiter that gives up leaves none behind either.
func TestConcurrencyIdleKeysLeaveNoEntry(t *testing.T) {
	c := mustConcurrency(t, 3, nil, nil)
	var releases []func()
	for i := range 10_000 {
		r, ok, _ := c.TryAcquire(context.Background(), "client-"+strconv.Itoa(i))
		require.True(t, ok)
		releases = append(releases, r)
	}
	assert.Equal(t, 10_000, c.Len())
	for _, r := range releases {
		r()
	}
	assert.Equal(t, 0, c.Len())

	r, _, _ := c.TryAcquire(context.Background(), "k")
	c.TryAcquire(context.Background(), "k")
	c.TryAcquire(context.Background(), "k")
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, tracked := c.waiting("k")
	assert.True(t, tracked, "k still holds slots")
	r()
	assert.Equal(t, 1, c.Len())
}

func TestConcurrencyTiers(t *testing.T) {
	plan := func(key string) string {
		switch {
		case key == "panics":
			panic("tier function failed")
		case len(key) > 4 && key[:4] == "pro-":
			return "pro"
		}
		return "unknown-tier"
	}
	c := mustConcurrency(t, 1, plan, map[string]int{"pro": 3})
	count := func(key string) (n int) {
		for {
			if _, ok, _ := c.TryAcquire(context.Background(), key); !ok {
				return n
			}
			n++
		}
	}
	assert.Equal(t, 3, count("pro-1"))
	assert.Equal(t, 1, count("free-1"), "a tier not in the map is the default")
	assert.Equal(t, 1, count("panics"), "a panicking tier function gives the default, never no limit")

	// Behind middleware the key is composed; the tier goes by the identity.
	key := "search\x00x-api-key=pro-2"
	ctx := identity.With(context.Background(), "pro-2")
	for i := range 3 {
		r, limit, err := c.AcquireSlot(ctx, key, false)
		require.NoError(t, err)
		require.NotNil(t, r, "slot %d", i)
		assert.Equal(t, 3, limit)
	}
	r, limit, _ := c.AcquireSlot(context.Background(), "search\x00x-api-key=free-2", false)
	assert.NotNil(t, r)
	assert.Equal(t, 1, limit)
}

// A key whose plan grows gets the new limit at its next acquire, and its
// waiters get the room at once.
func TestConcurrencyTierChangeGrantsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var pro atomic.Bool
		plan := func(string) string {
			if pro.Load() {
				return "pro"
			}
			return ""
		}
		c := mustConcurrency(t, 1, plan, map[string]int{"pro": 3})
		release, _, _ := c.TryAcquire(context.Background(), "k")
		got := make(chan error)
		go func() {
			_, err := c.Acquire(context.Background(), "k")
			got <- err
		}()
		awaitWaiters(t, c, "k", 1)
		pro.Store(true)
		_, ok, _ := c.TryAcquire(context.Background(), "k")
		assert.True(t, ok, "the third slot of the pro plan")
		assert.NoError(t, <-got, "the waiter got the second")
		release()
	})
}

func TestNewConcurrencyErrors(t *testing.T) {
	plan := func(string) string { return "" }
	for name, tc := range map[string]struct {
		limit int
		tier  func(string) string
		tiers map[string]int
	}{
		"limit 0":           {0, nil, nil},
		"negative limit":    {-1, nil, nil},
		"limit over int32":  {math.MaxInt32 + 1, nil, nil},
		"nil tier function": {1, nil, map[string]int{"pro": 3}},
		"tier limit 0":      {1, plan, map[string]int{"pro": 0}},
		"tier over int32":   {1, plan, map[string]int{"pro": math.MaxInt32 + 1}},
		"tier named empty":  {1, plan, map[string]int{"": 3}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := NewConcurrency(tc.limit, tc.tier, tc.tiers)
			assert.ErrorIs(t, err, ErrConfig)
			assert.Nil(t, c)
		})
	}
	c, err := NewConcurrency(math.MaxInt32, plan, nil)
	require.NoError(t, err, "tiers may be empty")
	c.Close()
}

// TryAcquire and release against a model: a count per key. Every answer
// is the model's, and the entries in memory are the keys holding slots.
func TestModelConcurrency(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 4).Draw(t, "limit")
		c, err := NewConcurrency(limit, nil, nil)
		require.NoError(t, err)
		defer c.Close()
		type held struct {
			key     string
			release func()
		}
		var slots []held
		model := map[string]int{}
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			if len(slots) > 0 && rapid.Bool().Draw(t, "release") {
				i := rapid.IntRange(0, len(slots)-1).Draw(t, "which")
				s := slots[i]
				s.release()
				if rapid.Bool().Draw(t, "twice") {
					s.release()
				}
				slots = append(slots[:i], slots[i+1:]...)
				if model[s.key]--; model[s.key] == 0 {
					delete(model, s.key)
				}
			} else {
				key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key")
				release, ok, _ := c.TryAcquire(context.Background(), key)
				require.Equal(t, model[key] < limit, ok, "TryAcquire(%q) with %d held", key, model[key])
				if ok {
					model[key]++
					slots = append(slots, held{key, release})
				}
			}
			require.Equal(t, len(model), c.Len())
		}
	})
}
