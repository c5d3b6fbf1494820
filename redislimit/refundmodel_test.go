package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"pgregory.net/rapid"
)

// TestModelRefund drives the sliding log in Redis with random takes,
// refunds (of admitted, refused, refunded and other keys' decisions, and
// of decisions made before the key's state was lost) and losses of a
// key's state (a DEL), on one to three policies, with a manual clock that
// moves forward or stands still. It checks that
//
//   - every refund succeeds exactly when the model says the key still
//     holds the decision's events: the decision was admitted on that key,
//     in the key's current state, not refunded, and the entry of its
//     instant is still in the longest window with at least its weight;
//   - no window of any policy ever holds more than its limit of the events
//     that were not refunded, at the instants they were recorded at;
//   - without a resolution, every decision and every refund's outcome
//     equals the in-process keyrate.Limiter's, given the same calls (its
//     refunds are the reference implementation of the same semantics).
func TestModelRefund(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	rapid.Check(t, func(t *rapid.T) {
		policies := make([]keyrate.Policy, rapid.IntRange(1, 3).Draw(t, "policies"))
		shortest, longest := time.Duration(0), time.Duration(0)
		for i := range policies {
			w := rapid.SampledFrom([]time.Duration{10 * time.Second, 20 * time.Second, time.Minute}).Draw(t, "window")
			policies[i] = keyrate.Policy{Name: fmt.Sprint("p", i), Limit: rapid.SampledFrom([]int{1, 2, 3, 5, 8}).Draw(t, "limit"), Window: w}
			if shortest == 0 || w < shortest {
				shortest = w
			}
			longest = max(longest, w)
		}
		if len(policies) == 1 {
			policies[0].Name = ""
		}
		clock := keyrate.NewManualClock(start)
		opts := []redislimit.Option{redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock)}
		exact := rapid.Bool().Draw(t, "exact")
		if !exact {
			res := shortest / time.Duration(rapid.IntRange(1, 8).Draw(t, "resolution"))
			opts = append(opts, redislimit.WithResolution(res.Truncate(time.Millisecond)))
		}
		l, err := redislimit.NewPolicies(client, policies, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var core *keyrate.Limiter
		if exact {
			core, err = keyrate.NewPolicies(policies, keyrate.WithClock(clock), keyrate.WithJanitorInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			defer core.Close()
		}

		// What each key holds in its current state: the weight not
		// refunded, by the instant it was recorded at (µs).
		type state struct {
			held map[int64]int
			last int64  // the newest admission's instant, µs
			gen  uint64 // its generation, once an admission named it
			life int    // how many times the key's state was lost
		}
		keys := map[string]*state{"a": {held: map[int64]int{}}, "b": {held: map[int64]int{}}}
		type taken struct {
			key      string
			d, c     keyrate.Decision // Redis's, and the in-process limiter's
			n        int
			life     int
			refunded bool
		}
		var decisions []*taken
		now := func(k *state) int64 { return max(clock.Now().UnixMicro(), k.last) }

		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			if rapid.IntRange(0, 2).Draw(t, "move") > 0 {
				clock.Advance(time.Duration(rapid.IntRange(0, 8).Draw(t, "by")) * 250 * time.Millisecond)
			}
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")
			k := keys[key]
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 6:
				n := rapid.IntRange(0, 3).Draw(t, "n")
				d, err := l.TakeContext(ctx, key, n)
				if err != nil {
					t.Fatal(err)
				}
				tk := &taken{key: key, d: d, n: n, life: k.life}
				if has := d.Receipt.N() > 0; has != (d.Allowed && n > 0) || has && d.Receipt.N() != n {
					t.Fatalf("step %d: Take(%q, %d) = %+v: a receipt of n events for an admission, none otherwise", step, key, n, d)
				}
				if exact {
					tk.c = core.Take(key, n)
					got, want := d, tk.c
					got.Receipt, want.Receipt = keyrate.Receipt{}, keyrate.Receipt{}
					if got != want {
						t.Fatalf("step %d: Take(%q, %d)\n got %+v\nwant %+v (in process)", step, key, n, got, want)
					}
				}
				if d.Receipt.N() > 0 {
					k.held[redislimit.ReceiptRecorded(d.Receipt)] += n
					k.last = max(k.last, backend.ReceiptAt(d.Receipt).UnixMicro())
					k.gen = redislimit.ReceiptGen(d.Receipt)
				}
				decisions = append(decisions, tk)
			case op < 9 && len(decisions) > 0:
				tk := rapid.SampledFrom(decisions).Draw(t, "decision")
				r := tk.d.Receipt
				mine := key == tk.key && tk.life == k.life && r.N() > 0
				if !mine && r.N() > 0 && redislimit.ReceiptGen(r) == k.gen {
					// Another state of the same generation: the 1 in
					// 65,536 that Refund's doc allows for.
					continue
				}
				at := redislimit.ReceiptRecorded(r)
				ok := mine && k.held[at] >= r.N() && at > now(k)-longest.Microseconds()
				err := l.Refund(ctx, key, &tk.d)
				if !ok {
					if !errors.Is(err, keyrate.ErrNothingToRefund) {
						t.Fatalf("step %d: refund on %q of %+v (life %d, the key's %d): %v, want ErrNothingToRefund", step, key, tk, tk.life, k.life, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: refund on %q of %+v: %v", step, key, tk, err)
				}
				tk.refunded = true
				k.held[at] -= r.N()
				if exact {
					if err := core.Refund(context.Background(), key, &tk.c); err != nil {
						t.Fatalf("step %d: the in-process limiter refused the refund Redis made: %v", step, err)
					}
				}
			default:
				client.Del(ctx, l.StoreKey(key))
				keys[key] = &state{held: map[int64]int{}, life: k.life + 1}
				if exact {
					core.Reset(key)
				}
			}
			// The clock is a manual one: keep Redis from expiring what the
			// model still counts, in real time.
			client.Persist(ctx, l.StoreKey(key))
			for name, k := range keys {
				for _, p := range policies {
					for end := range k.held {
						sum := 0
						for at, n := range k.held {
							if at > end-p.Window.Microseconds() && at <= end {
								sum += n
							}
						}
						if sum > p.Limit {
							t.Fatalf("step %d: key %q holds %d events not refunded in the window of %v ending at +%dµs, over policy %q's limit of %d",
								step, name, sum, p.Window, end-start.UnixMicro(), p.Name, p.Limit)
						}
					}
				}
			}
		}
	})
}
