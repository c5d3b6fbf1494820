package keyrate

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// model is the naive reference for everything that changes a key's state:
// decisions, refunds, a key moving between tiers, SetTier, Reset, the
// janitor's sweep and evictions that make room, under each algorithm.
//
// Per tracked key it keeps plain values: under the sliding log a slice of
// the decisions it admitted (instant, weight left), scanned in full, once
// per policy, for each decision; under FixedWindow a count per policy and
// under GCRA a theoretical arrival time per policy, in nanoseconds. It
// mirrors the limiter's observable rules (which keys are tracked, the newest
// instant each was decided at, the floor left by evictions, that a key
// forgets what left the longest window of the tier deciding it, that a
// policy keeps its counter by its place among its tier's policies) and none
// of its arithmetic: no ring, no ticks, no shared log, no binary search.
//
// A calendar policy keeps a count and the end of the period it counts in,
// per place; its periods come from Calendar.bounds, asked on every
// decision, in wall-clock time.
//
// Instants must be whole ticks of the limiter, and windows whole
// resolutions under WithResolution: there, an exact log decides exactly as
// the model does.
type model struct {
	algorithm Algorithm
	tiers     map[string][]Policy // by name; "" is the default
	plan      map[string]string   // the tier function's answers, by key
	keys      map[string]*modelKey
	floor     int64
	unit      int64 // the limiter's tick, for GCRA's refills
	wall      int64 // the limiter's instant 0, in Unix nanoseconds
	gens      int   // the last generation a key's state was given
	history   map[string][]modelEvent
	used      map[string]map[string]bool // the tiers each key's history was decided under
}

type modelKey struct {
	gen    int // new for every state a key is given, so stale receipts show
	last   int64
	tier   string // the tier that last decided it
	events []modelEvent
	count  [maxPolicies]int64 // FixedWindow
	tat    [maxPolicies]int64 // GCRA: when each bucket is full again
	given  uint64             // GCRA: the weight its refunds gave back
	calN   [maxPolicies]int64 // calendar policies: the count of a period
	calEnd [maxPolicies]int64 // and the instant that period ends
}

// modelEvent is an admitted decision: its instant and the weight it still
// holds; id names it for refunds. Under GCRA, back is what its refunds gave
// back of each policy's bucket, in nanoseconds of refill; cal is the weight
// it still holds in each calendar policy's period.
type modelEvent struct {
	at   int64
	w    int
	id   int
	back [maxPolicies]int64
	cal  [maxPolicies]int
}

func newModel(policies []Policy) *model {
	return &model{tiers: map[string][]Policy{"": policies}, plan: map[string]string{}, keys: map[string]*modelKey{},
		history: map[string][]modelEvent{}, used: map[string]map[string]bool{}, wall: t0.UnixNano(), unit: 1}
}

// tierOf returns the name of key's tier and its policies: the tier
// function's answer, or the default tier for a name no tier has.
func (m *model) tierOf(key string) (string, []Policy) {
	if name := m.plan[key]; name != "" {
		if ps, ok := m.tiers[name]; ok {
			return name, ps
		}
	}
	return "", m.tiers[""]
}

func longestOf(policies []Policy) int64 {
	var w time.Duration
	for _, p := range policies {
		w = max(w, p.Window) // a calendar policy's is 0
	}
	return int64(w)
}

// period returns the period of calendar policy p that holds instant at.
func (m *model) period(p Policy, at int64) (start, end int64) {
	s, e := p.Calendar.bounds(time.Unix(0, m.wall+at))
	return s.UnixNano() - m.wall, e.UnixNano() - m.wall
}

func minLimitOf(policies []Policy) int {
	l := math.MaxInt
	for _, p := range policies {
		l = min(l, p.Limit)
	}
	return l
}

// every is GCRA's nanoseconds between refills of p: window/limit, rounded up
// to the limiter's tick.
func (m *model) every(p Policy) int64 {
	return ceilDiv(ceilDiv(int64(p.Window), int64(p.Limit)), m.unit) * m.unit
}

// windowOf returns the index of the calendar window of w that holds at.
func (m *model) windowOf(at int64, w time.Duration) int64 { return floorDiv(m.wall+at, int64(w)) }

// weightIn returns the weight of the events in (now-window, now].
func weightIn(events []modelEvent, now, window int64) int {
	sum := 0
	for _, e := range events {
		if now-window < e.at && e.at <= now {
			sum += e.w
		}
	}
	return sum
}

// settle moves k to instant now under policies, the tier deciding it: the
// instant is never before the newest k has seen; the sliding log forgets
// what left the longest window, FixedWindow's counts start again in a new
// window, and a counter with no place among policies is gone.
func (m *model) settle(k *modelKey, now int64, policies []Policy) int64 {
	now = max(now, k.last)
	prev := k.last
	k.last = now
	switch m.algorithm {
	case SlidingLog:
		// Events leave at the window's start; with no window (calendar
		// policies alone) those of now's own tick stay.
		cut := now - longestOf(policies)
		if longestOf(policies) == 0 {
			tick := now / m.unit * m.unit // now's own tick ends at or after now
			if tick < now {
				tick += m.unit
			}
			cut = tick - m.unit
		}
		k.events = slices.DeleteFunc(k.events, func(e modelEvent) bool { return e.at <= cut })
	case FixedWindow:
		for i, p := range policies {
			if p.Calendar == (Calendar{}) && m.windowOf(now, p.Window) != m.windowOf(prev, p.Window) {
				k.count[i] = 0
			}
		}
	}
	for i := len(policies); i < maxPolicies; i++ {
		k.count[i], k.tat[i] = 0, 0
	}
	for i, p := range policies {
		if p.Calendar == (Calendar{}) {
			continue
		}
		k.count[i], k.tat[i] = 0, 0 // a calendar policy's place holds no counter
		start, end := m.period(p, now)
		if k.calEnd[i] <= start {
			k.calN[i] = 0 // its period is over
		}
		k.calEnd[i] = end
	}
	return now
}

// decide is Take(key, n) at now (record set) or its description (record
// unset, for Peek and the phases of TakeAll), on the key's state: the key's
// own when tracked, a new one when it is about to be, or a scratch one. It
// returns the Decision and, for an admitted, recorded weight, the id of
// its event.
// unlockedRefusals reports whether AllowN's refusals under policies leave
// the key as it was, its instant included, as a refusal that takes no lock
// must (the key moves to the tier that refused it, which such a refusal
// only reads when the key is in it already): under the sliding log with no
// calendar policy, unless WithMaxKeys makes room, whose order of recency
// every decision moves.
func (m *model) unlockedRefusals(policies []Policy, maxKeys int, refuse bool) bool {
	if m.algorithm != SlidingLog || maxKeys > 0 && !refuse {
		return false
	}
	for _, p := range policies {
		if p.Calendar != (Calendar{}) {
			return false
		}
	}
	return true
}

