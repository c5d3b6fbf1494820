package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestGCRABurstThenRate checks the token bucket: 10 per 10s is a burst of
// 10, then one a second, with the numbers of the core's keyrate.GCRA.
func TestGCRABurstThenRate(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	s := time.Second
	for i := range 10 {
		want := single(10, 10*s, keyrate.Decision{Allowed: true, Remaining: 9 - i, ResetAfter: time.Duration(i+1) * s, RefillAfter: s})
		if d := mustTake(t, l, "k", 1); d != want {
			t.Fatalf("burst call %d:\n got %+v\nwant %+v (full again after a second per token spent)", i, d, want)
		}
	}
	if d, want := mustTake(t, l, "k", 1), single(10, 10*s, keyrate.Decision{RetryAfter: s, ResetAfter: 10 * s, RefillAfter: s}); d != want {
		t.Fatalf("the eleventh:\n got %+v\nwant %+v", d, want)
	}
	for i := 1; i <= 5; i++ {
		clock.Advance(s)
		if !mustTake(t, l, "k", 1).Allowed {
			t.Fatalf("%ds: refused, want one a second", i)
		}
		if mustTake(t, l, "k", 1).Allowed {
			t.Fatalf("%ds: a second admitted in one second", i)
		}
	}
	clock.Advance(500 * time.Millisecond)
	if d := mustTake(t, l, "k", 1); d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("half a second on: %+v, want a refusal for 500ms", d)
	}
	if d := mustTake(t, l, "k", 11); d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("11 of a bucket of 10: %+v, want a refusal with RetryAfter 0 (it can never fit)", d)
	}
	clock.Advance(time.Hour)
	if d := mustTake(t, l, "k", 3); !d.Allowed || d.Remaining != 7 || d.ResetAfter != 3*s {
		t.Fatalf("refilled: %+v, want 3 admitted with 7 remaining", d)
	}
}

