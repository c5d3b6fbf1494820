package redislimit

import (
	"container/heap"
	"sync"
	"time"

	"github.com/keyrate/keyrate"
)

// denyCache remembers, per key, Redis's last refusal for as long as that
// refusal must stand whatever any client does meanwhile, so that the same
// request is refused again without a round trip.
//
// Why a refusal stands: a request of weight n was refused at the server's
// instant s because the window held more than limit-n. Until the oldest
// event in the window leaves (s + RefillAfter), nothing leaves it, and
// other clients can only add events: the window holds at least as much,
// and a request of weight n is refused again, with every number of the
// Decision what Redis would answer if no one else had written, counted
// down by the time elapsed (RetryAfter does not depend on later events at
// all: they leave after the blocking one). Past that instant the cache asks
// Redis again. It never admits: only Redis admits, so the exactness of the
// log across every client and replica is untouched.
//
// The clock: Redis decided at its own instant s (its TIME), which the
// cache cannot read. It measures elapsed time on the local monotonic clock
// from the instant the call was sent, which is no later than the instant
// the script ran, so it counts at least the server time that has passed
// since s, plus up to one round trip: the entry lapses early by up to a
// round trip, never late. The two clocks may also run at different rates
// (NTP slews each by up to 500 ppm), so elapsed time is stretched by 1/1000
// before it is compared: an entry held for a minute lapses 60ms early. Both
// errors lead to asking Redis, never to refusing what Redis would admit.
// The one thing the cache cannot see is a forward step of the server's
// clock (a failover to a replica whose clock is ahead, or a wall-clock
// reset): Redis then admits up to the step earlier than the cache, for at
// most the cached RefillAfter. With a clock set by tests (withClock) the
// script and the cache read the same clock, and the countdown is exact.
type denyCache struct {
	mu      sync.Mutex
	max     int
	stretch bool // allow for the local and server clocks' rates to differ
	entries map[string]*denied
	order   byExpiry // a heap: the soonest to lapse first
}

// denied is one remembered refusal.
type denied struct {
	key     string
	n       int              // the weight refused
	sent    int64            // the local instant the call was sent, in ns
	d       keyrate.Decision // Redis's answer at that instant
	expires int64            // the local instant the entry lapses, in ns
	index   int              // in the heap
}

func newDenyCache(max int, stretch bool) *denyCache {
	return &denyCache{max: max, stretch: stretch, entries: make(map[string]*denied)}
}

// elapsed converts local nanoseconds since a call was sent to the server
// time that may have passed since its decision, rounded up to the
// microseconds the scripts count in.
func (c *denyCache) elapsed(ns int64) time.Duration {
	if c.stretch {
		ns += ns / 1000
	}
	return (time.Duration(ns) + time.Microsecond - 1).Truncate(time.Microsecond)
}

// lapse returns the local instant an entry for d sent at sent lapses: the
// first at which elapsed reaches d.RefillAfter.
func (c *denyCache) lapse(sent int64, d keyrate.Decision) int64 {
	ns := int64(d.RefillAfter)
	if c.stretch {
		ns -= ns / 1001
	}
	return sent + ns
}

// refuse returns the Decision for a request of weight n for key at the
// local instant now, and true, when a remembered refusal still stands;
// else false, and the caller asks Redis.
func (c *denyCache) refuse(key string, n int, now int64) (keyrate.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.n != n {
		return keyrate.Decision{}, false
	}
	el := c.elapsed(now - e.sent)
	if now < e.sent || el >= e.d.RefillAfter {
		c.remove(e)
		return keyrate.Decision{}, false
	}
	d := e.d
	d.RetryAfter -= el
	d.RefillAfter -= el
	d.ResetAfter -= el
	return d, true
}

// store remembers Redis's refusal d of a request of weight n for key, sent
// at the local instant sent. Only refusals of a request that can fit later
// (RetryAfter > 0) are worth remembering. When the cache is full, the entry
// that lapses soonest goes, which may be the new one.
func (c *denyCache) store(key string, n int, sent int64, d keyrate.Decision) {
	if d.Allowed || d.RetryAfter <= 0 || d.RefillAfter <= 0 {
		return
	}
	expires := c.lapse(sent, d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		e.n, e.sent, e.d, e.expires = n, sent, d, expires
		heap.Fix(&c.order, e.index)
		return
	}
	for len(c.order) > 0 && c.order[0].expires <= sent {
		c.remove(c.order[0])
	}
	if len(c.order) >= c.max {
		if expires <= c.order[0].expires {
			return
		}
		c.remove(c.order[0])
	}
	e := &denied{key: key, n: n, sent: sent, d: d, expires: expires}
	c.entries[key] = e
	heap.Push(&c.order, e)
}

// forget drops key's entry, as after Redis admitted a request for it: the
// numbers it remembered are no longer Redis's.
func (c *denyCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		c.remove(e)
	}
}

func (c *denyCache) remove(e *denied) {
	heap.Remove(&c.order, e.index)
	delete(c.entries, e.key)
}

// byExpiry orders entries by the instant they lapse, for container/heap.
type byExpiry []*denied

func (h byExpiry) Len() int           { return len(h) }
func (h byExpiry) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h byExpiry) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *byExpiry) Push(x any) {
	e := x.(*denied)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *byExpiry) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
