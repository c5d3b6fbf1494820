package keyrate

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// Concurrency limits how many requests of each key are in flight at once:
// a slow endpoint, a database, a model call, where what costs is not how
// often requests come but how many run together (nginx's limit_conn, the
// IETF RateLimit draft's "concurrent-requests" unit). A request takes a
// slot before it starts and gives it back when it ends; a key holds at most
// its limit of slots at once. It is safe for concurrent use. Create one
// with NewConcurrency.
//
// Acquire waits for a slot, first come first served: a key's waiters get
// its slots in the order they asked, and TryAcquire never takes a slot
// from under one. A key that holds no slot and has no waiter costs no
// memory: its entry leaves the map when its last slot is given back, so
// that no janitor is needed.
type Concurrency struct {
	keys *xsync.MapOf[string, *slots]
	// limit is the default tier's; tierOf and tiers are WithTiers', nil
	// without it.
	limit  int
	tierOf func(key string) string
	tiers  map[string]int

	closed    atomic.Bool
	done      chan struct{} // closed by Close: wakes every waiter
	closeOnce sync.Once
}

// slots is one key's entry: the slots it holds and its waiters, oldest
// first, under mu. An entry leaves the map marked dead, under mu, once it
// holds nothing and nobody waits; a caller that finds a dead entry looks
// the key up again.
type slots struct {
	key   string
	mu    sync.Mutex
	held  int
	limit int // the limit of the key's tier at its latest acquire
	first *waiter
	last  *waiter
	dead  bool
}

// waiter is one Acquire waiting for a slot. granted is set under the
// entry's mu, and ready closed, when a slot is handed to it.
type waiter struct {
	ready      chan struct{}
	granted    bool
	prev, next *waiter
}

// NewConcurrency returns a Concurrency that lets each key hold at most
// limit slots at once. limit must be 1 to math.MaxInt32.
//
// WithTiers is the one option it takes, to give keys their plan's limit:
// each tier of its map is one Policy with a Limit alone (no Window, no
// Name), the number of slots a key in that tier may hold, and a key in no
// tier of the map holds limit:
//
//	keyrate.NewConcurrency(2, keyrate.WithTiers(plan, map[string][]keyrate.Policy{
//		"pro": {{Limit: 10}},
//	}))
//
// A tier's rate policies (with windows) are refused rather than read, as
// no rate says how many requests may run at once. Every other option
// (WithClock, WithResolution, WithAlgorithm, WithMaxKeys...) configures
// counting over time, which an in-flight limit does not do: it is an
// error too, not ignored. Each error wraps ErrConfig and names what is at
// fault.
func NewConcurrency(limit int, opts ...Option) (*Concurrency, error) {
	t, err := newSlotTiers(limit, opts)
	if err != nil {
		return nil, err
	}
	return &Concurrency{
		keys:   xsync.NewMapOf[string, *slots](),
		limit:  limit,
		tierOf: t.tierOf,
		tiers:  t.limits,
		done:   make(chan struct{}),
	}, nil
}

// TryAcquire takes one of key's slots if one is free now, without
// waiting, and returns the function that gives it back. It takes none,
// and returns ok false, when key holds its limit or other callers are
// waiting for its slots (Acquire): they asked first. The tier function
// (WithTiers) sees key. It keeps answering after Close, as Limiter.Allow
// does.
//
// release gives the slot back; call it when the request ends, once or
// more (only the first call counts), from any goroutine. A slot never
// given back is held for good.
func (c *Concurrency) TryAcquire(key string) (release func(), ok bool) {
	release, _ = c.acquire(key, c.limitFor(key), nil)
	return release, release != nil
}

// Acquire takes one of key's slots, waiting for one until ctx is done,
// and returns the function that gives it back (see TryAcquire). Waiters
// are served first come first served: a slot given back goes to the
// key's oldest waiter.
//
// It returns ctx's error when ctx is done before a slot is free (at once
// when it is done already, even if a slot is free: a request whose caller
// has gone is not started), and ErrClosed after Close, also to calls
// waiting when Close is called. A call that returns an error holds no
// slot. The tier function (WithTiers) sees the identity ctx carries
// (ContextWithIdentity), when it carries one, and key otherwise.
func (c *Concurrency) Acquire(ctx context.Context, key string) (release func(), err error) {
	return c.acquireAt(ctx, key, c.limitFor(c.tierKey(ctx, key)), true)
}

// AcquireSlot is the call middleware makes (middleware.InFlight): with
// wait, Acquire; without, TryAcquire, with the ctx and the errors of
// Acquire, and a nil release and a nil error when key holds its limit.
// limit is key's limit, the number of slots of its tier, that middleware
// advertises; it is set with every answer.
func (c *Concurrency) AcquireSlot(ctx context.Context, key string, wait bool) (release func(), limit int, err error) {
	limit = c.limitFor(c.tierKey(ctx, key))
	release, err = c.acquireAt(ctx, key, limit, wait)
	return release, limit, err
}

