package keyrate

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/keyrate/keyrate/internal/identity"
)

// ErrClosed is returned by Wait, WaitN and TakeContext after Close, also to
// calls waiting when it came.
var ErrClosed = errors.New("keyrate: limiter closed")

// ErrExceedsLimit is wrapped by WaitN's error for a weight that can never be
// admitted, and by RefundN's for more than a decision has left.
var ErrExceedsLimit = errors.New("keyrate: weight can never be admitted")

// Limiter is an exact sliding-window rate limiter over string keys, safe for
// concurrent use. Make one with New or NewPolicies; Close it when done.
type Limiter struct {
	tiers   atomic.Pointer[tierTable]
	tierOf  func(key string) string // WithTiers; nil: every key in the default tier
	only    atomic.Pointer[tier]    // without WithTiers, the default tier: one load per decision
	setTier sync.Mutex              // serialises SetTier's copy-and-swap of tiers
	keys    *keyMap

	reading             // the clock, read as nanoseconds since its base
	baseUnix  int64     // base's wall clock, in nanoseconds since the Unix epoch: Receipts count from it
	scale     scale     // every log's ticks, for the limiter's life
	algorithm Algorithm // WithAlgorithm's

	// lockFree reports that Allow may refuse a full key without its lock
	// (see refusal.go): not while WithMaxKeys makes room by evicting the
	// least recently decided keys, whose order only locked decisions keep,
	// for an unlocked refusal would leave a key hammered at its limit
	// looking idle, and a flood of new keys would evict it, events and all.
	lockFree bool

	closed     atomic.Bool
	done       chan struct{}
	closeOnce  sync.Once
	background sync.WaitGroup // the janitor and the coarse clock
}

// New returns a Limiter that admits at most limit events per key in any span
// of length window. limit must be 1 to math.MaxInt32 and window positive;
// otherwise, or for an invalid option, the error wraps ErrConfig.
func New(limit int, window time.Duration, opts ...Option) (*Limiter, error) {
	def, err := newTier("", []Policy{{Limit: limit, Window: window}})
	if err != nil {
		return nil, err
	}
	return newLimiter(def, opts)
}

// NewPolicies returns a Limiter that admits an event only when each of its
// policies (see backend.CheckPolicies) has room, then records it against all: a
// request one refuses counts against none. One log per key serves them all,
// at the memory of the largest, each policy O(1) amortised.
func NewPolicies(policies []Policy, opts ...Option) (*Limiter, error) {
	def, err := newTier("policies", policies)
	if err != nil {
		return nil, err
	}
	return newLimiter(def, opts)
}

func newLimiter(def *tier, opts []Option) (*Limiter, error) {
	cfg, tab, err := newConfig(def, opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		tierOf: cfg.tierOf,
		keys:   newKeyMap(cfg.maxKeys, cfg.refuseNewKeys),
		done:   make(chan struct{}),

		scale:     cfg.scale,
		algorithm: cfg.algorithm,
		baseUnix:  cfg.base.UnixNano(),
		lockFree:  cfg.maxKeys == 0 || cfg.refuseNewKeys,
	}
	l.keys.counts = cfg.calendars
	l.publish(tab)
	l.reading.start(cfg.clock, cfg.base, cfg.coarse, l.done, &l.background)
	if cfg.janitorInterval > 0 {
		l.startJanitor(cfg.janitorInterval)
	}
	return l, nil
}

// Policies returns a copy of the default tier's policies, in order: New's
// limit and window are Policies()[0].
func (l *Limiter) Policies() []Policy {
	return append([]Policy(nil), l.tiers.Load().def.policies...)
}

