package keyrate

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/keyrate/keyrate/internal/identity"
)

// Concurrency limits how many requests of each key are in flight at once (a
// slow endpoint, a model call): a request takes a slot and gives it back when
// it ends, waiters first come first served; an idle key costs no memory.
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

// NewConcurrency returns a Concurrency of limit slots per key (1 to
// math.MaxInt32). With a tier function, tier and tiers are as WithTiers',
// each tier its number of slots: a key in no tier of the map gets limit.
// nil, nil: no tiers. An invalid argument is an ErrConfig error.
func NewConcurrency(limit int, tier func(key string) string, tiers map[string]int) (*Concurrency, error) {
	if err := checkConcurrency(limit, tier, tiers); err != nil {
		return nil, err
	}
	return &Concurrency{
		keys:   xsync.NewMapOf[string, *slots](),
		limit:  limit,
		tierOf: tier,
		tiers:  maps.Clone(tiers),
		done:   make(chan struct{}),
	}, nil
}

// TryAcquire takes one of key's slots if one is free and no one waits for
// one, and returns its release (call it once the request ends; later calls
// do nothing); ok is false otherwise. It fails only with ctx's error, and
// still answers after Close. The tier function sees ctx's identity.
func (c *Concurrency) TryAcquire(ctx context.Context, key string) (release func(), ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	release, _ = c.acquire(key, c.limitFor(c.tierKey(ctx, key)), nil)
	return release, release != nil, nil
}

// Acquire takes one of key's slots, waiting until ctx is done, and returns its
// release. It fails with ctx's error (at once if ctx is done) or ErrClosed,
// holding no slot. The tier function sees ctx's identity.
func (c *Concurrency) Acquire(ctx context.Context, key string) (release func(), err error) {
	return c.acquireAt(ctx, key, c.limitFor(c.tierKey(ctx, key)), true)
}

// AcquireSlot is middleware's call: Acquire with wait, TryAcquire without (a
// nil release and error when full), and key's limit.
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

// Tiered reports whether the Concurrency has a tier function.
func (c *Concurrency) Tiered() bool { return c.tierOf != nil }

// Len returns the number of keys that hold or wait for a slot.
func (c *Concurrency) Len() int { return c.keys.Size() }

// Close wakes waiters with ErrClosed, as later Acquires get it; held slots
// stay held until released. It is idempotent and returns nil.
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
	if id, ok := identity.From(ctx); ok {
		return id
	}
	return key
}

// limitFor returns the limit of the tier the tier function names for as,
// or the default limit: for a tier not in the map, for "", and when the
// tier function panics.
func (c *Concurrency) limitFor(as string) int {
	if c.tierOf == nil {
		return c.limit
	}
	if n, ok := c.tiers[tierName(c.tierOf, as)]; ok {
		return n
	}
	return c.limit
}
