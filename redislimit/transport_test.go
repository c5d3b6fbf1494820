package redislimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// Two replicas call one paid API through httplimit.NewTransport, each over
// its own redislimit.Limiter on one Redis: they share one budget of 5 a
// second, so the API never sees 6 calls within a second from the two
// together, and 12 calls take 2 seconds, as from one process.
func TestTransportSharesTheBudgetAcrossReplicas(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := newSteppedClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var arrivals []time.Duration
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, clock.Now().Sub(clock.start))
		mu.Unlock()
	}))
	defer api.Close()
	prefix := uniquePrefix()
	var calls []func()
	for range 2 {
		l, err := redislimit.New(client, 5, time.Second, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
		require.NoError(t, err)
		tr, err := httplimit.NewTransport(nil, l, httplimit.WithClock(clock))
		require.NoError(t, err)
		replica := &http.Client{Transport: tr}
		for range 6 {
			calls = append(calls, func() {
				resp, err := replica.Get(api.URL)
				if assert.NoError(t, err) {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	clock.run(t, calls...)
	slices.Sort(arrivals)
	require.Len(t, arrivals, 12)
	for i := 5; i < len(arrivals); i++ {
		assert.GreaterOrEqual(t, arrivals[i]-arrivals[i-5], time.Second, "6 calls within a second: %v", arrivals)
	}
	assert.Equal(t, 2*time.Second, arrivals[11]-arrivals[0], "12 calls under 5 a second take 2s: %v", arrivals)
}

// steppedClock is a clock that moves only when told, to the earliest
// instant a caller waits for (its After); run moves it only once every
// caller is waiting on it, so that no caller reads it mid-step.
type steppedClock struct {
	start   time.Time
	mu      sync.Mutex
	now     time.Time
	waiters []stepWaiter
}

type stepWaiter struct {
	at time.Time
	ch chan time.Time
}

func newSteppedClock(start time.Time) *steppedClock { return &steppedClock{start: start, now: start} }

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *steppedClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, stepWaiter{c.now.Add(d), ch})
	return ch
}

// step moves the clock to the earliest instant waited for, waking every
// waiter due then.
func (c *steppedClock) step() {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := slices.MinFunc(c.waiters, func(a, b stepWaiter) int { return a.at.Compare(b.at) }).at
	c.now = next
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(next) {
			kept = append(kept, w)
			continue
		}
		w.ch <- next
	}
	c.waiters = kept
}

func (c *steppedClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// run runs callers, each on its own goroutine, and steps the clock
// whenever every one still running waits on it, until all have returned.
func (c *steppedClock) run(t *testing.T, callers ...func()) {
	t.Helper()
	var running atomic.Int64
	running.Store(int64(len(callers)))
	for _, f := range callers {
		go func() {
			defer running.Add(-1)
			f()
		}()
	}
	for deadline := time.Now().Add(time.Minute); ; {
		n := running.Load()
		if n == 0 {
			return
		}
		if w := c.waiting(); w > 0 && int64(w) == n {
			c.step()
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("callers still running after a minute: %d of %d", n, len(callers))
		}
		runtime.Gosched()
	}
}