// SetTier replaces or adds the policies of the tier called name ("" is the
// default) while the limiter is in use; a decision sees old or new, whole.
// Keys keep their events, as do keys the tier function moves. It refuses,
// changing nothing, what New would, a window the ticks or the coarse clock
// cannot tell (WithMaxWindow), a calendar policy on a limiter made without
// one, and a named tier without WithTiers.
func (l *Limiter) SetTier(name string, policies []Policy) error {
	field, err := tierField(name, l.tierOf != nil)
	if err != nil {
		return err
	}
	t, err := newTier(field, policies)
	if err != nil {
		return err
	}
	if err := checkCoarse(l.coarseResolution, t); err != nil {
		return err
	}
	if t.cals != 0 && !l.keys.counts {
		return fmt.Errorf("%w: %s has a calendar policy, but the limiter was made without one, so its keys have no room for the counts; give one to NewPolicies or WithTiers", ErrConfig, field)
	}
	if err := t.setup(l.scale, l.algorithm, l.base.UnixNano()); err != nil {
		return err
	}
	l.setTier.Lock()
	defer l.setTier.Unlock()
	next, err := l.tiers.Load().with(name, t)
	if err != nil {
		return err
	}
	l.publish(next)
	return nil
}

// publish makes tab the limiter's tiers.
func (l *Limiter) publish(tab *tierTable) {
	l.tiers.Store(tab)
	if l.tierOf == nil {
		l.only.Store(tab.def)
	}
}

// tierFor returns the tier that decides key now. A limiter without tiers
// pays one load for it; Allow and Take spell it out, as the compiler would
// not inline it.
func (l *Limiter) tierFor(key string) *tier {
	t := l.only.Load()
	if t == nil {
		t = l.namedTier(key)
	}
	return t
}

// namedTier returns the tier the tier function names for key, or the
// default tier when there is no such tier.
func (l *Limiter) namedTier(key string) *tier {
	name := tierName(l.tierOf, key)
	tab := l.tiers.Load()
	if t, ok := tab.named[name]; ok {
		return t
	}
	return tab.def
}

// retention returns the tier whose longest window g keeps its events for:
// the tier that last decided it. Called with g.mu held.
func (l *Limiter) retention(g *eventLog) *tier {
	tab := l.tiers.Load()
	if int(g.tier) < len(tab.byID) {
		return tab.byID[g.tier]
	}
	return tab.def // unreachable: ids are published before logs get them
}

// tierKey returns what the tier function decides key by under ctx: the
// identity ctx carries, else key. Without tiers it looks for nothing.
func (l *Limiter) tierKey(ctx context.Context, key string) string {
	if l.tierOf == nil {
		return key
	}
	if id, ok := identity.From(ctx); ok {
		return id
	}
	return key
}

// Allow reports whether one event for key fits now, and records it if so.
func (l *Limiter) Allow(key string) bool { return l.AllowN(key, 1) }

// AllowN reports whether n events for key fit now, and records them if so:
// Take(key, n).Allowed, without the rest of the Decision. Under the sliding
// log without calendar policies a refusal changes nothing, and one of a key
// at its limit takes no lock, unless WithMaxKeys makes room by evicting,
// for which every decision counts as the key's use.
func (l *Limiter) AllowN(key string, n int) bool {
	t := l.only.Load() // tierFor, inlined
	if t == nil {
		t = l.namedTier(key)
	}
	if n < 1 || n > t.minLimit {
		return n == 0
	}
	now := l.now()
	g := l.keys.load(key)
	quick := t.lockFree && l.lockFree
	if g != nil && quick && g.refuses(now, n, t) {
		return false // full: see refusal.go
	}
	g = l.lockFrom(g, key, true)
	if g == nil {
		return false // WithMaxKeys is full
	}
	if g.tier != t.id {
		g.retier(t)
	}
	var ok bool
	if len(t.policies) == 1 {
		ok = g.allow(now, n, t, quick)
	} else {
		ok = g.allowAll(now, n, t, quick)
	}
	g.mu.Unlock()
	return ok
}

// Take decides a request of weight n for key and records it if admitted,
// atomically: one key's calls are decided one after another. A refusal
// records nothing. A weight of 0 always fits and records nothing; a negative
// one, or one above a limit, never fits (RetryAfter 0).
func (l *Limiter) Take(key string, n int) (d Decision) {
	l.take(&d, key, key, n)
	return d
}