// acquireAt takes one of key's slots under limit for a caller holding
// ctx, waiting for one when wait is set.
func (c *Concurrency) acquireAt(ctx context.Context, key string, limit int, wait bool) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	release, _ := c.acquire(key, limit, nil)
	if release != nil || !wait {
		return release, nil
	}
	// Full: queue up. The key may have room again by now, and then the
	// waiter takes it at once.
	w := &waiter{ready: make(chan struct{})}
	release, g := c.acquire(key, limit, w)
	if release != nil {
		return release, nil
	}
	return c.await(ctx, g, w)
}

// await waits for a slot of g to be granted to w, until ctx is done or
// Close. A slot granted just as ctx ends or Close is called goes on to the
// next waiter: the caller gets the error, and holds nothing.
func (c *Concurrency) await(ctx context.Context, g *slots, w *waiter) (func(), error) {
	var err error
	select {
	case <-w.ready:
		return c.releaser(g), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-c.done:
		err = ErrClosed
	}
	if c.abandon(g, w) {
		c.releaser(g)() // granted meanwhile
	}
	return nil, err
}

// acquire takes a slot of key under limit, or else queues w for one when
// w is not nil. It returns the slot's release function, or nil and, for a
// queued w, the entry it waits on.
func (c *Concurrency) acquire(key string, limit int, w *waiter) (func(), *slots) {
	for {
		g, _ := c.keys.LoadOrCompute(key, func() *slots { return &slots{key: key} })
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock() // left the map between lookup and lock: look again
			continue
		}
		if g.limit != limit { // the key's tier changed, or it is new
			g.limit = limit
			g.grant()
		}
		switch {
		case g.first == nil && g.held < g.limit:
			g.held++
			g.mu.Unlock()
			return c.releaser(g), nil
		case w != nil:
			g.enqueue(w)
			g.mu.Unlock()
			return nil, g
		}
		g.mu.Unlock() // refused: g holds its limit or has waiters, so it stays
		return nil, nil
	}
}

// abandon takes w, whose caller gives up waiting, off g's queue, and
// reports whether a slot had been granted to it meanwhile: then the
// caller holds it, and must give it back.
func (c *Concurrency) abandon(g *slots, w *waiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted {
		return true
	}
	g.remove(w)
	c.forgetIdle(g)
	return false
}

// releaser returns the function that gives back one slot of g, once.
func (c *Concurrency) releaser(g *slots) func() {
	var done atomic.Bool
	return func() {
		if !done.CompareAndSwap(false, true) {
			return
		}
		g.mu.Lock()
		g.held--
		g.grant()
		c.forgetIdle(g)
		g.mu.Unlock()
	}
}

// forgetIdle removes g from the map when it holds nothing and nobody
// waits, so that an idle key costs no memory. Called with g.mu held; the
// lock order is an entry's mu, then a bucket of the map, which nothing
// takes the other way round.
func (c *Concurrency) forgetIdle(g *slots) {
	if g.held > 0 || g.first != nil || g.dead {
		return
	}
	g.dead = true
	c.keys.Compute(g.key, func(cur *slots, loaded bool) (*slots, bool) {
		return cur, loaded && cur == g // delete g, never an entry made after it
	})
}

// grant hands free slots to the oldest waiters. Called with g.mu held.
func (g *slots) grant() {
	for g.first != nil && g.held < g.limit {
		w := g.first
		g.remove(w)
		g.held++
		w.granted = true
		close(w.ready)
	}
}

// enqueue puts w last in g's queue. Called with g.mu held.
func (g *slots) enqueue(w *waiter) {
	w.prev = g.last
	if g.last != nil {
		g.last.next = w
	} else {
		g.first = w
	}
	g.last = w
}

// remove takes w off g's queue. Called with g.mu held.
func (g *slots) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else if g.first == w {
		g.first = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else if g.last == w {
		g.last = w.prev
	}
	w.prev, w.next = nil, nil
}

// Tiered reports whether the Concurrency has a tier function (WithTiers):
// its limits then depend on the identity a context carries.
func (c *Concurrency) Tiered() bool { return c.tierOf != nil }

// Len returns the number of keys that hold a slot or wait for one: the
// entries in memory.
func (c *Concurrency) Len() int { return c.keys.Size() }

// Close wakes every call waiting in Acquire with ErrClosed, and makes
// later Acquire and AcquireSlot calls return it. It is idempotent and
// always returns nil. Slots held stay held until given back, and
// TryAcquire keeps answering, as Limiter.Allow does after Close.
func (c *Concurrency) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		close(c.done)
	})
	return nil
}

// tierKey returns what the tier function decides key by under ctx: the
// identity ctx carries, else key.
func (c *Concurrency) tierKey(ctx context.Context, key string) string {
	if c.tierOf == nil {
		return key
	}
	return TierKey(ctx, key)
}

// limitFor returns the limit of the tier the tier function names for as,
// or the default limit: for a tier not in the map, for "", and when the
// tier function panics.
func (c *Concurrency) limitFor(as string) int {
	if c.tierOf == nil {
		return c.limit
	}
	if n, ok := c.tiers[TierName(c.tierOf, as)]; ok {
		return n
	}
	return c.limit
}
