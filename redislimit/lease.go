package redislimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/puzpuzpuz/xsync/v3"
	"github.com/redis/go-redis/v9"
)

// WithLeases lets each replica decide a busy key in process, from a lease
// of its budget taken from Redis and spent with no round trip for up to d;
// what is left goes back. Every decision looks back window + d, so no
// window of real time holds more than the limit across replicas; it costs
// up to d / (window + d) of the limit. d is 1ms to the shortest window, in
// whole µs; it needs the sliding log, no calendar policy, and the same d
// on every Limiter of a prefix. Close gives the leases back ("Leases" in
// the README). Default: none.
func WithLeases(d time.Duration) Option {
	return func(cfg *config) { cfg.lease, cfg.leaseSet = d, true }
}

// checkLeases validates WithLeases against the algorithm and the tiers.
func checkLeases(cfg *config, tab *tierTable) error {
	if !cfg.leaseSet {
		return nil
	}
	d := cfg.lease
	switch {
	case d < time.Millisecond || d%time.Microsecond != 0:
		return fmt.Errorf("%w: lease is %v, want at least 1ms in whole microseconds", keyrate.ErrConfig, d)
	case cfg.algorithm != keyrate.SlidingLog:
		// A fixed window ends for every replica at once, and a bucket
		// refills while a lease is spent: neither bounds what a lease
		// spent after its instant adds to a window.
		return fmt.Errorf("%w: leases need the sliding log, not %v", keyrate.ErrConfig, cfg.algorithm)
	}
	for _, t := range tab.named {
		if err := t.checkLease(d); err != nil {
			return err
		}
	}
	return nil
}

// checkLease returns an error wrapping keyrate.ErrConfig when a lease of d
// is longer than one of t's windows: it would cost that policy more than
// half its limit.
func (t *tier) checkLease(d time.Duration) error {
	for i, p := range t.policies {
		if p.Calendar != (keyrate.Calendar{}) {
			// A lease's units, spent within d of its instant, may fall in
			// the next period, which its entry in this one does not bound.
			return fmt.Errorf("%w: %s is a calendar policy (%s), which leases cannot decide exactly: their units may be spent after the period turns", keyrate.ErrConfig, calendarField(t.field, i), p.Calendar)
		}
		if p.Window < d {
			return fmt.Errorf("%w: %s is %v, shorter than the lease %v", keyrate.ErrConfig, windowField(t.field, i), p.Window, d)
		}
	}
	return nil
}

// maxLeaseKeys bounds the keys a Limiter keeps lease state for (a few
// hundred bytes each): a key beyond it is decided in Redis, as without
// leases, until the sweep has removed the state of keys gone quiet.
const maxLeaseKeys = 1 << 16

// leases holds a Limiter's leases, by bounded key.
type leases struct {
	d     int64 // the lease's length, in ns of the local clock
	keys  *xsync.MapOf[string, *lease]
	count atomic.Int64 // entries in keys

	stop chan struct{} // closed by Close
	done chan struct{} // closed when the sweeper has stopped
}

// lease is one key's state in this replica: its lease, a refusal held,
// and what the lease before spent. A decision from a live lease, or a
// refusal held, takes no lock; mu serialises the renewals.
type lease struct {
	key string // as the caller gave it, for giving back

	cur  atomic.Pointer[leaseTerm] // the lease; nil: none
	deny atomic.Pointer[leaseDeny] // a refusal that stands; nil: none

	mu       sync.Mutex
	dead     bool          // removed from the map by the sweep: look again
	renewing chan struct{} // closed when the renewal in flight ends; nil: none
	// What the lease before spent, and when it was sent: its sizing.
	lastUsed int64
	lastSent int64
}

// leaseTerm is one lease: Redis's decision of it, whose Receipt names its
// entry, and Redis's numbers after it; k units, used of them spent; live
// from sent until end, on the local clock. Only used changes.
type leaseTerm struct {
	tr        *tier
	rec       keyrate.Receipt
	parts     [backend.MaxPolicies]keyrate.PolicyDecision
	nparts    int
	k         int64
	sent, end int64
	// used counts what was spent, and what a spend that did not fit adds
	// for a moment before taking it back; leaseEnded and more once the
	// lease has ended, so that no spend fits after its unused part was
	// counted for giving back.
	used atomic.Int64
}

