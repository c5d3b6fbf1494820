package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"pgregory.net/rapid"
)

// TestModelCore drives a redislimit.Limiter and the in-process
// keyrate.Limiter with the same calls and compares them decision by
// decision: every number of every Decision (receipts aside, each the
// backend's own), and every refund's outcome. The calls are Take and
// TakeAll at weights from 0 to 2^31-1 (and -1), Refund and RefundN of
// fresh, old, expired, already refunded, other keys' and stale decisions
// (of a key lost since: Redis's key deleted, the core's Reset), SetTier and
// keys moving between tiers, under each of the three algorithms, with a
// clock that moves forward and steps back, at whole milliseconds (which
// both count exactly); concurrent batches of Takes too, on distinct keys
// (each decided alone, so both must agree).
//
// Where the two are specified to differ, the key's comparison stops and
// the calls go on (Redis's own models check those paths: model_test.go,
// gcramodel_test.go, refundmodel_test.go):
//
//   - under FixedWindow and GCRA a key whose tier changes: Redis keeps a
//     count per window length and a bucket per refill interval, the core
//     a counter per policy's place;
//   - a decision stepped back below an instant the core's refund settled
//     the key at: a refund in Redis does not move the key's newest
//     instant;
//   - a sliding log moving to a tier with a longer window after a refund:
//     the core's refund also prunes, at the longest window of the tier
//     that last decided the key;
//   - with calendar policies, once the core counts them itself: a key
//     whose tier changes so that a place's calendar differs (Redis keeps
//     a count per calendar, the core per place), and a refund of a
//     decision whose policies are no longer the key's tier's (Redis gives
//     back to the decision's own calendars, the core to a place whose
//     policy is still the decision's);
//   - under GCRA a refund of a decision when a refund of its key came
//     since: Redis counts the decision's tokens as moved forward by it
//     (the key's refund ledger), the core does not, and would give back
//     tokens the bucket has refilled; such a refund is not made.
//
// Under the sliding log, half the cases give the tiers calendar policies
// too (a daily, a weekly and a monthly one, in three zones) and move the
// clock to a few milliseconds either side of a period's turn, or months
// on. While the core has no calendars of its own, such a case compares
// with calendarRef: the core for the sliding policies, and a model of the
// calendars' counters (calendarmodel_test.go); once it has, with the core
// alone.
//
// The normal run is rapid's 100 cases; a long one takes -rapid.checks=N.
func TestModelCore(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	// What the run compared, to say how much of it the differences above
	// left out.
	var decided, compared, refunds, refundsCompared, givenBack [3]int
	windows := []time.Duration{time.Second, 10 * time.Second, time.Minute, 20 * time.Minute}
	limits := []int{1, 2, 4, 5, 10, 1000, math.MaxInt32}
	ny, tokyo := zone(t, "America/New_York"), zone(t, "Asia/Tokyo")
	calendars := []keyrate.Calendar{keyrate.Daily(time.UTC), keyrate.Weekly(time.Monday, ny), keyrate.Monthly(31, tokyo)}
	coreCals := coreCountsCalendars()
	var calCases, calCompared, calRefused int
	rapid.Check(t, func(t *rapid.T) {
		alg := rapid.SampledFrom([]keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA}).Draw(t, "algorithm")
		// Calendar policies, beside the sliding ones, under the sliding
		// log (the others refuse them).
		cals := alg == keyrate.SlidingLog && rapid.Bool().Draw(t, "calendars")
		if cals {
			calCases++
		}
		drawPolicies := func(label string) []keyrate.Policy {
			ps := make([]keyrate.Policy, rapid.IntRange(1, 3).Draw(t, label))
			for i := range ps {
				ls := limits
				if alg == keyrate.GCRA {
					ls = limits[:6] // a refill interval of whole milliseconds
				}
				ps[i] = keyrate.Policy{Name: fmt.Sprint("p", i), Limit: rapid.SampledFrom(ls).Draw(t, "limit"), Window: rapid.SampledFrom(windows).Draw(t, "window")}
			}
			// The default tier always has one: the core keeps room for the
			// counts only in a limiter made with a calendar policy.
			if cals && (label == "default" || rapid.Bool().Draw(t, "calendar")) {
				ps = append(ps, keyrate.Policy{Name: "cal", Limit: rapid.SampledFrom(limits).Draw(t, "limit"),
					Calendar: rapid.SampledFrom(calendars).Draw(t, "period")})
			}
			if len(ps) == 1 {
				ps[0].Name = ""
			}
			return ps
		}
		// sameCounters reports whether Redis and the core read the same
		// counters for a key moving from policies a to b: Redis keeps one
		// per window length (FixedWindow) or refill interval (GCRA), the
		// core one per place.
		sameCounters := func(a, b []keyrate.Policy) bool {
			if len(a) != len(b) {
				return false
			}
			for i := range a {
				if a[i].Window != b[i].Window || alg == keyrate.GCRA && a[i].Window/time.Duration(a[i].Limit) != b[i].Window/time.Duration(b[i].Limit) {
					return false
				}
			}
			return true
		}
		// sameCalendars reports whether Redis and the core read the same
		// calendar counts for a key moving from policies a to b: Redis
		// keeps one per calendar, the core one per place (a place whose
		// calendar changed keeps its count while the new period began
		// before the counted one ended). Only the core's own calendars
		// differ so: calendarRef counts as Redis does.
		sameCalendars := func(a, b []keyrate.Policy) bool {
			if !coreCals {
				return true
			}
			for i := range max(len(a), len(b)) {
				var ca, cb keyrate.Calendar
				if i < len(a) {
					ca = a[i].Calendar
				}
				if i < len(b) {
					cb = b[i].Calendar
				}
				if ca != cb {
					return false
				}
			}
			return true
		}
		longestOf := func(ps []keyrate.Policy) time.Duration {
			var w time.Duration
			for _, p := range ps {
				w = max(w, p.Window)
			}
			return w
		}
		tiers := map[string][]keyrate.Policy{"pro": drawPolicies("pro")}
		def := drawPolicies("default")
		current := map[string][]keyrate.Policy{"": def, "pro": tiers["pro"]}
		var mu sync.Mutex
		assigned := map[string]string{}
		tierOf := func(key string) string {
			mu.Lock()
			defer mu.Unlock()
			return assigned[key]
		}
		clock := keyrate.NewManualClock(start)
		coreOpts := []keyrate.Option{keyrate.WithAlgorithm(alg), keyrate.WithClock(clock),
			keyrate.WithJanitorInterval(0), keyrate.WithMaxWindow(20 * time.Minute)}
		var core reference
		var err error
		if cals && !coreCals {
			// The core on this branch has no calendars: its sliding
			// policies beside a model of the calendars' counters.
			core, err = newCalendarRef(def, tiers, tierOf, clock, coreOpts...)
		} else {
			core, err = keyrate.NewPolicies(def, append(coreOpts, keyrate.WithTiers(tierOf, tiers))...)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer core.Close()
		l, err := redislimit.NewPolicies(client, def, redislimit.WithAlgorithm(alg), redislimit.WithClock(clock),
			redislimit.WithTiers(tierOf, tiers), redislimit.WithPrefix(uniquePrefix()), redislimit.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}

		keys := []string{"a", "b", "c"}
		type keyState struct {
			life      int           // losses of the key so far
			synced    bool          // its decisions are still compared
			decidedAt int64         // the newest instant the key was decided at (µs), both backends
			settledAt int64         // the newest instant a core refund settled it at
			lastTier  string        // the tier that last decided it
			pruned    time.Duration // the shortest longest window a refund since pruned it at
			refunded  bool          // a refund of the key since its last decision
			retiered  bool          // its tier, or that tier's policies, changed since its last decision
			ledger    int           // GCRA: refunds of the key so far
			gen       uint64        // the generation of its state in Redis, once an admission named it
			exists    bool          // Redis holds state for it: an admission came in this life
		}
		state := map[string]*keyState{}
		for _, k := range keys {
			state[k] = &keyState{synced: true}
		}
		type taken struct {
			key    string
			life   int
			ledger int  // the key's refunds when it was decided
			synced bool // made while its key was compared
			d, c   keyrate.Decision
		}
		var decisions []*taken
		now := func() int64 { return clock.Now().UnixMicro() }
		desync := func(k string) { state[k].synced = false }
		before := func(k string) {
			s := state[k]
			tr := current[tierOf(k)]
			if s.settledAt > s.decidedAt && now() < s.settledAt {
				desync(k)
			}
			if alg == keyrate.SlidingLog && s.refunded && longestOf(tr) > s.pruned {
				desync(k)
			}
		}
		after := func(k string, d keyrate.Decision) {
			s := state[k]
			if d.Receipt.N() > 0 {
				s.gen, s.exists = redislimit.ReceiptGen(d.Receipt), true
			}
			if s.exists {
				s.decidedAt = max(s.decidedAt, now())
			} else {
				// Redis writes nothing for a key with no state; the core
				// may hold a log for it (TakeAll's new keys in a refused
				// request) decided at now.
				s.settledAt = max(s.settledAt, now())
			}
			s.lastTier = tierOf(k)
			s.refunded, s.retiered = false, false
		}
		compare := func(step int, what string, k string, got, want keyrate.Decision) {
			decided[alg]++
			if !state[k].synced {
				return
			}
			compared[alg]++
			if cals {
				calCompared++
				if !want.Allowed && want.Policy == "cal" {
					calRefused++
				}
			}
			got.Receipt, want.Receipt = keyrate.Receipt{}, keyrate.Receipt{}
			if !sameDecision(got, want) {
				t.Fatalf("step %d: %s at +%v (%v)\n got %+v %+v\nwant %+v %+v (in process)", step, what, clock.Now().Sub(start), alg,
					got, got.Policies(), want, want.Policies())
			}
		}
		weight := func(label string) int {
			return rapid.SampledFrom([]int{0, 1, 1, 1, 2, 3, 5, 999, 1000, math.MaxInt32, -1}).Draw(t, label)
		}

		for step := range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 19).Draw(t, "op"); {
			case op < 3: // the clock
				if cals && rapid.IntRange(0, 2).Draw(t, "turn") == 0 {
					// To a few milliseconds either side of a period's turn,
					// or months on, across years.
					c := rapid.SampledFrom(calendars).Draw(t, "turning")
					_, end := backend.Period(c, clock.Now())
					if rapid.Bool().Draw(t, "far") {
						end, _ = backend.Period(c, end.AddDate(0, rapid.IntRange(0, 14).Draw(t, "months"), 0))
					}
					clock.Set(end.Add(time.Duration(rapid.IntRange(-3, 3).Draw(t, "ms")) * time.Millisecond))
				} else if rapid.IntRange(0, 4).Draw(t, "back") == 0 {
					// Back, but never before the core was made: it counts
					// from that instant.
					back := time.Duration(rapid.IntRange(0, 90_000).Draw(t, "by")) * time.Millisecond
					if at := clock.Now().Add(-back); at.After(start) {
						clock.Set(at)
					} else {
						clock.Set(start)
					}
				} else {
					ms := rapid.IntRange(0, 1_300_000).Draw(t, "by") / rapid.IntRange(1, 50).Draw(t, "div")
					clock.Advance(time.Duration(ms) * time.Millisecond) // whole milliseconds, which both count exactly
				}
			case op < 9: // Take
				k := rapid.SampledFrom(keys).Draw(t, "key")
				n := weight("n")
				before(k)
				c := core.Take(k, n)
				d, err := l.TakeContext(ctx, k, n)
				if err != nil {
					t.Fatal(err)
				}
				compare(step, fmt.Sprintf("Take(%q, %d)", k, n), k, d, c)
				after(k, d)
				if d.Receipt.N() > 0 || c.Receipt.N() > 0 {
					decisions = append(decisions, &taken{key: k, life: state[k].life, ledger: state[k].ledger, synced: state[k].synced, d: d, c: c})
				}
			case op < 11: // TakeAll over distinct keys
				ks := slices.Clone(keys)
				hits := make([]keyrate.Hit, rapid.IntRange(2, 3).Draw(t, "hits"))
				for i := range hits {
					hits[i] = keyrate.Hit{Key: ks[i], Weight: weight("n")}
					before(ks[i])
				}
				cs, cok, _ := core.TakeAll(context.Background(), hits)
				ds, ok, err := l.TakeAll(ctx, hits)
				if err != nil {
					t.Fatal(err)
				}
				all := true
				for _, h := range hits {
					all = all && state[h.Key].synced
				}
				if all && ok != cok {
					t.Fatalf("step %d: TakeAll(%v) admitted %v, in process %v", step, hits, ok, cok)
				}
				if !all {
					// A key that differs can make the request's outcome
					// differ, and with it every key's.
					for _, h := range hits {
						desync(h.Key)
					}
				}
				for i, h := range hits {
					compare(step, fmt.Sprintf("TakeAll(%v)[%d]", hits, i), h.Key, ds[i], cs[i])
					after(h.Key, ds[i])
					if ds[i].Receipt.N() > 0 || cs[i].Receipt.N() > 0 {
						decisions = append(decisions, &taken{key: h.Key, life: state[h.Key].life, ledger: state[h.Key].ledger, synced: state[h.Key].synced, d: ds[i], c: cs[i]})
					}
				}
			case op < 15 && len(decisions) > 0: // Refund, RefundN, of any decision, under any key
				tk := rapid.SampledFrom(decisions).Draw(t, "decision")
				k := tk.key
				if rapid.IntRange(0, 4).Draw(t, "other") == 0 {
					k = rapid.SampledFrom(keys).Draw(t, "under")
				}
				s := state[k]
				left := tk.d.Receipt.N()
				n := left
				if rapid.Bool().Draw(t, "part") {
					n = rapid.IntRange(-1, max(left, tk.c.Receipt.N())+1).Draw(t, "n")
				}
				own := k == tk.key && tk.life == s.life
				if own && s.settledAt > s.decidedAt && now() < s.settledAt {
					desync(k) // the core settled the key later, at a refund
				}
				if own && (s.retiered || tierOf(k) != s.lastTier) {
					// Redis checks the refund against the key's tier now,
					// the core against the tier that last decided it.
					desync(k)
				}
				if own && (alg != keyrate.SlidingLog || cals && coreCals) && !samePolicies(tk.c.Policies(), current[tierOf(k)]) {
					// Redis gives back to the decision's counts and
					// buckets (and calendars), the core to those of its
					// policies still in their places.
					desync(k)
				}
				if alg == keyrate.GCRA && own && s.ledger != tk.ledger {
					continue // see the doc: the two differ here by design
				}
				if !own && tk.d.Receipt.N() > 0 && redislimit.ReceiptGen(tk.d.Receipt) == s.gen {
					continue // another state of the same generation: Refund's 1 in 65,536
				}
				want := core.RefundN(context.Background(), k, &tk.c, n)
				got := l.RefundN(ctx, k, &tk.d, n)
				if own && !tk.synced {
					desync(k) // the backends hold different decisions for it
				}
				refunds[alg]++
				if s.synced && tk.synced {
					refundsCompared[alg]++
					if got == nil {
						givenBack[alg]++
					}
				}
				if refundClass(got) != refundClass(want) {
					if s.synced && tk.synced {
						t.Fatalf("step %d: RefundN(%q, decision of %q at %v, %d of %d) at +%v (%v): %v, in process %v",
							step, k, tk.key, backend.ReceiptAt(tk.d.Receipt).Sub(start), n, left, clock.Now().Sub(start), alg, got, want)
					}
					tk.synced = false // its receipts now differ
					desync(k)
				}
				if own {
					s.settledAt = max(s.settledAt, now())
					// The core's refund prunes at the longest window of
					// the tier that last decided the key, as it is now.
					if w := longestOf(current[s.lastTier]); !s.refunded || w < s.pruned {
						s.pruned = w
					}
					s.refunded = true
					if got == nil {
						s.ledger++
					}
				}
			case op < 17: // SetTier
				name := rapid.SampledFrom([]string{"", "pro"}).Draw(t, "tier")
				ps := drawPolicies("new")
				if rapid.Bool().Draw(t, "same windows") {
					// A plan's limits raised or lowered, its windows kept.
					ps = slices.Clone(current[name])
					for i := range ps {
						ps[i].Limit = rapid.SampledFrom(limits[:6]).Draw(t, "limit")
						if alg == keyrate.GCRA {
							ps[i].Limit = current[name][i].Limit // and its refill intervals
						}
					}
				}
				if err := core.SetTier(name, ps); err != nil {
					t.Fatal(err)
				}
				if err := l.SetTier(name, ps); err != nil {
					t.Fatal(err)
				}
				old := current[name]
				current[name] = ps
				for _, k := range keys {
					if tierOf(k) == name {
						state[k].retiered = true
						if alg != keyrate.SlidingLog && !sameCounters(old, ps) || !sameCalendars(old, ps) {
							desync(k)
						}
					}
				}
			case op < 19: // a key moves to the other tier
				k := rapid.SampledFrom(keys).Draw(t, "key")
				from := tierOf(k)
				mu.Lock()
				if assigned[k] == "" {
					assigned[k] = "pro"
				} else {
					assigned[k] = ""
				}
				mu.Unlock()
				state[k].retiered = true
				if alg != keyrate.SlidingLog && !sameCounters(current[from], current[tierOf(k)]) || !sameCalendars(current[from], current[tierOf(k)]) {
					desync(k)
				}
			default: // a key's state lost, in both
				k := rapid.SampledFrom(keys).Draw(t, "key")
				if err := client.Del(ctx, l.StoreKey(k)).Err(); err != nil {
					t.Fatal(err)
				}
				core.Reset(k)
				state[k] = &keyState{life: state[k].life + 1, synced: true}
			}
			for _, k := range keys {
				// The clock is a manual one: keep Redis from expiring, in
				// real time, what the core still holds.
				client.Persist(ctx, l.StoreKey(k))
			}
		}

		// Concurrent batches: callers on distinct keys, each decided as
		// one caller alone would be.
		var wg sync.WaitGroup
		type pair struct{ d, c keyrate.Decision }
		got := make([]pair, 12)
		for i := range got {
			wg.Go(func() {
				k := fmt.Sprint("batch", i)
				d, err := l.TakeContext(ctx, k, 1+i%3)
				if err != nil {
					t.Error(err)
				}
				got[i] = pair{d: d}
			})
		}
		wg.Wait()
		for i := range got {
			c := core.Take(fmt.Sprint("batch", i), 1+i%3)
			d := got[i].d
			d.Receipt, c.Receipt = keyrate.Receipt{}, keyrate.Receipt{}
			if !sameDecision(d, c) {
				t.Fatalf("batched caller %d:\n got %+v\nwant %+v", i, d, c)
			}
		}
	})
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Logf("%v: compared %d of %d decisions, %d of %d refunds (%d given back)", alg,
			compared[alg], decided[alg], refundsCompared[alg], refunds[alg], givenBack[alg])
	}
	t.Logf("%d cases with calendar policies, %d decisions compared, %d refused by a calendar; compared with %s", calCases, calCompared, calRefused, map[bool]string{true: "the core", false: "the core's sliding policies and a model of the calendars"}[coreCals])
}

// samePolicies reports whether a decision's policies are ps.
func samePolicies(parts []keyrate.PolicyDecision, ps []keyrate.Policy) bool {
	if len(parts) != len(ps) {
		return false
	}
	for i := range parts {
		if parts[i].Policy != ps[i] {
			return false
		}
	}
	return true
}

// refundClass names the outcome of a refund: given back, nothing to give
// back, or a weight out of range.
func refundClass(err error) string {
	switch {
	case err == nil:
		return "given back"
	case errors.Is(err, keyrate.ErrExceedsLimit):
		return "out of range"
	case errors.Is(err, keyrate.ErrNothingToRefund):
		return "nothing to refund"
	}
	return err.Error()
}