func (m *model) decide(key string, n int, now int64, record bool) (Decision, int) {
	name, policies := m.tierOf(key)
	k, tracked := m.keys[key]
	if !tracked {
		k = &modelKey{tier: name}
		if record && n >= 1 && n <= minLimitOf(policies) {
			m.gens++
			k.gen, k.last = m.gens, m.floor
			m.keys[key] = k
		}
	}
	return m.decideOn(k, key, name, policies, n, now, record)
}

func (m *model) decideOn(k *modelKey, key, name string, policies []Policy, n int, now int64, record bool) (Decision, int) {
	k.tier = name
	now = m.settle(k, now, policies)
	var d Decision
	d.nparts = len(policies)
	parts := d.parts[:d.nparts]
	allowed := true
	for i, p := range policies {
		parts[i] = PolicyDecision{Policy: p}
		m.part(k, i, &parts[i], n, now)
		allowed = allowed && parts[i].Allowed
	}
	admitted := allowed && n > 0
	id := 0
	if admitted && record {
		m.gens++
		id = m.gens
		switch {
		case m.algorithm == SlidingLog && longestOf(policies) > 0: // a tier of calendar policies alone logs nothing
			k.events = append(k.events, modelEvent{at: now, w: n, id: id})
		case m.algorithm == FixedWindow:
			for i := range policies {
				k.count[i] += int64(n)
			}
		case m.algorithm == GCRA:
			for i, p := range policies {
				if p.Calendar == (Calendar{}) {
					k.tat[i] = max(k.tat[i], now) + int64(n)*m.every(p)
				}
			}
		}
		e := modelEvent{at: now, w: n, id: id}
		for i, p := range policies {
			if p.Calendar != (Calendar{}) {
				k.calN[i] += int64(n)
				k.count[i] = 0
				e.cal[i] = n
			}
		}
		m.history[key] = append(m.history[key], e)
		if m.used[key] == nil {
			m.used[key] = map[string]bool{}
		}
		m.used[key][name] = true
	}
	if admitted {
		for i := range parts {
			m.after(k, i, &parts[i], n, now, record)
		}
	}
	for i := range parts {
		if parts[i].Calendar == (Calendar{}) {
			parts[i].ResetAfter = min(parts[i].ResetAfter, parts[i].Window)
			parts[i].RefillAfter = min(parts[i].RefillAfter, parts[i].Window)
		}
	}
	// The binding part: refused, the first that can never fit, else the
	// first of the longest RetryAfter; admitted, the first of the least
	// Remaining.
	var b PolicyDecision
	if allowed {
		b = slices.MinFunc(parts, func(x, y PolicyDecision) int { return x.Remaining - y.Remaining })
	} else {
		var refusing []PolicyDecision
		for _, p := range parts {
			if !p.Allowed {
				refusing = append(refusing, p)
			}
		}
		b = slices.MaxFunc(refusing, func(x, y PolicyDecision) int { return int(x.RetryAfter - y.RetryAfter) })
		if i := slices.IndexFunc(refusing, func(p PolicyDecision) bool { return p.RetryAfter == 0 }); i >= 0 {
			b = refusing[i]
		}
	}
	d.Allowed, d.Policy, d.Limit, d.Window = allowed, b.Name, b.Limit, b.Window
	if b.Period > 0 {
		d.Window = b.Period // a calendar policy's: its period's length
	}
	d.Remaining, d.RetryAfter, d.ResetAfter, d.RefillAfter = b.Remaining, b.RetryAfter, b.ResetAfter, b.RefillAfter
	return d, id
}

// part works out policy i's part of a request of weight n at now, before
// anything is recorded.
func (m *model) part(k *modelKey, i int, part *PolicyDecision, n int, now int64) {
	p := part.Policy
	limit := int64(p.Limit)
	fits := func(held int64) bool { return held+int64(n) <= limit }
	switch {
	case p.Calendar != (Calendar{}):
		start, end := m.period(p, now)
		part.Period = time.Duration(end - start)
		part.Remaining = int(max(limit-k.calN[i], 0))
		part.Allowed = n == 0 || n > 0 && n <= p.Limit && fits(k.calN[i])
		if !part.Allowed && n > 0 && n <= p.Limit {
			part.RetryAfter = time.Duration(end - now)
		}
		if k.calN[i] > 0 {
			part.ResetAfter, part.RefillAfter = time.Duration(end-now), time.Duration(end-now)
		}
	case m.algorithm == SlidingLog:
		w := int64(p.Window)
		held := int64(weightIn(k.events, now, w))
		part.Remaining = int(max(limit-held, 0))
		if held > 0 {
			part.RefillAfter = time.Duration(m.oldest(k, now, w) + w - now)
			part.ResetAfter = time.Duration(m.newest(k) + w - now)
		}
		if n > 0 && n <= p.Limit && !fits(held) {
			// The earliest instant t >= now at which the events still in
			// (t-w, t] leave room for n, found by trying every candidate.
			best := int64(-1)
			for _, e := range k.events {
				if t := e.at + w; t > now && int64(weightIn(k.events, t, w))+int64(n) <= limit && (best < 0 || t < best) {
					best = t
				}
			}
			part.RetryAfter = time.Duration(best - now)
		}
		part.Allowed = n == 0 || n > 0 && n <= p.Limit && fits(held)
	case m.algorithm == FixedWindow:
		end := time.Duration((m.windowOf(now, p.Window)+1)*int64(p.Window) - m.wall - now)
		part.Remaining = int(max(limit-k.count[i], 0))
		part.Allowed = n == 0 || n > 0 && n <= p.Limit && fits(k.count[i])
		if !part.Allowed && n > 0 && n <= p.Limit {
			part.RetryAfter = end
		}
		if k.count[i] > 0 {
			part.ResetAfter, part.RefillAfter = end, end
		}
	case m.algorithm == GCRA:
		every := m.every(p)
		full := max(k.tat[i]-now, 0)
		part.Remaining = max(p.Limit-int(ceilDiv(full, every)), 0) // a tier of a lower limit may find it past full
		room := full+int64(n)*every <= limit*every
		part.Allowed = n == 0 || n > 0 && n <= p.Limit && room
		if !part.Allowed && n > 0 && n <= p.Limit {
			part.RetryAfter = time.Duration(full + int64(n)*every - limit*every)
		}
		part.ResetAfter = time.Duration(full)
		if full > 0 {
			part.RefillAfter = time.Duration(full - (ceilDiv(full, every)-1)*every)
		}
	}
}