// leaseEnded marks a term's used once it has ended.
const leaseEnded = 1 << 62

// leaseDeny is a refusal Redis gave a weight of n, sent at sent: it stands
// for weights from n up, under tr, until until.
type leaseDeny struct {
	tr          *tier
	d           keyrate.Decision
	n           int
	sent, until int64
}

func newLeases(d time.Duration) *leases {
	return &leases{d: int64(d), keys: xsync.NewMapOf[string, *lease](), stop: make(chan struct{}), done: make(chan struct{})}
}

// get returns the lease state of key id, made if there is room; nil when
// there is none.
func (ls *leases) get(id, key string) *lease {
	if le, ok := ls.keys.Load(id); ok {
		return le
	}
	if ls.count.Load() >= maxLeaseKeys {
		return nil
	}
	le, loaded := ls.keys.LoadOrCompute(id, func() *lease { return &lease{key: key} })
	if !loaded {
		ls.count.Add(1)
	}
	return le
}

// leaseNow returns the local instant leases are timed on, in ns: the
// monotonic clock, or a test's clock, held from going back.
func (l *Limiter) leaseNow() int64 {
	if l.leaseClock != nil {
		return l.leaseClock()
	}
	if l.clock == nil {
		return l.mono()
	}
	now := l.clock.Now().UnixNano()
	for {
		last := l.leaseLast.Load()
		if now <= last {
			return last
		}
		if l.leaseLast.CompareAndSwap(last, now) {
			return now
		}
	}
}

// takeLeased decides a request of weight n > 0 for key (bounded: id) under
// tier tr from the key's lease, renewing the lease through Redis when it is
// spent, ended or of another tier. One caller renews at a time; the others
// wait for its answer.
func (l *Limiter) takeLeased(ctx context.Context, key, id string, tr *tier, n int) (keyrate.Decision, error) {
	return l.decideLeased(ctx, key, id, tr, n, true)
}

// decideLeased is takeLeased; without full, a decision made in process
// sets Allowed alone (Allow's).
func (l *Limiter) decideLeased(ctx context.Context, key, id string, tr *tier, n int, full bool) (keyrate.Decision, error) {
	for {
		le := l.leases.get(id, key)
		if le == nil {
			d, _, _, err := l.askLease(ctx, key, id, tr, n, n)
			return d, err
		}
		// The instant is read before the spend: a spend that fits was
		// decided before the lease ended, and one that comes after the
		// lease was ended (end) finds used past k.
		now := l.leaseNow()
		term := le.cur.Load()
		if term != nil && term.tr == tr && now < term.end {
			if term.used.Add(int64(n)) <= term.k {
				return term.spent(n, now, full), nil
			}
			term.used.Add(-int64(n))
		}
		deny := le.deny.Load()
		if deny != nil && deny.tr == tr && now < deny.until && n >= deny.n {
			var d keyrate.Decision
			if full {
				d = countedDown(&deny.d, time.Duration(now-deny.sent))
			}
			return d, nil
		}
		le.mu.Lock()
		if le.dead || le.cur.Load() != term || le.deny.Load() != deny {
			le.mu.Unlock()
			continue // another caller renewed meanwhile, or the sweep ended it
		}
		if l.closed.Load() {
			le.mu.Unlock()
			return tr.failed(), errClosed("take")
		}
		if ch := le.renewing; ch != nil {
			le.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return tr.failed(), fmt.Errorf("redislimit: take %s: %w", keyRef(l.tagOf(key, id)), ctx.Err())
			}
		}
		ch := make(chan struct{})
		le.renewing = ch
		want := le.want(n, l.leaseNow(), l.leases.d)
		back := le.end(id)
		le.mu.Unlock()
		if back.n > 0 {
			// First, so that the new lease can have what the old one
			// did not spend.
			l.giveBack([]leaseBack{back})
		}
		d, grant, sent, err := l.askLease(ctx, key, id, tr, n, want)
		le.mu.Lock()
		le.renewing = nil
		close(ch)
		if err == nil && !d.Fallback {
			if d.Allowed {
				t := newTerm(tr, &d, grant, n, sent, l.leaseEnd(sent))
				le.cur.Store(t)
				le.deny.Store(nil)
				d = t.spent(n, sent, true)
			} else {
				le.deny.Store(newDeny(tr, d, n, sent, l.leaseEnd(sent)))
			}
		}
		le.mu.Unlock()
		return d, err
	}
}

