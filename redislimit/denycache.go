package redislimit

import (
	"container/heap"
	"sync"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// denyCache remembers, per key, Redis's last refusal for as long as that
// refusal must stand whatever any client does meanwhile, so that the same
// request is refused again without a round trip.
//
// Why a refusal stands: a request of weight n was refused at the server's
// instant s because some policy's window held more than its limit minus n.
// Until the oldest event in that window leaves, nothing leaves it, and
// other clients can only add events: the window holds at least as much,
// and a request of weight n is refused again. RetryAfter does not depend on
// later events at all (they leave after the blocking one).
//
// Under several policies every number of the Decision must stay what Redis
// would answer if no one else had written, counted down by the time
// elapsed, not only the refusal: so an entry holds until the first instant
// any policy's window loses an event, the least RefillAfter among the
// policies that hold events (every refusing policy holds some, so the
// refusal stands at least that long). Past it a policy's Remaining and
// RefillAfter would change in ways the cache cannot see, and it asks Redis
// again. Holding until the last refusing policy's oldest event leaves
// would keep refusing correctly, but with numbers that have gone stale for
// the other policies. A key refused by its daily policy whose per-second
// window still holds events is thus asked again within the second; the
// refusal Redis then gives (the second's window now empty) is held until
// the daily window's oldest event leaves, or maxHold passes.
//
// All of this holds while Redis keeps the key's events. One that loses
// them (FLUSHALL, a DEL, a restart without persistence, a failover that
// lost writes) admits the key again at once, which the cache cannot see:
// so no entry is held longer than maxHold, which bounds the wrong
// refusals after such a loss, at the cost of one round trip per maxHold
// for a key refused without pause.
//
// An entry belongs to the tier that decided it (compared by address, and
// SetTier makes a new tier): a key that has moved to another tier, or
// whose tier SetTier changed, is asked of Redis again.
//
// It never admits: only Redis admits, so the exactness of the log across
// every client and replica is untouched.
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
// most the time an entry is held, maxHold at most. With a clock set by
// tests (withClock) the script and the cache read the same clock, and the
// countdown is exact.
//
// Its expiry is its own, not a TTL cache's. With 10,000 keys held, a lookup
// here costs 110 ns, the countdown included, about what the lookups of
// jellydator/ttlcache (118 ns) and hashicorp/golang-lru's expirable LRU
// (113 ns) cost without it, and a store 251 ns, against 606 and 216 ns
// (BenchmarkDenyCache beside dev/librarybench's BenchmarkExpiringCache, six
// runs side by side on 2 cores). But neither reads the clock entries are
// timed by (both read time.Now), ttlcache evicts the entry used least
// recently where a full cache here drops the one that lapses soonest, and
// the expirable LRU holds every entry for one time fixed at its creation,
// where each refusal here stands as long as its own decision says.
type denyCache struct {
	mu      sync.Mutex
	max     int
	maxHold time.Duration // the longest an entry is held (WithDenyCacheMaxHold)
	stretch bool          // allow for the local and server clocks' rates to differ
	entries map[string]*denied
	order   byExpiry // a heap: the soonest to lapse first
}

// denied is one remembered refusal.
type denied struct {
	key     string
	tier    *tier            // the policies Redis decided under
	n       int              // the weight refused
	sent    int64            // the local instant the call was sent, in ns
	d       keyrate.Decision // Redis's answer at that instant
	hold    time.Duration    // how long after sent, in server time, d stands
	expires int64            // the local instant the entry lapses, in ns
	index   int              // in the heap
}

func newDenyCache(max int, maxHold time.Duration, stretch bool) *denyCache {
	return &denyCache{max: max, maxHold: maxHold, stretch: stretch, entries: make(map[string]*denied)}
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

// hold returns how long after the instant Redis decided d every number of
// d stays Redis's answer, as long as no one else writes: until the oldest
// event of some policy's window leaves it. 0 when no policy holds events.
func hold(d *keyrate.Decision) time.Duration {
	var h time.Duration
	for _, p := range d.Policies() {
		if p.RefillAfter > 0 && (h == 0 || p.RefillAfter < h) {
			h = p.RefillAfter
		}
	}
	return h
}

// lapse returns the local instant an entry held for h from sent lapses:
// the first at which elapsed reaches h.
func (c *denyCache) lapse(sent int64, h time.Duration) int64 {
	ns := int64(h)
	if c.stretch {
		ns -= ns / 1001
	}
	return sent + ns
}

// refuse returns the Decision for a request of weight n for key under tier
// t at the local instant now, and true, when a remembered refusal still
// stands; else false, and the caller asks Redis.
func (c *denyCache) refuse(key string, t *tier, n int, now int64) (keyrate.Decision, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok || e.n != n || e.tier != t {
		c.mu.Unlock()
		return keyrate.Decision{}, false
	}
	el := c.elapsed(now - e.sent)
	if now < e.sent || el >= e.hold {
		c.remove(e)
		c.mu.Unlock()
		return keyrate.Decision{}, false
	}
	var parts [backend.MaxPolicies]keyrate.PolicyDecision
	k := copy(parts[:], e.d.Policies())
	c.mu.Unlock()
	// Every positive duration is at least the hold, which el has not
	// reached: counted down, it stays positive, and the binding policy
	// stays the one Redis named.
	for i := range parts[:k] {
		p := &parts[i]
		p.RetryAfter = countDown(p.RetryAfter, el)
		p.ResetAfter = countDown(p.ResetAfter, el)
		p.RefillAfter = countDown(p.RefillAfter, el)
	}
	return backend.Combine(parts[:k]...), true
}

// countDown returns a duration of Redis's answer el later: 0 stays 0 (no
// wait, no events).
func countDown(v, el time.Duration) time.Duration {
	if v > 0 {
		return v - el
	}
	return v
}

// store remembers Redis's refusal d of a request of weight n for key
// under tier t, sent at the local instant sent, for its hold or maxHold,
// whichever is shorter. Only refusals of a request that can fit later
// (RetryAfter > 0) are worth remembering. When the cache is full, the
// entry that lapses soonest goes, which may be the new one.
func (c *denyCache) store(key string, t *tier, n int, sent int64, d keyrate.Decision) {
	h := hold(&d)
	if d.Allowed || d.RetryAfter <= 0 || h <= 0 {
		return
	}
	h = min(h, c.maxHold)
	expires := c.lapse(sent, h)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		e.tier, e.n, e.sent, e.d, e.hold, e.expires = t, n, sent, d, h, expires
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
	e := &denied{key: key, tier: t, n: n, sent: sent, d: d, hold: h, expires: expires}
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