// TestGCRAMatchesCore plays random sequences of weights, refunds (whole
// and in part), clock moves and raises of the key's refund ledger (to
// near its renewal and its top) on one to three GCRA policies against
// Redis, the core's in-process keyrate.GCRA limiter and gcraModel, and
// compares every number of every Decision: with the model throughout,
// refunds' outcomes included, and with the core until a sequence's first
// refund (the model comparison with the core in limiter_model_test.go
// covers refunds the core and Redis give back alike). The policies'
// refill intervals are whole microseconds, which both count exactly.
func TestGCRAMatchesCore(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	windows := []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second, time.Minute}
	limits := []int{1, 2, 3, 4, 5, 6, 12, 1000}
	for seq := range 60 {
		rng := rand.New(rand.NewPCG(uint64(seq), 22))
		policies := make([]keyrate.Policy, 1+rng.IntN(3))
		for i := range policies {
			policies[i] = keyrate.Policy{Name: fmt.Sprint("p", i), Limit: limits[rng.IntN(len(limits))], Window: windows[rng.IntN(len(windows))]}
		}
		clock := keyrate.NewManualClock(start)
		l, err := redislimit.NewPolicies(client, policies, redislimit.WithPrefix(uniquePrefix()),
			redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		core, err := keyrate.NewPolicies(policies, keyrate.WithAlgorithm(keyrate.GCRA), keyrate.WithClock(clock), keyrate.WithJanitorInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		var model gcraModel
		type taken struct {
			d  keyrate.Decision
			tk *gcraTaken
		}
		var admitted []*taken
		synced := true // the core has seen no refund
		for step := range 80 {
			switch r := rng.IntN(10); {
			case r < 5:
				clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			case r < 6:
				clock.Advance(time.Duration(rng.IntN(30)) * time.Second)
			}
			now := clock.Now().UnixMicro()
			if model.gen > 0 && rng.IntN(20) == 0 {
				// The ledger raised to near where an admission at full
				// buckets renews the generation, or near its top, as
				// refunds raise it: never lowered.
				v := []int64{modelLedgerRenew - 1, modelLedgerRenew, modelLedgerTop - 1000, modelLedgerTop - 1, modelLedgerTop}[rng.IntN(5)]
				v = max(v, model.ledger)
				if err := client.HSet(ctx, l.StoreKey("k"), "r", v).Err(); err != nil {
					t.Fatal(err)
				}
				model.ledger = v
			}
			if len(admitted) > 0 && rng.IntN(4) == 0 {
				p := admitted[rng.IntN(len(admitted))]
				left := p.d.Receipt.N()
				n := left
				if left > 1 && rng.IntN(2) == 0 {
					n = 1 + rng.IntN(left)
				}
				got := l.RefundN(ctx, "k", &p.d, n)
				want := left > 0 && model.refund(now, p.tk, n)
				if (got == nil) != want || got != nil && !errors.Is(got, keyrate.ErrNothingToRefund) {
					t.Fatalf("sequence %d step %d, policies %v: RefundN(%d of %d) at +%v = %v, want success %v",
						seq, step, policies, n, left, clock.Now().Sub(start), got, want)
				}
				synced = false
				client.Persist(ctx, l.StoreKey("k"))
				continue
			}
			n := 1
			if rng.IntN(3) == 0 {
				n = rng.IntN(policies[0].Limit+3) - 1
			}
			c := core.Take("k", n)
			d := mustTakeReceipt(t, l, "k", n)
			m, tk := model.decide(now, n, policies)
			// The tests move a manual clock: keep Redis from expiring, in
			// real time, what the model still counts.
			client.Persist(ctx, l.StoreKey("k"))
			got := d
			got.Receipt, c.Receipt = keyrate.Receipt{}, keyrate.Receipt{}
			if got != m {
				t.Fatalf("sequence %d step %d, policies %v: Take(%d) at +%v\n got %+v\nwant %+v (the model)",
					seq, step, policies, n, clock.Now().Sub(start), got, m)
			}
			if synced && got != c {
				t.Fatalf("sequence %d step %d, policies %v: Take(%d) at +%v\n got %+v\nwant %+v (in process)",
					seq, step, policies, n, clock.Now().Sub(start), got, c)
			}
			if (d.Receipt.N() > 0) != (tk != nil) {
				t.Fatalf("sequence %d step %d: receipt %+v, the model admitted %v", seq, step, d.Receipt, tk != nil)
			}
			if tk != nil {
				admitted = append(admitted, &taken{d, tk})
			}
		}
		core.Close()
	}
}

// TestGCRAPolicies decides 2 per second, 5 per 10 seconds and 50 per
// minute together, over 10 seconds of 4 calls a second: the ten-second
// bucket binds, holding 5 and refilled one every 2 seconds, and the
// second's lets 2 a second through, so 6 are admitted in the first 2
// seconds and one at 4, 6 and 8 seconds: 9, the core's answer.
func TestGCRAPolicies(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newPolicies(t, client, []keyrate.Policy{{Name: "second", Limit: 2, Window: time.Second},
		{Name: "ten", Limit: 5, Window: 10 * time.Second}, {Name: "minute", Limit: 50, Window: time.Minute}},
		redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	admitted := 0
	for range 40 {
		if mustTake(t, l, "k", 1).Allowed {
			admitted++
		}
		clock.Advance(250 * time.Millisecond)
	}
	if admitted != 9 {
		t.Fatalf("admitted %d, want 9", admitted)
	}
	// At 10s the ten-second bucket has its next token, and no more.
	if d := mustTake(t, l, "k", 1); !d.Allowed || d.Policy != "ten" || d.Remaining != 0 {
		t.Fatalf("at 10s: %+v, want admitted, the ten-second policy binding with 0 remaining", d)
	}
	if d := mustTake(t, l, "k", 1); len(d.Policies()) != 3 || d.Allowed || d.Policy != "ten" || d.RetryAfter != 2*time.Second {
		t.Fatalf("then: %+v, want a refusal by the ten-second policy for 2s, with all three policies' numbers", d)
	}
}

// TestGCRADenyCache checks that the deny cache holds a GCRA refusal of
// weight 1 for exactly its RetryAfter, the time until the bucket holds a
// token again, and asks Redis then.
func TestGCRADenyCache(t *testing.T) {
	srv := redistest.Shared(t)
	clock := keyrate.NewManualClock(start)
	l, rt := countedLimiter(t, srv, uniquePrefix(), 2, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA),
		redislimit.WithDenyCache(10), redislimit.WithDenyCacheMaxHold(time.Hour), redislimit.WithClock(clock))
	mustTake(t, l, "hot", 2)
	clock.Advance(time.Second)
	first := mustTake(t, l, "hot", 1)
	if first.Allowed || first.RetryAfter != 4*time.Second {
		t.Fatalf("the bucket empty, a second on: %+v, want a refusal for 4s", first)
	}
	before := rt.Load()
	for _, el := range []time.Duration{0, time.Second, 4*time.Second - time.Microsecond} {
		clock.Set(start.Add(time.Second + el))
		d := mustTake(t, l, "hot", 1)
		if d.Allowed || d.RetryAfter != first.RetryAfter-el || rt.Load() != before {
			t.Fatalf("%v after the refusal: %+v after %d round trips, want refused locally for %v", el, d, rt.Load()-before, first.RetryAfter-el)
		}
	}
	clock.Set(start.Add(5 * time.Second))
	if d := mustTake(t, l, "hot", 1); !d.Allowed || rt.Load()-before != 1 {
		t.Fatalf("at the refusal's RetryAfter: %+v after %d round trips, want admitted by Redis", d, rt.Load()-before)
	}
}

// TestGCRAExpiry checks that a GCRA key lives as long as its buckets are
// not full, and not much longer: its TTL covers the latest TAT, and
// admissions refresh it only when it would not.
func TestGCRAExpiry(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	const window = 10 * time.Second
	l := newLimiter(t, client, 10, window, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	mustTake(t, l, "k", 4) // full in 4s: expires 4s + 5s later
	ttl := client.PTTL(ctx, l.StoreKey("k")).Val()
	if ttl <= 8*time.Second || ttl > 9*time.Second {
		t.Fatalf("TTL after 4 of 10 per 10s: %v, want about 9s (the bucket's 4s, and half the window)", ttl)
	}
	mustTake(t, l, "k", 4) // full in 8s: still within the TTL, which stays
	if got := client.PTTL(ctx, l.StoreKey("k")).Val(); got > ttl || got < ttl-time.Second {
		t.Fatalf("TTL after an admission it still covers: %v, want it left at about %v", got, ttl)
	}
	clock.Advance(time.Second)
	mustTake(t, l, "k", 2) // full in 9s from now: past the TTL, refreshed
	if got := client.PTTL(ctx, l.StoreKey("k")).Val(); got <= 13*time.Second || got > 14*time.Second {
		t.Fatalf("TTL after an admission past it: %v, want about 14s", got)
	}
	if _, err := redislimit.New(client, 1, window, redislimit.WithAlgorithm(keyrate.GCRA+1)); !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("an unknown algorithm: %v, want an error wrapping keyrate.ErrConfig", err)
	}
}

// TestGCRATiers checks what a key keeps when its policies change: a
// policy of the same refill interval reads the same bucket (10 per 10s
// and 20 per 20s both refill one a second), one of another interval
// starts with its bucket full.
func TestGCRATiers(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	if d := mustTake(t, l, "k", 10); !d.Allowed {
		t.Fatalf("a burst of 10: %+v", d)
	}
	if err := l.SetTier("", []keyrate.Policy{{Limit: 20, Window: 20 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, l, "k", 0); d.Remaining != 10 || d.ResetAfter != 10*time.Second {
		t.Fatalf("under 20 per 20s: %+v, want the same bucket: 10 of 20 spent, full in 10s", d)
	}
	if err := l.SetTier("", []keyrate.Policy{{Limit: 10, Window: 20 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, l, "k", 10); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("under 10 per 20s, a bucket of its own: %+v, want a full burst of 10", d)
	}
}