// leaseEnd returns the local instant a lease sent at sent ends: d later,
// less 0.1% on the real clock, so that a local clock up to that much slower
// than Redis's cannot stretch it.
func (l *Limiter) leaseEnd(sent int64) int64 {
	d := l.leases.d
	if l.clock == nil && l.leaseClock == nil {
		d -= d / 1000
	}
	return sent + d
}

// askLease asks Redis for a lease of at least n and at most want for key
// under tr, through the deny cache, the breaker and the fallback as
// TakeContext does. It returns the decision of the request of weight n
// (its Receipt the lease's, for the weight granted), the weight granted,
// and the local instant it was sent at.
func (l *Limiter) askLease(ctx context.Context, key, id string, tr *tier, n, want int) (keyrate.Decision, int, int64, error) {
	sent := l.leaseNow()
	if l.deny != nil {
		if cached, ok := l.deny.refuse(id, tr, n, l.localNow()); ok {
			return cached, 0, sent, nil
		}
	}
	t := l.tagOf(key, id)
	local := l.localNow()
	r := oneKey(l.storeKey(id, t), n, tr, t, local/1000)
	r.lease = want
	a, fallback, err := l.ask(ctx, r, func(int) string { return "take " + keyRef(t) })
	switch {
	case fallback:
		return l.fallbackTake(tr, id, n), 0, sent, nil
	case err != nil:
		return tr.failed(), 0, sent, err
	}
	v := a.replies[0]
	grant := int(v[len(v)-1])
	v = v[:len(v)-1]
	d, err := tr.decision(n, a.admitted, v)
	if err != nil {
		return tr.failed(), 0, sent, fmt.Errorf("redislimit: take %s: %w", keyRef(t), err)
	}
	if d.Allowed {
		if grant < n || grant > tr.minLimit() {
			return tr.failed(), 0, sent, fmt.Errorf("redislimit: take %s: the script granted a lease of %d for a weight of %d", keyRef(t), grant, n)
		}
		d.Receipt = newReceipt(grant, v.now(), v.rid(), v.gen())
	}
	l.remember(id, tr, n, local, d, d.Allowed)
	return d, grant, sent, nil
}

// want returns the size of the lease to ask for a request of weight n at
// now: about what the lease before spent in a lease's time d, and at least
// n. A key's first lease is n alone, a decision like any other. Under mu.
func (le *lease) want(n int, now, d int64) int {
	used, sent := le.lastUsed, le.lastSent
	if t := le.cur.Load(); t != nil {
		used, sent = min(t.used.Load(), t.k), t.sent
	}
	if used <= 0 || sent == 0 {
		return n
	}
	span := max(now-sent, 1)
	w := float64(used) * float64(d) / float64(span)
	if w >= float64(maxLeaseWant) {
		return maxLeaseWant
	}
	return max(n, int(w+0.5))
}

// maxLeaseWant bounds what a replica asks for; the script grants no more
// than half of what the key has room for in any case.
const maxLeaseWant = 1<<31 - 1

// newTerm returns a lease of grant units for tier tr, of which n are spent
// at once, sent at the local instant sent and live until end; d is Redis's
// decision (its Receipt the lease's).
func newTerm(tr *tier, d *keyrate.Decision, grant, n int, sent, end int64) *leaseTerm {
	t := &leaseTerm{tr: tr, rec: d.Receipt, k: int64(grant), sent: sent, end: end}
	t.nparts = copy(t.parts[:], d.Policies())
	t.used.Store(int64(n))
	return t
}