// take is Take into *d, which must be zero, with as the string the tier
// function decides by (see tierKey), and returns the instant it decided
// at. A Decision holds every policy's part, so it is filled in place
// rather than copied up the calls.
func (l *Limiter) take(d *Decision, key, as string, n int) int64 {
	t := l.only.Load() // tierFor, inlined
	if t == nil {
		t = l.namedTier(as)
	}
	admissible := n >= 1 && n <= t.minLimit
	now := l.now()
	g := l.lock(key, admissible)
	if g == nil {
		if admissible {
			t.overflow(d, now)
		} else {
			t.untracked(d, now, n)
		}
		return now
	}
	if g.tier != t.id {
		g.retier(t)
	}
	g.decide(d, now, n, t, true)
	at := g.last
	if d.Allowed && n > 0 {
		l.receipt(&d.Receipt, g, n, t)
	}
	g.mu.Unlock()
	return at
}

// receipt sets *r, which must be zero, to the Receipt of n events g
// recorded at its last instant under t. It holds g itself, so that no later
// log can take g's place in memory and be mistaken for it. Called with g.mu
// held.
//
// It writes the fields in place rather than building a Receipt and copying
// it: a copy reads 16 bytes at a time over the 8-byte stores just made,
// which the processor cannot forward from its store buffer (measured: the
// copy was 9% of Take's time on a hot key).
func (l *Limiter) receipt(r *Receipt, g *eventLog, n int, t *tier) {
	r.at, r.n, r.id, r.log, r.logged = l.baseUnix+g.last, n, uint64(uintptr(unsafe.Pointer(g))), g, t.capacity > 0
	if l.algorithm == GCRA {
		g.mark(r) // the key's refund ledger and TATs: see refundCounted
	}
}

// ErrNothingToRefund is wrapped by RefundN's error when nothing could be
// given back: the decision recorded nothing or was given back, is another
// key's, or its events are gone (left the window, evicted, Reset).
var ErrNothingToRefund = errors.New("keyrate: nothing to refund")

// Refund gives back all the weight *d recorded for key and has left: RefundN
// of d.Receipt.N(). Refunding what should not count (a successful login)
// makes "count only the failures" exact.
func (l *Limiter) Refund(ctx context.Context, key string, d *Decision) error {
	if d == nil {
		return fmt.Errorf("%w: no decision", ErrNothingToRefund)
	}
	return l.RefundN(ctx, key, d, d.Receipt.n)
}

// RefundN gives back n of the weight the admitted decision *d recorded for
// key, from its own instant, in every policy, and lowers d's Receipt by n: a
// request that reserved an estimate settles its cost. n outside 1 to
// d.Receipt.N() wraps ErrExceedsLimit, a decision no longer held
// ErrNothingToRefund; no error (a done ctx's included) changes anything.
// Refund through one pointer: a copy still holds the Receipt.
func (l *Limiter) RefundN(ctx context.Context, key string, d *Decision, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case d == nil || d.Receipt.n <= 0:
		return fmt.Errorf("%w: the decision recorded nothing, or was given back already", ErrNothingToRefund)
	case n < 1 || n > d.Receipt.n:
		return fmt.Errorf("%w: a refund of %d, the decision has %d to give back", ErrExceedsLimit, n, d.Receipt.n)
	}
	now := l.now()
	g := l.lock(key, false)
	if g == nil {
		return fmt.Errorf("%w: the key holds no events", ErrNothingToRefund)
	}
	defer g.mu.Unlock()
	if g != d.Receipt.log {
		return fmt.Errorf("%w: the decision is another key's, or the key was evicted or Reset since", ErrNothingToRefund)
	}
	if !g.refund(now, d.Receipt.at-l.baseUnix, n, d, l.retention(g)) {
		return fmt.Errorf("%w: the key no longer holds the decision's events", ErrNothingToRefund)
	}
	d.Receipt.n -= n
	if d.Receipt.n == 0 {
		d.Receipt = Receipt{}
	}
	return nil
}