// after describes policy i's window after an admitted request of weight n
// at now, recorded (record) or as it would be.
func (m *model) after(k *modelKey, i int, part *PolicyDecision, n int, now int64, record bool) {
	p := part.Policy
	part.Remaining -= n
	switch {
	case p.Calendar != (Calendar{}):
		_, end := m.period(p, now)
		part.ResetAfter, part.RefillAfter = time.Duration(end-now), time.Duration(end-now)
	case m.algorithm == SlidingLog:
		part.ResetAfter = p.Window
		if part.RefillAfter == 0 { // the window held nothing before
			part.RefillAfter = p.Window
		}
	case m.algorithm == FixedWindow:
		end := time.Duration((m.windowOf(now, p.Window)+1)*int64(p.Window) - m.wall - now)
		part.ResetAfter, part.RefillAfter = end, end
	case m.algorithm == GCRA:
		every := m.every(p)
		full := max(k.tat[i]-now, 0)
		if !record {
			full += int64(n) * every
		}
		part.Remaining = p.Limit - int(ceilDiv(full, every))
		part.ResetAfter = time.Duration(full)
		part.RefillAfter = time.Duration(full - (ceilDiv(full, every)-1)*every)
	}
}

// oldest returns the instant of the oldest event in (now-w, now]; newest,
// that of the newest event held.
func (m *model) oldest(k *modelKey, now, w int64) int64 {
	at := int64(math.MaxInt64)
	for _, e := range k.events {
		if now-w < e.at && e.at <= now {
			at = min(at, e.at)
		}
	}
	return at
}

func (m *model) newest(k *modelKey) int64 {
	at := int64(math.MinInt64)
	for _, e := range k.events {
		at = max(at, e.at)
	}
	return at
}

// untracked is the decision for a key that has no state and gets none: on
// an empty state at instant 0 or later.
func (m *model) untracked(key string, n int, now int64) Decision {
	name, policies := m.tierOf(key)
	d, _ := m.decideOn(&modelKey{}, key, name, policies, n, max(now, 0), false)
	return d
}

// overflow is the refusal at now of an untracked key when WithMaxKeys is
// full and no room is made: every policy's wait is the longest window or,
// if later, the turn of the latest calendar period, an estimate of when
// room comes back, and the first policy binds.
func (m *model) overflow(key string, now int64) (d Decision) {
	_, policies := m.tierOf(key)
	w := time.Duration(longestOf(policies))
	for _, p := range policies {
		if p.Calendar != (Calendar{}) {
			_, end := m.period(p, now)
			w = max(w, time.Duration(end-now))
		}
	}
	for i, p := range policies {
		d.parts[i] = PolicyDecision{Policy: p, RetryAfter: w, RefillAfter: min(w, p.Window), ResetAfter: min(w, p.Window)}
		if p.Calendar != (Calendar{}) {
			start, end := m.period(p, now)
			d.parts[i].Period = time.Duration(end - start)
			d.parts[i].RefillAfter, d.parts[i].ResetAfter = time.Duration(end-now), time.Duration(end-now)
		}
	}
	d.nparts = len(policies)
	b := d.parts[0]
	d.Policy, d.Limit, d.Window, d.RetryAfter, d.RefillAfter, d.ResetAfter = b.Name, b.Limit, b.Window, b.RetryAfter, b.RefillAfter, b.ResetAfter
	if b.Period > 0 {
		d.Window = b.Period
	}
	d.Overflow = true
	return d
}

// overflowDecision is the refusal of an untracked key under one unnamed
// policy when WithMaxKeys is full.
func overflowDecision(limit int, window time.Duration) Decision {
	return newModel([]Policy{{Limit: limit, Window: window}}).overflow("", 0)
}

// forget drops key's state, as Reset or an eviction does.
func (m *model) forget(key string) {
	delete(m.keys, key)
	m.history[key] = nil // its events are forgotten: they no longer count
	m.used[key] = nil
}

// makeRoom mirrors a limiter at its bound of maxKeys that made room for a
// new key: it reads which of the model's keys the limiter no longer tracks,
// checks that they are as many as one batch evicts and that none of them
// was decided after a key kept, and forgets them as the limiter did, raising
// the floor. Which of several keys decided at one instant goes is the
// limiter's choice.
func (m *model) makeRoom(t require.TestingT, maxKeys int, tracked func(key string) bool) {
	var gone []string
	for key := range m.keys {
		if !tracked(key) {
			gone = append(gone, key)
		}
	}
	require.Len(t, gone, min(max(maxKeys/roomShare, 1), len(m.keys)), "keys evicted to make room")
	for key, k := range m.keys {
		if slices.Contains(gone, key) {
			continue
		}
		for _, g := range gone {
			require.LessOrEqual(t, m.keys[g].last, k.last, "%q evicted, decided after %q that stays", g, key)
		}
	}
	for _, g := range gone {
		m.floor = max(m.floor, m.keys[g].last)
		m.forget(g)
	}
}

// sweep is the janitor's walk at now: a key goes once nothing it holds
// counts any more under the tier that last decided it.
func (m *model) sweep(now int64) int {
	evicted := 0
	for key, k := range m.keys {
		eff := m.settle(k, now, m.tiers[k.tier])
		idle := len(k.events) == 0
		for i := range maxPolicies {
			idle = idle && k.count[i] == 0 && k.tat[i] <= eff && (k.calN[i] == 0 || k.calEnd[i] <= eff)
		}
		if idle {
			m.floor = max(m.floor, eff)
			m.forget(key)
			evicted++
		}
	}
	return evicted
}

// taken is an admitted decision that a test may refund: the limiter's
// Decision, refunded through its address, and what the model knows of it.
type taken struct {
	key  string
	gen  int
	id   int
	at   int64
	left int
	mark uint64             // GCRA: the weight the key's refunds had given back
	end  [maxPolicies]int64 // GCRA: each bucket's TAT the decision left
	d    Decision
}

