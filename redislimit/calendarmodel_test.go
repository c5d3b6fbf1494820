package redislimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// reference is what TestModelCore compares a redislimit.Limiter with:
// the in-process *keyrate.Limiter, or, for tiers with calendar policies
// while the core does not count them itself, a calendarRef.
type reference interface {
	Take(key string, n int) keyrate.Decision
	TakeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error)
	RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error
	SetTier(name string, policies []keyrate.Policy) error
	Reset(key string)
	Close() error
}

// coreCountsCalendars reports whether the in-process limiter takes
// calendar policies itself: then TestModelCore compares with it alone.
func coreCountsCalendars() bool {
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Limit: 1, Calendar: keyrate.Daily(time.UTC)}}, keyrate.WithJanitorInterval(0))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// calendarRef is the core's in-process limiter for the sliding policies of
// every tier, and a naive model of calendar counters beside it, with the
// semantics redislimit specifies: per key and calendar, the weight admitted
// in the period that holds the key's decision instant, which starts from 0
// when the period turns; a request is admitted only when the core admits
// its sliding part and every calendar has room, and recorded in both; a
// refund gives back to the calendar's count only while the decision's own
// period lasts. Every tier has a sliding policy, so the core always has
// one to decide.
//
// Its Decisions carry receipts of its own (an index into made), so that a
// refund can find the core's receipt, the key, its life and the instant of
// the decision.
type calendarRef struct {
	core   *keyrate.Limiter
	clock  *keyrate.ManualClock
	tierOf func(string) string
	tiers  map[string][]keyrate.Policy // every tier's policies, "" the default
	keys   map[string]*calKey
	made   []*calDecision
}

// calKey is one key's calendar state, as Redis keeps it: the newest
// instant it was decided at once it exists (Redis decides at no earlier
// one), and per calendar the end of the period counted and the count.
type calKey struct {
	life   int
	exists bool
	last   time.Time
	counts map[string]*calCount
}

type calCount struct {
	end time.Time
	n   int
}

// calDecision is what a calendarRef Decision's receipt names.
type calDecision struct {
	key  string
	life int
	at   time.Time
	core keyrate.Decision // the core's, with its receipt
	left int
	cals []keyrate.Policy // the decision's calendar policies
}

func newCalendarRef(def []keyrate.Policy, tiers map[string][]keyrate.Policy, tierOf func(string) string, clock *keyrate.ManualClock, opts ...keyrate.Option) (*calendarRef, error) {
	r := &calendarRef{clock: clock, tierOf: tierOf, tiers: map[string][]keyrate.Policy{"": def}, keys: map[string]*calKey{}}
	sliding := map[string][]keyrate.Policy{}
	for name, ps := range tiers {
		r.tiers[name] = ps
		sliding[name] = slidingOf(ps)
	}
	core, err := keyrate.NewPolicies(slidingOf(def), append(opts, keyrate.WithTiers(tierOf, sliding))...)
	if err != nil {
		return nil, err
	}
	r.core = core
	return r, nil
}

// slidingOf returns the policies of ps without a calendar.
func slidingOf(ps []keyrate.Policy) []keyrate.Policy {
	var out []keyrate.Policy
	for _, p := range ps {
		if p.Calendar == (keyrate.Calendar{}) {
			out = append(out, p)
		}
	}
	return out
}

func (r *calendarRef) key(k string) *calKey {
	s := r.keys[k]
	if s == nil {
		s = &calKey{counts: map[string]*calCount{}}
		r.keys[k] = s
	}
	return s
}

// instant returns the instant Redis decides key k at: the clock's, or the
// newest the key was decided at.
func (r *calendarRef) instant(k string) time.Time {
	now, s := r.clock.Now(), r.key(k)
	if s.exists && s.last.After(now) {
		return s.last
	}
	return now
}