// newDeny returns Redis's refusal d of weight n under tr, sent at sent: it
// stands until its RetryAfter, and at most until end (a lease's length), so
// that room another replica gave back meanwhile is seen soon.
func newDeny(tr *tier, d keyrate.Decision, n int, sent, end int64) *leaseDeny {
	if d.RetryAfter <= 0 {
		return nil
	}
	return &leaseDeny{tr: tr, d: d, n: n, sent: sent, until: min(sent+int64(d.RetryAfter), end)}
}

// spent returns the Decision of a request of weight n spent from the lease
// at now: Redis's numbers after the lease, with the lease's unspent part,
// and every duration counted down by the time since the lease was sent;
// its Receipt names the lease's entry. Without full, Allowed alone.
func (t *leaseTerm) spent(n int, now int64, full bool) keyrate.Decision {
	if !full {
		return keyrate.Decision{Allowed: true}
	}
	var parts [backend.MaxPolicies]keyrate.PolicyDecision
	k := copy(parts[:], t.parts[:t.nparts])
	el := time.Duration(now - t.sent)
	left := int(max(t.k-t.used.Load(), 0))
	for i := range parts[:k] {
		p := &parts[i]
		p.Allowed = true
		p.Remaining += left
		p.RetryAfter = 0
		p.ResetAfter = max(p.ResetAfter-el, 0)
		p.RefillAfter = max(p.RefillAfter-el, 0)
	}
	d := backend.Combine(parts[:k]...)
	d.Receipt = backend.NewReceipt(backend.ReceiptAt(t.rec), n, backend.ReceiptID(t.rec))
	return d
}

// countedDown returns the refusal d el after it was sent, which is less
// than its RetryAfter (see refused): the binding policy still refuses, and
// a policy whose own wait has passed has room now.
func countedDown(d *keyrate.Decision, el time.Duration) keyrate.Decision {
	var parts [backend.MaxPolicies]keyrate.PolicyDecision
	k := copy(parts[:], d.Policies())
	for i := range parts[:k] {
		p := &parts[i]
		if p.RetryAfter > 0 && p.RetryAfter <= el {
			p.Allowed = true
		}
		p.RetryAfter = max(countDown(p.RetryAfter, el), 0)
		p.ResetAfter = max(countDown(p.ResetAfter, el), 0)
		p.RefillAfter = max(countDown(p.RefillAfter, el), 0)
	}
	if c := backend.Combine(parts[:k]...); !c.Allowed {
		return c
	}
	return *d // not reached while el < d.RetryAfter: a held refusal never admits
}

// leaseBack is the unused part of a lease, to give back.
type leaseBack struct {
	key, id string
	tr      *tier            // the lease's
	d       keyrate.Decision // its Receipt names the lease's entry
	n       int
}

// end ends the lease, if one is held, and returns its unspent part to
// give back: nothing for a lease spent. Under mu.
func (le *lease) end(id string) leaseBack {
	t := le.cur.Swap(nil)
	if t == nil {
		return leaseBack{}
	}
	used := min(t.used.Swap(leaseEnded), t.k) // a spend that did not fit may be counted for a moment
	le.lastUsed, le.lastSent = used, t.sent
	var b leaseBack
	if unused := t.k - used; unused > 0 && t.rec.N() > 0 {
		b = leaseBack{key: le.key, id: id, tr: t.tr, n: int(unused)}
		b.d.Receipt = t.rec
	}
	return b
}

// refundLeased gives n back into the live lease that the decision *d was
// spent from, and reports whether it did; when the lease has ended, the
// refund is the entry's, in Redis.
func (ls *leases) refundLeased(id string, d *keyrate.Decision, n int, now int64) bool {
	le, ok := ls.keys.Load(id)
	if !ok {
		return false
	}
	t := le.cur.Load()
	r := d.Receipt
	if t == nil || now >= t.end || backend.ReceiptAt(t.rec) != backend.ReceiptAt(r) || backend.ReceiptID(t.rec) != backend.ReceiptID(r) {
		return false
	}
	for {
		used := t.used.Load()
		if used >= leaseEnded || int64(n) > used {
			return false
		}
		if t.used.CompareAndSwap(used, used-int64(n)) {
			break
		}
	}
	if left := r.N() - n; left > 0 {
		d.Receipt = backend.NewReceipt(backend.ReceiptAt(r), left, backend.ReceiptID(r))
	} else {
		d.Receipt = keyrate.Receipt{}
	}
	return true
}