// refund mirrors RefundN(on, &tk.d, n) at now, and returns the error it
// must return: nil, ErrExceedsLimit or ErrNothingToRefund.
func (m *model) refund(on string, tk *taken, n int, now int64) error {
	if tk.left <= 0 {
		return ErrNothingToRefund
	}
	if n < 1 || n > tk.left {
		return ErrExceedsLimit
	}
	k, tracked := m.keys[on]
	if !tracked || on != tk.key || k.gen != tk.gen {
		return ErrNothingToRefund
	}
	policies := m.tiers[k.tier] // the tier that last decided it
	now = m.settle(k, now, policies)
	since := k.given - tk.mark
	gave := false
	// A calendar policy gives back while the period that counted the
	// decision lasts.
	parts := tk.d.Policies()
	for i, p := range policies {
		if p.Calendar == (Calendar{}) || i >= len(parts) || parts[i].Policy != p {
			continue
		}
		start, end := m.period(p, now)
		if k.calEnd[i] == end && tk.at >= start && k.calN[i] > 0 {
			back := min(int64(n), k.calN[i])
			k.calN[i] -= back
			h := m.history[on]
			j := slices.IndexFunc(h, func(e modelEvent) bool { return e.id == tk.id })
			h[j].cal[i] -= int(back)
			gave = true
		}
	}
	switch {
	case m.algorithm == GCRA && k.given > maxLedger:
		// The ledger has no room to count it: the buckets give nothing.
	case m.algorithm == SlidingLog:
		if i := slices.IndexFunc(k.events, func(e modelEvent) bool { return e.id == tk.id }); i >= 0 {
			if k.events[i].w -= n; k.events[i].w == 0 {
				k.events = slices.Delete(k.events, i, i+1)
			}
			h := m.history[on]
			j := slices.IndexFunc(h, func(e modelEvent) bool { return e.id == tk.id })
			h[j].w -= n // an event of weight 0 counts in no window
			gave = true
		}
	default:
		counted := false
		for i, p := range policies {
			if i >= len(parts) || parts[i].Policy != p || p.Calendar != (Calendar{}) {
				continue // the policy changed since: its counter may not hold the decision
			}
			switch {
			case m.algorithm == FixedWindow && k.count[i] > 0 && m.windowOf(tk.at, p.Window) == m.windowOf(now, p.Window):
				k.count[i] -= min(int64(n), k.count[i])
				gave, counted = true, true
			case m.algorithm == GCRA && k.tat[i] > now && since <= uint64(p.Limit):
				// The part of the decision's tokens not yet refilled, its
				// span moved earlier by all weight given back since (more
				// than the limit moves it all before now).
				end := tk.end[i] - int64(since)*m.every(p)
				if back := min(int64(n)*m.every(p), end-now, k.tat[i]-now); back > 0 {
					k.tat[i] -= back
					gave, counted = true, true
					h := m.history[on]
					j := slices.IndexFunc(h, func(e modelEvent) bool { return e.id == tk.id })
					h[j].back[i] += back
				}
			}
		}
		if counted && m.algorithm == GCRA {
			k.given += uint64(n)
		}
	}
	if !gave {
		return ErrNothingToRefund
	}
	tk.left -= n
	return nil
}

// checkExact asserts the invariant: for every policy of the tier a key was
// decided under, no half-open interval of its window holds more than its
// limit of the key's admitted events, refunds taken out. It checks the keys
// whose history was decided under one tier alone, and holds only while no
// policy changed: a changed policy counts only from then on.
func (m *model) checkExact(t require.TestingT) {
	for key, h := range m.history {
		if len(m.used[key]) > 1 {
			continue
		}
		name := ""
		for n := range m.used[key] {
			name = n
		}
		for _, p := range m.tiers[name] {
			for _, end := range h {
				in := weightIn(h, end.at, int64(p.Window))
				require.LessOrEqual(t, in, p.Limit, "key %q, policy %+v: %d in the window ending at %v", key, p, in, time.Duration(end.at))
			}
		}
	}
}

// modelCalendars are the calendars drawPolicies draws from: days, weeks
// and months in zones with daylight saving (Lord Howe's of half an hour)
// and without, on billing days that some months lack.
var modelCalendars = func() []Calendar {
	load := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			panic(err)
		}
		return loc
	}
	ny, tokyo, lordHowe := load("America/New_York"), load("Asia/Tokyo"), load("Australia/Lord_Howe")
	return []Calendar{Daily(time.UTC), Daily(ny), Daily(lordHowe), Weekly(time.Sunday, tokyo), Weekly(time.Monday, ny),
		Monthly(31, ny), Monthly(1, time.UTC), Monthly(29, lordHowe), Monthly(15, tokyo)}
}()

// checkCalendars asserts a calendar policy's invariant: no period holds
// more than its limit of a key's admitted weight, less what refunds gave
// back to that period. Like checkExact, it checks the keys decided under
// one tier alone, while no policy changed.
func (m *model) checkCalendars(t require.TestingT) {
	for key, h := range m.history {
		if len(m.used[key]) != 1 {
			continue
		}
		for name := range m.used[key] {
			for i, p := range m.tiers[name] {
				if p.Calendar == (Calendar{}) {
					continue
				}
				held := map[int64]int{}
				for _, e := range h {
					start, _ := m.period(p, e.at)
					held[start] += e.cal[i]
					require.LessOrEqual(t, held[start], p.Limit, "key %q, policy %+v: the period from %v holds more than its limit",
						key, p, time.Unix(0, m.wall+start))
				}
			}
		}
	}
}

// drawPolicies draws 1 to 3 policies with windows of whole quarter seconds
// up to 8s, sometimes equal, the only one sometimes unnamed; limits small
// (1 to 6) or, with big, sometimes as large as a limit can be. With
// calendars, a third of them are calendar policies instead.
func drawPolicies(t *rapid.T, label string, big, calendars bool) []Policy {
	policies := make([]Policy, rapid.IntRange(1, 3).Draw(t, label))
	for i := range policies {
		limit := rapid.IntRange(1, 6).Draw(t, label+" limit")
		if big && rapid.IntRange(0, 3).Draw(t, label+" big") == 0 {
			limit = rapid.SampledFrom([]int{1 << 30, math.MaxInt32 - 1, math.MaxInt32}).Draw(t, label+" big limit")
		}
		policies[i] = Policy{
			Name:   fmt.Sprint("p", i),
			Limit:  limit,
			Window: time.Duration(rapid.IntRange(1, 32).Draw(t, label+" window")) * time.Second / 4,
		}
		if calendars && rapid.IntRange(0, 2).Draw(t, label+" calendar") == 0 {
			policies[i].Window = 0
			policies[i].Calendar = rapid.SampledFrom(modelCalendars).Draw(t, label+" which calendar")
		}
	}
	if len(policies) == 1 && rapid.Bool().Draw(t, label+" unnamed") {
		policies[0].Name = ""
	}
	return policies
}

// drawWeight draws a request's weight for policies: often small, sometimes
// as large as their limits, or past them, or negative.
func drawWeight(t *rapid.T, policies []Policy) int {
	if rapid.IntRange(0, 4).Draw(t, "heavy") > 0 {
		return rapid.IntRange(-1, 7).Draw(t, "n")
	}
	limit := minLimitOf(policies)
	return rapid.SampledFrom([]int{limit, limit - 1, limit/2 + 1, limit + 1, math.MaxInt32}).Draw(t, "heavy n")
}