// count returns what calendar c has admitted for k in its period holding
// now, and that period's end.
func (r *calendarRef) count(k string, c keyrate.Calendar, now time.Time) (int, time.Time) {
	_, end := backend.Period(c, now)
	if cc := r.key(k).counts[c.String()]; cc != nil && cc.end.Equal(end) {
		return cc.n, end
	}
	return 0, end
}

// calRoom reports whether every calendar policy of ps has room for n.
func (r *calendarRef) calRoom(k string, ps []keyrate.Policy, n int, now time.Time) bool {
	if n == 0 {
		return true
	}
	for _, p := range ps {
		if p.Calendar != (keyrate.Calendar{}) {
			if c, _ := r.count(k, p.Calendar, now); n < 0 || n > p.Limit || c+n > p.Limit {
				return false
			}
		}
	}
	return true
}

// part returns calendar policy p's part for k at now: with n recorded when
// admitted, else described at n.
func (r *calendarRef) part(k string, p keyrate.Policy, n int, admitted bool, now time.Time) keyrate.PolicyDecision {
	c, end := r.count(k, p.Calendar, now)
	left := end.Sub(now)
	d := keyrate.PolicyDecision{Policy: p, Remaining: max(p.Limit-c, 0)}
	switch {
	case admitted:
		d.Remaining, d.ResetAfter, d.RefillAfter = p.Limit-c-n, left, left
	case c > 0:
		d.ResetAfter, d.RefillAfter = left, left
	}
	if !admitted && n > 0 && n <= p.Limit && c+n > p.Limit {
		d.RetryAfter = left
	}
	d.Allowed = n == 0 || n > 0 && n <= p.Limit && d.RetryAfter == 0
	return d
}

// record adds n to every calendar of ps for k at now.
func (r *calendarRef) record(k string, ps []keyrate.Policy, n int, now time.Time) {
	s, seen := r.key(k), map[string]bool{}
	for _, p := range ps {
		if p.Calendar == (keyrate.Calendar{}) || seen[p.Calendar.String()] {
			continue // two policies of one calendar count the same events
		}
		seen[p.Calendar.String()] = true
		c, end := r.count(k, p.Calendar, now)
		s.counts[p.Calendar.String()] = &calCount{end: end, n: c + n}
	}
}

// combine makes the Decision of k under ps from the core's sliding parts
// and the calendars', admitted or not, at weight n.
func (r *calendarRef) combine(k string, ps []keyrate.Policy, core keyrate.Decision, n int, admitted bool, now time.Time) keyrate.Decision {
	parts := make([]keyrate.PolicyDecision, 0, len(ps))
	sliding := core.Policies()
	for _, p := range ps {
		if p.Calendar == (keyrate.Calendar{}) {
			parts, sliding = append(parts, sliding[0]), sliding[1:]
			continue
		}
		parts = append(parts, r.part(k, p, n, admitted && n > 0, now))
	}
	d := backend.Combine(parts...)
	if admitted && n > 0 {
		var cals []keyrate.Policy
		for _, p := range ps {
			if p.Calendar != (keyrate.Calendar{}) {
				cals = append(cals, p)
			}
		}
		r.made = append(r.made, &calDecision{key: k, life: r.key(k).life, at: now, core: core, left: n, cals: cals})
		d.Receipt = backend.NewReceipt(now, n, uint64(len(r.made)))
	}
	return d
}

// decided moves k's newest instant on after a decision at now, as Redis
// does for a key it holds.
func (r *calendarRef) decided(k string, now time.Time, admitted bool) {
	s := r.key(k)
	if admitted {
		s.exists = true
	}
	if s.exists && now.After(s.last) {
		s.last = now
	}
}

// described returns the core's sliding parts for k at weight n, recording
// nothing: a refusal's own, or, where the core would admit, its parts as
// they stand (the admission taken back at once).
func (r *calendarRef) described(k string, n int) keyrate.Decision {
	c := r.core.Take(k, n)
	if !c.Allowed || n <= 0 {
		return c
	}
	if err := r.core.RefundN(context.Background(), k, &c, n); err != nil {
		panic(fmt.Sprintf("taking back the core's admission of %d for %q: %v", n, k, err))
	}
	return r.core.Take(k, 0)
}

