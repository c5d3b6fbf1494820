package httplimit_test

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// steppedClock is a clock that moves only when told, to the earliest
// instant a caller waits for (its After). A test moves it only once every
// caller it runs is waiting on it, so no caller ever reads it mid-step:
// each reads the instant it woke at, and an upstream that stamps a
// request with the clock stamps the instant it was let go.
type steppedClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []stepWaiter
}

type stepWaiter struct {
	at time.Time
	ch chan time.Time
}

func newSteppedClock() *steppedClock { return &steppedClock{now: t0} }

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

// waiting returns how many callers wait on the clock.
func (c *steppedClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// step moves the clock to the earliest instant waited for, and wakes
// every waiter due then.
func (c *steppedClock) step() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return
	}
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
		if int64(c.waiting()) == n {
			c.step()
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("callers still running after a minute: %d of %d, %d waiting on the clock", n, len(callers), c.waiting())
		}
		runtime.Gosched()
	}
}