// TestModel drives a limiter and the model with one random sequence of
// every operation that changes a key's state, together: Take,
// AllowN and Peek at weights from -1 to 2^31-1, TakeAll, Refund and RefundN
// (of fresh, old, expired, refunded, stale and other keys' decisions, of
// part of one, of more than is left), Reset, the janitor's sweep, evictions
// that make room under WithMaxKeys (or its refusals), SetTier of any tier
// (some with windows the limiter cannot hold), keys moving between tiers,
// and clock steps both ways. It compares every Decision whole, each
// policy's part included, every refund's error, every sweep's count and
// the keys tracked, under each algorithm, a resolution and ticks of 5ns to
// 100µs (WithMaxWindow).
//
// Run it long with -rapid.checks=1000000 (see CONTRIBUTING.md).
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		algorithm := rapid.SampledFrom([]Algorithm{SlidingLog, SlidingLog, FixedWindow, GCRA}).Draw(t, "algorithm")
		calendars := rapid.IntRange(0, 2).Draw(t, "calendars") > 0
		m := newModel(drawPolicies(t, "default", true, calendars))
		m.algorithm = algorithm
		for _, name := range []string{"a", "b"} {
			if rapid.Bool().Draw(t, "tier "+name) {
				m.tiers[name] = drawPolicies(t, "tier "+name, true, calendars)
			}
		}
		maxKeys := rapid.IntRange(0, 3).Draw(t, "maxKeys")
		refuse := maxKeys > 0 && rapid.Bool().Draw(t, "refuse")
		c := NewManualClock(t0)
		opts := []Option{WithClock(c), WithJanitorInterval(0), WithMaxKeys(maxKeys), WithAlgorithm(algorithm),
			WithMaxWindow(rapid.SampledFrom([]time.Duration{0, 8 * time.Second, time.Hour, 30 * time.Hour}).Draw(t, "max window")),
			WithTiers(func(key string) string { return m.plan[key] }, tiersBut(m.tiers, ""))}
		if algorithm == SlidingLog && rapid.IntRange(0, 3).Draw(t, "resolution") == 0 {
			opts = append(opts, WithResolution(time.Second/4))
		}
		if refuse {
			opts = append(opts, WithRefuseNewKeys())
		}
		l, err := NewPolicies(m.tiers[""], opts...)
		require.NoError(t, err)
		defer l.Close()
		m.unit = l.scale.unit
		keys := []string{"a", "b", "c", "d"}
		var decisions []*taken
		changed := false
		keep := func(key string, d Decision, id int) {
			k := m.keys[key]
			decisions = append(decisions, &taken{key: key, gen: k.gen, id: id, at: k.last, left: d.Receipt.N(), mark: k.given, end: k.tat, d: d})
		}
		atBound := func(key string) bool {
			_, tracked := m.keys[key]
			return !tracked && maxKeys > 0 && len(m.keys) >= maxKeys
		}

		for i := range rapid.IntRange(1, 200).Draw(t, "steps") {
			// Quarter-second steps land exactly on window edges often; a
			// few go backwards; a third stay put, so that windows fill up.
			if rapid.IntRange(0, 2).Draw(t, "move") > 0 {
				c.Advance(time.Duration(rapid.IntRange(-8, 24).Draw(t, "step")) * time.Second / 4)
			}
			// Calendar periods turn over hours, days and months: leaps
			// that far, back too, and to a calendar's next turn or a
			// quarter second either side of it, across years.
			if calendars && rapid.IntRange(0, 7).Draw(t, "leap") == 0 {
				const day = 24 * time.Hour
				switch rapid.IntRange(0, 3).Draw(t, "leap kind") {
				case 0:
					c.Advance(time.Duration(rapid.IntRange(-48, 48).Draw(t, "hours")) * time.Hour)
				case 1:
					c.Advance(time.Duration(rapid.IntRange(-3, 40).Draw(t, "days")) * day)
				case 2:
					c.Advance(time.Duration(rapid.IntRange(1, 14).Draw(t, "months")) * 30 * day)
				default:
					var cals []Calendar
					for _, ps := range m.tiers {
						for _, p := range ps {
							if p.Calendar != (Calendar{}) {
								cals = append(cals, p.Calendar)
							}
						}
					}
					if len(cals) > 0 {
						_, end := rapid.SampledFrom(cals).Draw(t, "turn of").bounds(c.Now())
						c.Set(end.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "off the turn")) * time.Second / 4))
					}
				}
			}
			now := int64(c.Now().Sub(t0))
			at := fmt.Sprintf("step %d at %v", i, time.Duration(now))
			key := rapid.SampledFrom(keys).Draw(t, "key")
			_, policies := m.tierOf(key)
			switch op := rapid.IntRange(0, 30).Draw(t, "op"); {
			case op < 12: // Take or AllowN
				n := drawWeight(t, policies)
				allowN := rapid.Bool().Draw(t, "allowN")
				admissible := n >= 1 && n <= minLimitOf(policies)
				makesRoom := admissible && atBound(key) && !refuse
				var got Decision
				if allowN {
					got.Allowed = l.AllowN(key, n)
				} else {
					got = l.Take(key, n)
				}
				if makesRoom {
					m.makeRoom(t, maxKeys, func(k string) bool { return l.keys.load(k) != nil })
				}
				var want Decision
				id := 0
				k, tracked := m.keys[key]
				var before modelKey
				if tracked {
					before = *k
					before.events = slices.Clone(k.events)
				}
				switch {
				case admissible && atBound(key):
					want = m.overflow(key, now)
				case admissible || tracked && !allowN:
					want, id = m.decide(key, n, now, true)
					if tracked && allowN && !want.Allowed && m.unlockedRefusals(policies, maxKeys, refuse) {
						name := k.tier
						*k = before // such a refusal leaves the key as it was, but in the tier that decided it
						k.tier = name
					}
				case !allowN:
					want = m.untracked(key, n, now)
				default:
					want.Allowed = n == 0 // AllowN answers these without looking at the key
				}
				if allowN {
					require.Equal(t, want.Allowed, got.Allowed, "%s: AllowN(%q, %d)", at, key, n)
					break
				}
				require.Equal(t, want, noReceipt(got), "%s: Take(%q, %d)", at, key, n)
				require.Equal(t, want.parts[:want.nparts], got.Policies())
				require.Equal(t, got.Allowed && n > 0, got.Receipt.N() > 0, "%s: a receipt for what was recorded", at)
				if got.Receipt.N() > 0 {
					require.Equal(t, n, got.Receipt.N())
					keep(key, got, id)
				}
			case op < 15:
				want, _ := m.decide(key, 1, now, false)
				if _, tracked := m.keys[key]; !tracked && refuse && atBound(key) {
					want = m.overflow(key, now) // a Take would be refused; otherwise it would make room
				}
				require.Equal(t, want, l.Peek(key), "%s: Peek(%q)", at, key)
			case op < 17 && maxKeys == 0: // TakeAll
				hits := make([]Hit, rapid.IntRange(1, 4).Draw(t, "hits"))
				for j := range hits {
					k := rapid.SampledFrom(keys).Draw(t, "hit key")
					_, ps := m.tierOf(k)
					hits[j] = Hit{k, drawWeight(t, ps)}
				}
				want, wantOK, ids := m.takeAll(hits, now)
				got, ok, _ := l.TakeAll(context.Background(), hits)
				require.Equal(t, wantOK, ok, "%s: TakeAll(%v)", at, hits)
				for j := range hits {
					require.Equal(t, want[j], noReceipt(got[j]), "%s: TakeAll(%v), hit %d", at, hits, j)
					require.Equal(t, want[j].parts[:want[j].nparts], got[j].Policies())
				}
				seen := map[string]bool{}
				for j, h := range hits {
					if !seen[h.Key] && got[j].Receipt.N() > 0 {
						keep(h.Key, got[j], ids[h.Key])
					}
					seen[h.Key] = true
				}
			case op < 22 && len(decisions) > 0: // Refund or RefundN
				tk := rapid.SampledFrom(decisions).Draw(t, "decision")
				on := tk.key
				if rapid.IntRange(0, 4).Draw(t, "other key") == 0 {
					on = key
				}
				n := tk.left
				var err error
				if rapid.Bool().Draw(t, "part") {
					n = rapid.SampledFrom([]int{1, tk.left / 2, tk.left - 1, tk.left + 1, 0}).Draw(t, "refund n")
					err = l.RefundN(context.Background(), on, &tk.d, n)
				} else {
					err = l.Refund(context.Background(), on, &tk.d)
				}
				if want := m.refund(on, tk, n, now); want == nil {
					require.NoError(t, err, "%s: refund %d of %+v on %q", at, n, tk, on)
				} else {
					require.ErrorIs(t, err, want, "%s: refund %d of %+v on %q", at, n, tk, on)
				}
				require.Equal(t, max(tk.left, 0), tk.d.Receipt.N(), "%s: what the receipt has left", at)
			case op < 24:
				require.Equal(t, m.sweep(now), l.sweep(now), "%s: sweep", at)
			case op < 25:
				l.Reset(key)
				m.forget(key)
			case op == 30: // GCRA: the key's refund ledger is (nearly) full
				if k := m.keys[key]; algorithm == GCRA && k != nil {
					k.given = maxLedger + 1 - rapid.SampledFrom([]uint64{0, 1, 2, 1000}).Draw(t, "ledger room")
					g := l.lock(key, false)
					g.head, g.n = uint32(k.given>>32), uint32(k.given)
					g.mu.Unlock()
				}
			case op < 27: // a key moves to another tier, or to one that does not exist
				m.plan[key] = rapid.SampledFrom([]string{"", "a", "b", "none"}).Draw(t, "plan")
			default:
				name := rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, "tier")
				ps := drawPolicies(t, "new policies", true, calendars)
				hasCalendar := slices.ContainsFunc(ps, func(p Policy) bool { return p.Calendar != (Calendar{}) })
				if err := l.SetTier(name, ps); !l.scale.holds(longestOf(ps)) {
					require.ErrorIs(t, err, ErrConfig, "%s: SetTier(%q, %v): longer than the ticks hold", at, name, ps)
				} else if hasCalendar && !l.keys.counts {
					require.ErrorIs(t, err, ErrConfig, "%s: SetTier(%q, %v): a calendar, on a limiter made without one", at, name, ps)
				} else {
					require.NoError(t, err, "%s: SetTier(%q, %v)", at, name, ps)
					m.tiers[name] = ps
					changed = true
				}
			}
			require.Equal(t, len(m.keys), l.Len(), "step %d: tracked keys", i)
			for _, key := range keys {
				_, kept := m.keys[key]
				require.Equal(t, kept, l.keys.load(key) != nil, "%s: is %q tracked", at, key)
			}
			checkLogs(t, l)
		}
		switch {
		case changed:
		case algorithm == SlidingLog:
			m.checkExact(t)
		case algorithm == GCRA:
			m.checkGCRA(t)
		}
		if !changed {
			m.checkCalendars(t)
		}
	})
}