func (r *calendarRef) policies(k string) []keyrate.Policy {
	if ps, ok := r.tiers[r.tierOf(k)]; ok {
		return ps
	}
	return r.tiers[""]
}

func (r *calendarRef) Take(k string, n int) keyrate.Decision {
	ps, now := r.policies(k), r.instant(k)
	if !r.calRoom(k, ps, n, now) {
		d := r.combine(k, ps, r.described(k, n), n, false, now)
		r.decided(k, now, false)
		return d
	}
	c := r.core.Take(k, n)
	d := r.combine(k, ps, c, n, c.Allowed, now)
	if c.Allowed && n > 0 {
		r.record(k, ps, n, now)
	}
	r.decided(k, now, c.Allowed && n > 0)
	return d
}

func (r *calendarRef) TakeAll(_ context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	room := true
	for _, h := range hits {
		room = room && r.calRoom(h.Key, r.policies(h.Key), h.Weight, r.instant(h.Key))
	}
	ds := make([]keyrate.Decision, len(hits))
	if room {
		cs, ok, _ := r.core.TakeAll(context.Background(), hits)
		for i, h := range hits {
			ps, now := r.policies(h.Key), r.instant(h.Key)
			ds[i] = r.combine(h.Key, ps, cs[i], h.Weight, ok, now)
			if ok && h.Weight > 0 {
				r.record(h.Key, ps, h.Weight, now)
			}
			r.decided(h.Key, now, ok && h.Weight > 0)
		}
		return ds, ok, nil
	}
	for i, h := range hits {
		// Refused: a key with no room is described at its weight, one
		// with room as it stands, which for its policies with room is
		// the same.
		now := r.instant(h.Key)
		ds[i] = r.combine(h.Key, r.policies(h.Key), r.described(h.Key, h.Weight), h.Weight, false, now)
		r.decided(h.Key, now, false)
	}
	return ds, false, nil
}

func (r *calendarRef) RefundN(_ context.Context, k string, d *keyrate.Decision, n int) error {
	if d == nil || d.Receipt.N() <= 0 {
		return fmt.Errorf("%w: nothing left", keyrate.ErrNothingToRefund)
	}
	if left := d.Receipt.N(); n < 1 || n > left {
		return fmt.Errorf("%w: %d of %d", keyrate.ErrExceedsLimit, n, left)
	}
	m := r.made[backend.ReceiptID(d.Receipt)-1]
	coreErr := r.core.RefundN(context.Background(), k, &m.core, n)
	gave, seen := false, map[string]bool{}
	if s := r.key(k); m.key == k && m.life == s.life {
		now := r.instant(k)
		for _, p := range m.cals {
			_, end := backend.Period(p.Calendar, m.at)
			if cc := s.counts[p.Calendar.String()]; !seen[p.Calendar.String()] && cc != nil && cc.end.Equal(end) && end.After(now) && cc.n > 0 {
				seen[p.Calendar.String()] = true
				cc.n -= min(n, cc.n)
				gave = true
			}
		}
	}
	if coreErr != nil && !gave {
		return coreErr
	}
	m.left -= n
	id := backend.ReceiptID(d.Receipt)
	d.Receipt = keyrate.Receipt{}
	if m.left > 0 {
		d.Receipt = backend.NewReceipt(m.at, m.left, id)
	}
	return nil
}

func (r *calendarRef) SetTier(name string, ps []keyrate.Policy) error {
	if err := r.core.SetTier(name, slidingOf(ps)); err != nil {
		return err
	}
	r.tiers[name] = ps
	return nil
}

func (r *calendarRef) Reset(k string) {
	r.core.Reset(k)
	r.keys[k] = &calKey{life: r.key(k).life + 1, counts: map[string]*calCount{}}
}

func (r *calendarRef) Close() error { return r.core.Close() }