// Peek returns what Take(key, 1) would now, recording and creating nothing.
func (l *Limiter) Peek(key string) (d Decision) {
	t := l.tierFor(key)
	now := l.now()
	g := l.lock(key, false)
	if g == nil {
		if l.keys.full() {
			t.overflow(&d, now)
		} else {
			t.untracked(&d, now, 1)
		}
		return d
	}
	if g.tier != t.id {
		g.retier(t)
	}
	g.decide(&d, now, 1, t, false)
	g.mu.Unlock()
	return d
}

// lock returns key's log with its mutex held, creating the log first if
// create is set. It returns nil when the key is not tracked and create is
// unset, or when creating it would pass WithMaxKeys under WithRefuseNewKeys.
//
// Callers read the clock before lock, off the key's critical section, and
// decide at the later of that reading and the newest instant the key has
// seen (eventLog.settle). Both were read during the caller's own call, so
// the instant it decides at is too, and each key's instants stay in the
// order its decisions were made: every decision is linearizable.
func (l *Limiter) lock(key string, create bool) *eventLog {
	return l.lockFrom(l.keys.load(key), key, create)
}

// lockFrom is lock for a caller that has looked key up already and found g.
func (l *Limiter) lockFrom(g *eventLog, key string, create bool) *eventLog {
	for {
		if g == nil {
			if !create {
				return nil
			}
			var fresh bool
			if g, fresh = l.keys.create(key); g == nil || fresh {
				return g // refused, or created with its mutex held
			}
		}
		g.mu.Lock()
		if !g.is(dead) {
			return g
		}
		g.mu.Unlock() // evicted between lookup and lock: look again
		runtime.Gosched()
		g = l.keys.load(key)
	}
}

// TakeContext is Take for the Backend interface: ctx's error when ctx is
// done, ErrClosed after Close; the tier function sees ctx's identity
// (backend.ContextWithIdentity), else key.
func (l *Limiter) TakeContext(ctx context.Context, key string, n int) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	var d Decision
	l.take(&d, key, l.tierKey(ctx, key), n)
	return d, nil
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key fit every policy, records them and
// returns nil. It returns ctx's error when ctx ends first (at once, wrapping
// context.DeadlineExceeded, if the deadline would come first), ErrClosed after
// Close, and ErrExceedsLimit for a weight that can never fit.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	as := l.tierKey(ctx, key)
	if t := l.tierFor(as); n < 0 || n > t.minLimit {
		return fmt.Errorf("%w: n is %d, the smallest limit is %d", ErrExceedsLimit, n, t.minLimit)
	}
	for {
		if l.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var d Decision
		at := l.take(&d, key, as, n)
		if d.Allowed {
			return nil
		}
		if d.RetryAfter == 0 && !d.Overflow { // SetTier lowered a limit below n
			return fmt.Errorf("%w: n is %d, policy %q has limit %d", ErrExceedsLimit, n, d.Policy, d.Limit)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.RetryAfter {
			// The key stays out of the message: it is often a credential.
			return fmt.Errorf("keyrate: wait of %v would pass the context deadline: %w",
				d.RetryAfter, context.DeadlineExceeded)
		}
		// Wake at the refusal's own instant plus RetryAfter: the clock may
		// have moved since it was read.
		if err := l.sleep(ctx, at+int64(d.RetryAfter)); err != nil {
			return err
		}
	}
}

// sleep waits until the limiter's clock reaches instant wake (an offset
// from base), ctx ends, or Close.
func (l *Limiter) sleep(ctx context.Context, wake int64) error {
	var ch <-chan time.Time
	switch c := l.clock.(type) {
	case afterAtClock:
		ch = c.afterAt(l.base.Add(time.Duration(wake)))
	case afterClock:
		ch = c.After(time.Duration(wake - l.now()))
	default:
		t := time.NewTimer(time.Duration(wake - l.now()))
		defer t.Stop()
		ch = t.C
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return ErrClosed
	}
}

// Reset forgets every event recorded for key.
func (l *Limiter) Reset(key string) {
	l.keys.remove(key)
}

// Len returns the number of keys tracked.
func (l *Limiter) Len() int { return l.keys.len() }

// Close stops the janitor and waits for it, and wakes every Wait with
// ErrClosed. It is idempotent and returns nil; decisions go on after it.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
		l.background.Wait()
	})
	return nil
}