// checkLogs checks what every log of l holds against its own invariants:
// an entry count within its ring, a cached oldest tick equal to the oldest
// entry's, entries from the oldest to the newest, one per tick in a wide
// log, each of a weight of at least 1.
func checkLogs(t require.TestingT, l *Limiter) {
	l.keys.m.Range(func(key string, g *eventLog) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		if l.algorithm != SlidingLog {
			return true
		}
		require.LessOrEqual(t, g.n, g.size, "%q: entries held", key)
		if g.state&cached != 0 {
			require.True(t, g.n > 0 && !g.wide && g.ring != &g.inline[0], "%q: a cache where none is kept", key)
			require.Equal(t, *g.slot(0, 0), g.inline[0], "%q: the cached oldest tick", key)
		}
		r := l.scale.ceil(g.last) + 1 // no entry is past the newest instant's tick
		for i := range g.n {
			if g.wide {
				require.Positive(t, g.weight(i), "%q: entry %d's weight", key, i)
			}
			if i > 0 && g.wide {
				require.Greater(t, g.age(i-1, r), g.age(i, r), "%q: entries %d and %d out of order, or of one tick", key, i-1, i)
			} else if i > 0 {
				require.GreaterOrEqual(t, g.age(i-1, r), g.age(i, r), "%q: entries %d and %d out of order", key, i-1, i)
			}
		}
		return true
	})
}

// checkGCRA asserts what GCRA promises, refunds included: over any span
// [a, b] of instants that decisions of a key were made at, what they
// admitted and kept (less what their refunds gave back) is at most a full
// bucket and what refilled in between: limit*T + (b-a) in nanoseconds of
// refill, T each token's. Like checkExact, it holds only for keys decided
// under one tier whose policies never changed.
func (m *model) checkGCRA(t require.TestingT) {
	for key, h := range m.history {
		if len(m.used[key]) > 1 {
			continue
		}
		name := ""
		for n := range m.used[key] {
			name = n
		}
		for i, p := range m.tiers[name] {
			every := m.every(p)
			for a := range h {
				held := int64(0)
				for b := a; b < len(h); b++ {
					held += int64(h[b].w)*every - h[b].back[i]
					require.LessOrEqual(t, held, int64(p.Limit)*every+h[b].at-h[a].at,
						"key %q, policy %+v: the decisions from %v to %v hold more than a bucket and its refill",
						key, p, time.Duration(h[a].at), time.Duration(h[b].at))
				}
			}
		}
	}
}

// tiersBut returns tiers without the one called name.
func tiersBut(tiers map[string][]Policy, name string) map[string][]Policy {
	out := map[string][]Policy{}
	for k, v := range tiers {
		if k != name {
			out[k] = v
		}
	}
	return out
}