// giveBack refunds the unused parts of leases, in one round trip per
// node, under the time budget. What Redis does not take back stays counted
// until it leaves the window: fewer admissions, never more.
func (l *Limiter) giveBack(backs []leaseBack) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	type run struct {
		key  string
		args []any
		cmd  *redis.Cmd
	}
	runs := make([]run, len(backs))
	for i := range backs {
		b := &backs[i]
		runs[i].key, runs[i].args = l.refundArgs(b.id, l.tagOf(b.key, b.id), b.tr, &b.d, b.n)
	}
	for full := false; ; full = true {
		pipe := l.client.Pipeline()
		for i := range runs {
			r := &runs[i]
			switch {
			case !full:
				r.cmd = slidingLogRefundScript.EvalSha(ctx, pipe, []string{r.key}, r.args...)
			case r.cmd.Err() != nil && redis.HasErrorPrefix(r.cmd.Err(), "NOSCRIPT"):
				r.cmd = slidingLogRefundScript.Eval(ctx, pipe, []string{r.key}, r.args...)
			}
		}
		if pipe.Len() == 0 {
			return
		}
		pipe.Exec(ctx) // a refund that fails is not retried
		if full {
			return
		}
	}
}

// sweep gives back the unused part of every lease ended by now, and
// forgets the keys whose state has stood unused for a lease's length since,
// in one round trip per node. The sweeper runs it every lease's length;
// tests call it with their clock's instants.
func (l *Limiter) sweep(now int64) {
	ls := l.leases
	var backs []leaseBack
	ls.keys.Range(func(id string, le *lease) bool {
		le.mu.Lock()
		defer le.mu.Unlock()
		if le.renewing != nil {
			return true
		}
		if t := le.cur.Load(); t != nil && now >= t.end {
			if b := le.end(id); b.n > 0 {
				backs = append(backs, b)
			}
		}
		deny := le.deny.Load()
		if le.cur.Load() == nil && now >= le.lastSent+2*ls.d && (deny == nil || now >= deny.until) {
			le.dead = true
			ls.keys.Delete(id)
			ls.count.Add(-1)
		}
		return true
	})
	if len(backs) > 0 {
		l.giveBack(backs)
	}
}

// sweeper runs sweep every lease's length until Close, on the real clock.
func (l *Limiter) sweeper() {
	defer close(l.leases.done)
	t := time.NewTicker(time.Duration(l.leases.d))
	defer t.Stop()
	for {
		select {
		case <-l.leases.stop:
			return
		case <-t.C:
			l.sweep(l.leaseNow())
		}
	}
}

// Close gives back the unused part of every live lease (WithLeases), in
// one round trip per Redis node within the time budget, and stops the
// Limiter's goroutines; later calls return an error wrapping
// keyrate.ErrClosed. A Limiter without leases holds nothing to give back.
// It is idempotent and returns nil.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		if l.leases == nil {
			return
		}
		close(l.leases.stop)
		<-l.leases.done
		var backs []leaseBack
		l.leases.keys.Range(func(id string, le *lease) bool {
			le.mu.Lock()
			for le.renewing != nil { // a lease on its way, to give back too
				ch := le.renewing
				le.mu.Unlock()
				<-ch
				le.mu.Lock()
			}
			if b := le.end(id); b.n > 0 {
				backs = append(backs, b)
			}
			le.mu.Unlock()
			return true
		})
		if len(backs) > 0 {
			l.giveBack(backs)
		}
	})
	return nil
}

// errClosed is the error of a call after Close.
func errClosed(what string) error {
	return fmt.Errorf("redislimit: %s: %w", what, keyrate.ErrClosed)
}