// takeAll mirrors TakeAll(hits) at now: each distinct key is decided at its
// summed weight without recording; when every one has room, each is
// recorded at the instant it was decided at; otherwise a key with room is
// described as it stands. It returns each hit's Decision, whether the
// request was admitted, and each recorded key's event id.
func (m *model) takeAll(hits []Hit, now int64) ([]Decision, bool, map[string]int) {
	weight := map[string]int{}
	var order []string
	for _, h := range hits {
		w, seen := weight[h.Key]
		if !seen {
			order = append(order, h.Key)
		}
		weight[h.Key] = addWeights(w, h.Weight)
		if seen && w < 0 {
			weight[h.Key] = -1
		}
	}
	ds := map[string]Decision{}
	allowed := true
	for _, key := range order {
		_, policies := m.tierOf(key)
		w := weight[key]
		_, tracked := m.keys[key]
		if !tracked && w >= 1 && w <= minLimitOf(policies) {
			m.gens++
			name, _ := m.tierOf(key)
			m.keys[key] = &modelKey{gen: m.gens, last: max(m.floor, now), tier: name}
			tracked = true
		}
		if tracked {
			ds[key], _ = m.decide(key, w, now, false)
		} else {
			ds[key] = m.untracked(key, w, now)
		}
		allowed = allowed && ds[key].Allowed
	}
	ids := map[string]int{}
	for _, key := range order {
		k, tracked := m.keys[key]
		if !tracked || !allowed && !ds[key].Allowed {
			continue
		}
		w := weight[key]
		if !allowed {
			w = 0
		}
		ds[key], ids[key] = m.decide(key, w, k.last, allowed)
	}
	out := make([]Decision, len(hits))
	for j, h := range hits {
		out[j] = ds[h.Key]
	}
	return out, allowed, ids
}

func TestConcurrentExactness(t *testing.T) {
	const (
		limit      = 7
		goroutines = 16
		callsEach  = 20
		phases     = 12
	)
	window := 10 * time.Second
	stride := 4 * time.Second // several phases share each window
	l, c := newManual(t, limit, window)
	keys := []string{"k0", "k1", "k2"}
	admittedAt := map[string][]time.Duration{} // phase instants, one entry per admitted event

	for p := range phases {
		var counts [3]atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var sweeper sync.WaitGroup
		sweeper.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					l.sweep(l.now())
				}
			}
		})
		for g := range goroutines {
			wg.Go(func() {
				for i := range callsEach {
					k := (g + i) % len(keys)
					if l.Allow(keys[k]) {
						counts[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sweeper.Wait()

		at := time.Duration(p) * stride
		for k, key := range keys {
			inWindow := 0
			for _, a := range admittedAt[key] {
				if a > at-window {
					inWindow++
				}
			}
			got := int(counts[k].Load())
			require.Equal(t, limit-inWindow, got, "phase %d key %s: admitted count", p, key)
			for range got {
				admittedAt[key] = append(admittedAt[key], at)
			}
		}
		c.Advance(stride)
	}
	m := newModel([]Policy{{Limit: limit, Window: window}})
	for key, ats := range admittedAt {
		for _, a := range ats {
			m.history[key] = append(m.history[key], modelEvent{at: int64(a), w: 1})
		}
	}
	m.checkExact(t)
	require.Greater(t, len(admittedAt["k0"]), limit, "the run spans several windows")
}

// TestConcurrentMovingClock lets the clock move while calls are in flight.
// Each admitted call is bracketed by clock readings taken before and after
// it; the limiter reads the clock inside the call, so the event's instant
// lies in that bracket. Events whose whole bracket falls inside one window
// certainly happened in it, so they may number at most limit. A fixed or
// approximate window fails this check at its boundaries.
func TestConcurrentMovingClock(t *testing.T) {
	const limit = 5
	window := 50 * time.Millisecond
	l, c := newManual(t, limit, window)
	type bracket struct{ from, to time.Duration }
	var mu sync.Mutex
	admitted := map[string][]bracket{}

	// The callers move the clock themselves, a millisecond every tenth call,
	// so it crosses many windows while calls are in flight however the
	// scheduler runs them (a separate ticker goroutine could be starved
	// until the calls were done).
	var calls sync.WaitGroup
	for g := range 8 {
		calls.Go(func() {
			for i := range 3000 {
				if i%10 == 0 {
					c.Advance(time.Millisecond)
				}
				key := fmt.Sprint("k", (g+i)%2)
				from := c.Now().Sub(t0)
				ok := l.Allow(key)
				to := c.Now().Sub(t0)
				if ok {
					mu.Lock()
					admitted[key] = append(admitted[key], bracket{from, to})
					mu.Unlock()
				}
			}
		})
	}
	calls.Wait()

	elapsed := c.Now().Sub(t0)
	require.Greater(t, elapsed, 4*window, "the clock moved across several windows")
	for key, bs := range admitted {
		require.Greater(t, len(bs), limit, "key %s admitted across windows", key)
		for _, start := range bs {
			s := start.from - 1 // the window (s, s+window]
			in := 0
			for _, b := range bs {
				if b.from > s && b.to <= s+window {
					in++
				}
			}
			require.LessOrEqual(t, in, limit, "key %s: %d events surely inside (%v, %v]", key, in, s, s+window)
		}
	}
}

// TestDecisionInstantsInsideTheirCalls reads each decision's instant back
// from its Decision and checks that it lies between clock readings taken
// just before and just after the call, and that one key's instants never run
// backwards in the order its decisions were made. The limiter reads the
// clock before taking the key's lock, so a caller can read it early and lock
// late; deciding at the later of its reading and the key's newest instant
// must keep both properties while the clock moves under the calls.
func TestDecisionInstantsInsideTheirCalls(t *testing.T) {
	const goroutines, callsEach = 8, 2000
	window := time.Hour
	l, c := newManual(t, goroutines*callsEach+1, window)
	// The event at 00:00 stays the oldest, so every later admission's
	// RefillAfter is window minus its instant.
	require.True(t, l.Allow("k"))

	type call struct {
		from, at, to time.Duration
		remaining    int
	}
	results := make([][]call, goroutines)
	// The callers move the clock themselves, between their calls, so that it
	// moves while other calls are in flight however they are scheduled.
	var calls sync.WaitGroup
	for g := range goroutines {
		calls.Go(func() {
			for i := range callsEach {
				if i%4 == 0 {
					c.Advance(time.Microsecond)
				}
				from := c.Now().Sub(t0)
				d := l.Take("k", 1)
				to := c.Now().Sub(t0)
				if !d.Allowed {
					t.Errorf("refused with room left: %+v", d)
					return
				}
				results[g] = append(results[g], call{from, window - d.RefillAfter, to, d.Remaining})
			}
		})
	}
	calls.Wait()

	all := slices.Concat(results...)
	require.Len(t, all, goroutines*callsEach)
	for _, r := range all {
		require.True(t, r.from <= r.at && r.at <= r.to,
			"decided at %v, outside its call [%v, %v]", r.at, r.from, r.to)
	}
	// Remaining counts down one per admission: it orders the decisions.
	slices.SortFunc(all, func(a, b call) int { return b.remaining - a.remaining })
	for i := 1; i < len(all); i++ {
		require.Equal(t, all[i-1].remaining-1, all[i].remaining, "one admission per Remaining")
		require.LessOrEqual(t, all[i-1].at, all[i].at, "decision %d is before the one made just before it", i)
	}
	require.Greater(t, all[len(all)-1].at, all[0].at, "the clock moved during the calls")
}

// interleavingClock is a ManualClock that, on the reading after between is
// set, runs between after taking the reading and before handing it back: it
// lets another caller decide between a call's clock read and its lock.
type interleavingClock struct {
	*ManualClock
	between func()
}

func (c *interleavingClock) Now() time.Time {
	now := c.ManualClock.Now()
	if f := c.between; f != nil {
		c.between = nil
		f()
	}
	return now
}

// TestClockReadBeforeLockIsClamped pins the interleaving the concurrent test
// above can only hope for: a call reads the clock at 00:05, another call
// reads 00:08 and decides, and only then does the first take the key's lock.
// It must decide at 00:08, the newest instant the key has seen and one its
// own call spans, not at 00:05, before a decision made ahead of it.
func TestClockReadBeforeLockIsClamped(t *testing.T) {
	const s = time.Second
	c := &interleavingClock{ManualClock: NewManualClock(t0)}
	l, err := New(3, 10*s, WithClock(c), WithJanitorInterval(0))
	require.NoError(t, err)
	defer l.Close()
	c.Set(t0.Add(5 * s))
	c.between = func() {
		c.Set(t0.Add(8 * s))
		require.Equal(t, single(10*s, allow(3, 2, 10*s, 10*s)), noReceipt(l.Take("k", 1)), "the other call, at 00:08")
	}
	assert.Equal(t, single(10*s, allow(3, 1, 10*s, 10*s)), noReceipt(l.Take("k", 1)), "decided at 00:08: both events leave at 00:18")
	c.Set(t0.Add(17 * s))
	assert.Equal(t, single(10*s, allow(3, 0, 1*s, 10*s)), l.Peek("k"))
}

// drawWindows draws 1 to 3 policies with small limits and windows of any
// length from a millisecond to two days, to the nanosecond.
func drawWindows(t *rapid.T) []Policy {
	policies := make([]Policy, rapid.IntRange(1, 3).Draw(t, "policies"))
	for i := range policies {
		policies[i] = Policy{
			Name:   fmt.Sprint("p", i),
			Limit:  rapid.IntRange(1, 8).Draw(t, "limit"),
			Window: time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(48*time.Hour)).Draw(t, "window")),
		}
	}
	return policies
}

// TestModelOnTicks is TestModel for windows
// of any length, whose logs count in ticks of up to 50µs: at instants that
// are whole ticks, an exact log decides exactly as the naive model does.
func TestModelOnTicks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policies := drawWindows(t)
		c := NewManualClock(t0)
		l, err := NewPolicies(policies, WithClock(c), WithJanitorInterval(0))
		require.NoError(t, err)
		defer l.Close()
		m := newModel(policies)
		tick := time.Duration(l.scale.unit)
		longest := time.Duration(longestOf(policies))

		for i := range rapid.IntRange(1, 200).Draw(t, "steps") {
			ticks := rapid.Int64Range(-2, int64(longest/tick)/4+2).Draw(t, "ticks")
			c.Advance(time.Duration(ticks) * tick)
			now := int64(c.Now().Sub(t0))
			n := rapid.IntRange(0, 4).Draw(t, "n")
			if rapid.Bool().Draw(t, "peek") {
				want, _ := m.decide("k", 1, now, false)
				require.Equal(t, want, l.Peek("k"), "step %d: Peek at %v", i, time.Duration(now))
				continue
			}
			want, _ := m.decide("k", n, now, true)
			require.Equal(t, want, noReceipt(l.Take("k", n)), "step %d: Take(%d) at %v", i, n, time.Duration(now))
		}
		m.checkExact(t)
	})
}

// TestNeverOverLimit drives a limiter with windows of any length, instants
// to the nanosecond (some moving backwards) and, half the time, a
// resolution d, and checks against the real instants of the calls that no
// window of any policy ever holds more than its limit, and that a refusal
// is never more than d early (without a resolution, one tick of the exact
// log): an exact log whose windows were d longer would refuse it too.
func TestNeverOverLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policies := drawWindows(t)
		shortest, longest := policies[0].Window, policies[0].Window
		for _, p := range policies {
			shortest, longest = min(shortest, p.Window), max(longest, p.Window)
		}
		// Ticks of the longest window, or coarser ones for room to grow.
		opts := []Option{WithJanitorInterval(0), WithMaxWindow(rapid.SampledFrom([]time.Duration{0, 30 * time.Hour}).Draw(t, "max window"))}
		d := time.Duration(0)
		if rapid.Bool().Draw(t, "resolution") {
			least := longest/maxTicks + 1
			d = time.Duration(rapid.Int64Range(int64(least), int64(max(shortest, least))).Draw(t, "d"))
			opts = append(opts, WithResolution(d))
		}
		c := NewManualClock(t0)
		l, err := NewPolicies(policies, append(opts, WithClock(c))...)
		if d > shortest {
			require.ErrorIs(t, err, ErrConfig)
			return
		}
		require.NoError(t, err)
		defer l.Close()
		d = time.Duration(l.scale.unit) // the exact log's tick, or the resolution

		var events []modelEvent // real instants of every admitted event
		last := int64(0)        // the newest instant the key was decided at
		minLimit := slices.MinFunc(policies, func(a, b Policy) int { return a.Limit - b.Limit }).Limit
		for i := range rapid.IntRange(1, 300).Draw(t, "steps") {
			c.Advance(time.Duration(rapid.Int64Range(-int64(shortest)/4, int64(shortest)).Draw(t, "step")))
			n := rapid.IntRange(1, 3).Draw(t, "n")
			now := max(int64(c.Now().Sub(t0)), last)
			if l.Len() > 0 || n <= minLimit { // the key is, or is about to be, tracked
				last = now
			}
			got := l.Take("k", n)
			if got.Allowed {
				events = append(events, modelEvent{at: now, w: n})
				for _, p := range policies {
					in := weightIn(events, now, int64(p.Window))
					require.LessOrEqual(t, in, p.Limit, "step %d: policy %v holds %d", i, p, in)
				}
				continue
			}
			early := true
			for _, p := range policies {
				early = early && weightIn(events, now, int64(p.Window+d))+n <= p.Limit
			}
			require.False(t, early, "step %d: refused %d at %v; an exact log of windows %v longer has room", i, n, time.Duration(now), d)
		}
	})
}
