package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// start is the instant the manual clocks of these tests start at.
var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// remaining returns what Take(key, 0) says is left for key: it records
// nothing.
func remaining(t *testing.T, l *redislimit.Limiter, key string) int {
	t.Helper()
	return mustTake(t, l, key, 0).Remaining
}

// TestRefundRemovesItsOwnInstants refunds an older decision while a newer
// one stands: the window afterwards holds the newer one's instant, so the
// key waits for it, not for the refunded one. Removing the newest event
// instead would let the window at 9s hold the events of 0s and 5s... and
// then a third at 10s.
func TestRefundRemovesItsOwnInstants(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 2, 10*time.Second, redislimit.WithClock(clock))
	ctx := context.Background()
	first := mustTakeReceipt(t, l, "k", 1) // 0s
	if first.Receipt.N() != 1 || !backend.ReceiptAt(first.Receipt).Equal(start) {
		t.Fatalf("admitted at 0s: receipt of %d events at %v, want 1 at %v", first.Receipt.N(), backend.ReceiptAt(first.Receipt), start)
	}
	clock.Set(start.Add(5 * time.Second))
	mustTake(t, l, "k", 1) // 5s
	clock.Set(start.Add(6 * time.Second))
	if err := l.Refund(ctx, "k", &first); err != nil {
		t.Fatal(err)
	}
	if first.Receipt != (keyrate.Receipt{}) {
		t.Fatalf("a refund left its receipt: %+v", first.Receipt)
	}
	if d := mustTake(t, l, "k", 1); !d.Allowed {
		t.Fatalf("at 6s after the refund: %+v, want room for one", d)
	}
	d := mustTake(t, l, "k", 1)
	if d.Allowed || d.RetryAfter != 9*time.Second {
		t.Fatalf("at 6s, full: %+v; want a refusal for 9s (the event of 5s leaves at 15s; the refunded one of 0s is gone)", d)
	}
}

// TestRefundErrors checks what Refund refuses, under each algorithm, and
// that it changes nothing when it does.
func TestRefundErrors(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := keyrate.NewManualClock(start.Add(time.Second))
			l := newLimiter(t, client, 2, 10*time.Second, redislimit.WithClock(clock), redislimit.WithAlgorithm(alg))
			refuses := func(key string, d *keyrate.Decision, why string) {
				t.Helper()
				var receipt keyrate.Receipt
				if d != nil {
					receipt = d.Receipt
				}
				err := l.Refund(ctx, key, d)
				if !errors.Is(err, keyrate.ErrNothingToRefund) {
					t.Fatalf("%s: Refund = %v, want an error wrapping ErrNothingToRefund", why, err)
				}
				if d != nil && d.Receipt != receipt {
					t.Fatalf("%s: a failed refund changed the receipt", why)
				}
			}

			admitted := mustTakeReceipt(t, l, "a", 1)
			mustTake(t, l, "a", 1)
			refused := mustTakeReceipt(t, l, "a", 1)
			if refused.Allowed || refused.Receipt != (keyrate.Receipt{}) {
				t.Fatalf("over the limit: %+v, want a refusal without a receipt", refused)
			}
			refuses("a", &refused, "a refusal")
			refuses("a", nil, "no decision")
			weightless := mustTakeReceipt(t, l, "a", 0)
			refuses("a", &weightless, "a weight of 0")

			// Another key's decision, decided at the same instant; the
			// keys' generations differ but by a chance of 1 in 65,536,
			// which the test takes away.
			b := mustTakeReceipt(t, l, "b", 1)
			for redislimit.ReceiptGen(b.Receipt) == redislimit.ReceiptGen(admitted.Receipt) {
				client.Del(ctx, l.StoreKey("b"))
				b = mustTakeReceipt(t, l, "b", 1)
			}
			copied := admitted
			refuses("b", &copied, "another key's decision")
			if got := remaining(t, l, "b"); got != 1 {
				t.Fatalf("b after a refused refund: %d remaining, want 1", got)
			}
			if got := remaining(t, l, "a"); got != 0 {
				t.Fatalf("a after refused refunds: %d remaining, want 0", got)
			}

			if err := l.Refund(ctx, "a", &admitted); err != nil {
				t.Fatal(err)
			}
			refuses("a", &admitted, "refunded already")
			if got := remaining(t, l, "a"); got != 1 {
				t.Fatalf("a after a refund: %d remaining, want 1", got)
			}
			if err := l.Refund(ctx, "", &b); !errors.Is(err, keyrate.ErrInvalidKey) || b.Receipt == (keyrate.Receipt{}) {
				t.Fatalf("Refund of the empty key = %v (receipt %+v), want an error wrapping ErrInvalidKey that keeps the receipt", err, b.Receipt)
			}

			// The key's state lost and made again, at the same instant.
			lost := mustTakeReceipt(t, l, "c", 1)
			client.Del(ctx, l.StoreKey("c"))
			refuses("c", &lost, "the key's state was lost")
			again := mustTakeReceipt(t, l, "c", 1)
			for redislimit.ReceiptGen(again.Receipt) == redislimit.ReceiptGen(lost.Receipt) {
				client.Del(ctx, l.StoreKey("c"))
				again = mustTakeReceipt(t, l, "c", 1)
			}
			refuses("c", &lost, "the key's state was lost and made again")
			if got := remaining(t, l, "c"); got != 1 {
				t.Fatalf("c after a refused refund: %d remaining, want 1", got)
			}

			// Long enough for the events to leave the window, the fixed
			// window to end and the bucket to fill again.
			late := mustTakeReceipt(t, l, "d", 1)
			clock.Advance(20 * time.Second)
			refuses("d", &late, "its events have gone")
			if got := remaining(t, l, "d"); got != 2 {
				t.Fatalf("d after a refused refund: %d remaining, want 2", got)
			}
		})
	}
}

// TestRefundUnderPolicies checks that refunded events leave every policy,
// under a resolution too, where they share an entry with other events,
// and that a decision sharing its instant with others takes only its own
// weight.
func TestRefundUnderPolicies(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	policies := []keyrate.Policy{{Name: "second", Limit: 3, Window: time.Second}, {Name: "minute", Limit: 5, Window: time.Minute}}
	for _, opts := range [][]redislimit.Option{nil, {redislimit.WithResolution(time.Second)}} {
		clock := keyrate.NewManualClock(start.Add(time.Millisecond))
		l := newPolicies(t, client, policies, append(opts, redislimit.WithClock(clock))...)
		a := mustTakeReceipt(t, l, "k", 2)
		b := mustTakeReceipt(t, l, "k", 1)
		if err := l.Refund(ctx, "k", &a); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, l, "k", 0)
		if got := []int{d.Policies()[0].Remaining, d.Policies()[1].Remaining}; got[0] != 2 || got[1] != 4 {
			t.Fatalf("resolution %v: after refunding 2 of 3: %v remaining, want [2 4]", opts, got)
		}
		clock.Advance(2 * time.Second)
		if err := l.Refund(ctx, "k", &b); err != nil {
			t.Fatalf("resolution %v: refund of an event still in the minute's window: %v", opts, err)
		}
		d = mustTake(t, l, "k", 0)
		if got := d.Policies()[1].Remaining; got != 5 {
			t.Fatalf("resolution %v: after refunding everything: %d remaining in the minute, want 5", opts, got)
		}
		if n, err := redislimit.EventsStored(ctx, client, l.StoreKey("k")); err != nil || n != 0 {
			t.Fatalf("resolution %v: the log holds %d events (%v), want none", opts, n, err)
		}
	}
}

// TestRefundRing refunds entries in every part of a log large enough to
// have a ring whose head has moved, one by one (oldest, newest, middle,
// then the rest), checking after each that the log reads back whole and
// holds what was not refunded, and that decisions count exactly that.
func TestRefundRing(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	const limit = 100
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, limit, 30*time.Second, redislimit.WithClock(clock))
	// 60 admissions a second apart: the first 30 leave the window, so the
	// ring's head moves past them, and the entries wrap around its end.
	var ds []keyrate.Decision
	var held int64
	for i := range 60 {
		clock.Set(start.Add(time.Duration(i) * time.Second))
		d := mustTakeReceipt(t, l, "k", 1+i%3)
		if !d.Allowed {
			t.Fatalf("admission %d: %+v", i, d)
		}
		if i >= 30 {
			ds = append(ds, d)
			held += int64(1 + i%3)
		}
	}
	check := func(after string) {
		t.Helper()
		g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k"))
		if err != nil {
			t.Fatalf("%s: %v", after, err)
		}
		// The entries left are those of the admissions not refunded, at
		// their own instants and with their weights.
		var got, want []redislimit.LogEntry
		for _, e := range g.Entries {
			got = append(got, redislimit.LogEntry{At: e.At, Weight: e.Weight})
		}
		for _, d := range ds {
			if d.Receipt.N() > 0 {
				want = append(want, redislimit.LogEntry{At: redislimit.ReceiptRecorded(d.Receipt), Weight: int64(d.Receipt.N())})
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the log holds %v, want %v", after, got, want)
		}
		if g.Held() != held {
			t.Fatalf("%s: the log holds %d, want %d", after, g.Held(), held)
		}
		if got := remaining(t, l, "k"); got != limit-int(held) {
			t.Fatalf("%s: %d remaining, want %d", after, got, limit-int(held))
		}
	}
	check("before any refund")
	order := []int{0, len(ds) - 1, len(ds) / 2, 1, len(ds) - 2, len(ds)/2 + 1}
	for i := range ds {
		order = append(order, i)
	}
	for _, i := range order {
		n := ds[i].Receipt.N()
		if n == 0 {
			continue // refunded already
		}
		if err := l.Refund(ctx, "k", &ds[i]); err != nil {
			t.Fatalf("refund of admission %d: %v", 30+i, err)
		}
		held -= int64(n)
		if held > 0 {
			check(fmt.Sprintf("after refunding admission %d", 30+i))
		}
	}
	// The log of no events stays, with the newest instant decided at, so
	// that a server clock stepping back does not decide before it.
	g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k"))
	if err != nil || len(g.Entries) != 0 || g.Last != start.Add(59*time.Second).UnixMicro() {
		t.Fatalf("the log after refunding its last event: %+v (%v), want no entries and the last instant of 59s", g, err)
	}
}

// TestRefundTwoClients takes on one limiter and refunds on another, each
// on its own client, as two replicas of a service would.
func TestRefundTwoClients(t *testing.T) {
	srv := redistest.Shared(t)
	testRefundTwoClients(t, func(t *testing.T) redis.UniversalClient { return srv.Client(t) })
}

func testRefundTwoClients(t *testing.T, newClient func(t *testing.T) redis.UniversalClient) {
	ctx := context.Background()
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			prefix := uniquePrefix()
			mk := func() *redislimit.Limiter {
				l, err := redislimit.New(newClient(t), 3, time.Hour, redislimit.WithPrefix(prefix), redislimit.WithAlgorithm(alg))
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			a, b := mk(), mk()
			var ds []keyrate.Decision
			for range 3 {
				ds = append(ds, mustTakeReceipt(t, a, "user", 1))
			}
			if d := mustTake(t, b, "user", 1); d.Allowed {
				t.Fatalf("the fourth call, on the other replica: %+v, want a refusal", d)
			}
			if err := b.Refund(ctx, "user", &ds[1]); err != nil {
				t.Fatalf("refund on the other replica: %v", err)
			}
			if err := a.Refund(ctx, "user", &ds[1]); err == nil {
				t.Fatal("the same decision refunded twice")
			}
			if d := mustTake(t, a, "user", 1); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("after the refund: %+v, want one admitted with 0 remaining", d)
			}
			if d := mustTake(t, b, "user", 1); d.Allowed {
				t.Fatalf("then: %+v, want a refusal", d)
			}
		})
	}
}

// TestRefundConcurrent takes and refunds on three keys from many
// goroutines, through two limiters on their own clients (one with a deny
// cache), each goroutine moving a shared manual clock on a millisecond
// before each call: every key ends holding exactly what was admitted and
// not refunded.
func TestRefundConcurrent(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := context.Background()
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 1000
			prefix := uniquePrefix()
			clock := keyrate.NewManualClock(start)
			var replicas []*redislimit.Limiter
			for i := range 2 {
				opts := []redislimit.Option{redislimit.WithPrefix(prefix), redislimit.WithAlgorithm(alg),
					redislimit.WithClock(clock), redislimit.WithTimeout(5 * time.Second)}
				if i == 1 {
					opts = append(opts, redislimit.WithDenyCache(10))
				}
				l, err := redislimit.New(srv.Client(t), limit, time.Hour, opts...)
				if err != nil {
					t.Fatal(err)
				}
				replicas = append(replicas, l)
			}
			var mu sync.Mutex
			kept := map[string]int{}
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := range 40 {
						key := fmt.Sprint("k", (w+i)%3)
						n := 1 + i%3
						clock.Advance(time.Millisecond)
						d, err := replicas[w%2].TakeContext(ctx, key, n)
						if err != nil || !d.Allowed {
							t.Errorf("Take(%q, %d) = %+v, %v; want admitted", key, n, d, err)
							return
						}
						if i%2 == 0 {
							// Refunded by the other replica half the time.
							// Under GCRA a refund gives back no more than
							// the decision's tokens can still hold, earlier
							// by every refund since, which concurrent
							// refunds of other decisions make less than
							// all: the key holds at least what was kept.
							err := replicas[(w+i/2)%2].Refund(ctx, key, &d)
							if err != nil && !(alg == keyrate.GCRA && errors.Is(err, keyrate.ErrNothingToRefund)) {
								t.Errorf("Refund(%q): %v", key, err)
							}
							continue
						}
						mu.Lock()
						kept[key] += n
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for key, n := range kept {
				got := remaining(t, replicas[0], key)
				if got != limit-n && !(alg == keyrate.GCRA && got < limit-n) {
					t.Errorf("%s: %d remaining, want %d (%d kept of what was admitted)", key, got, limit-n, n)
				}
			}
		})
	}
}

// TestRefundDenyCache checks that a refund, one round trip, drops the
// key's refusal from the refunding limiter's deny cache: the next call
// asks Redis, which admits.
func TestRefundDenyCache(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := context.Background()
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := keyrate.NewManualClock(start)
			l, rt := countedLimiter(t, srv, uniquePrefix(), 2, time.Minute, redislimit.WithAlgorithm(alg),
				redislimit.WithDenyCache(10), redislimit.WithClock(clock))
			warm := mustTakeReceipt(t, l, "warm", 1)
			if err := l.Refund(ctx, "warm", &warm); err != nil { // loads the refund script
				t.Fatal(err)
			}
			first := mustTakeReceipt(t, l, "hot", 1)
			mustTake(t, l, "hot", 1)
			mustTake(t, l, "hot", 1) // refused by Redis, and cached
			before := rt.Load()
			if d := mustTake(t, l, "hot", 1); d.Allowed || rt.Load() != before {
				t.Fatalf("a refusal in the cache: %+v after %d round trips, want refused with none", d, rt.Load()-before)
			}
			if err := l.Refund(ctx, "hot", &first); err != nil || rt.Load()-before != 1 {
				t.Fatalf("Refund = %v after %d round trips, want nil after 1", err, rt.Load()-before)
			}
			before = rt.Load()
			if d := mustTake(t, l, "hot", 1); !d.Allowed || rt.Load()-before != 1 {
				t.Fatalf("after the refund: %+v after %d round trips, want admitted by Redis", d, rt.Load()-before)
			}
		})
	}
}

// TestRefundAlgorithms checks refunds under the O(1) algorithms: events
// leave their fixed window while it lasts; the bucket gets its tokens back.
func TestRefundAlgorithms(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	fw := newLimiter(t, client, 2, 10*time.Second, redislimit.WithClock(clock), redislimit.WithAlgorithm(keyrate.FixedWindow))
	d := mustTakeReceipt(t, fw, "k", 2)
	if err := fw.Refund(ctx, "k", &d); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, fw, "k", 2); !d.Allowed {
		t.Fatalf("after the refund: %+v, want the window's count back at 0", d)
	}
	clock.Advance(10 * time.Second)
	d = mustTakeReceipt(t, fw, "k", 1)
	clock.Advance(10 * time.Second)
	if err := fw.Refund(ctx, "k", &d); !errors.Is(err, keyrate.ErrNothingToRefund) {
		t.Fatalf("refund once its window has ended: %v, want ErrNothingToRefund", err)
	}

	gcra := newLimiter(t, client, 10, 10*time.Second, redislimit.WithClock(clock), redislimit.WithAlgorithm(keyrate.GCRA))
	d = mustTakeReceipt(t, gcra, "k", 10)
	if mustTake(t, gcra, "k", 1).Allowed {
		t.Fatal("the bucket of 10 admitted an eleventh")
	}
	clock.Advance(1500 * time.Millisecond) // one token back
	if err := gcra.Refund(ctx, "k", &d); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, gcra, "k", 10); !d.Allowed {
		t.Fatalf("after the refund: %+v, want ten tokens", d)
	}
	clock.Advance(time.Hour)
	d = mustTakeReceipt(t, gcra, "k", 1)
	clock.Advance(time.Hour)
	if err := gcra.Refund(ctx, "k", &d); !errors.Is(err, keyrate.ErrNothingToRefund) {
		t.Fatalf("refund once the bucket is full: %v, want ErrNothingToRefund", err)
	}
}

// TestRefundFaults checks Refund when Redis cannot answer: an error that
// names the key by its tag alone, and the receipt consumed, as the refund
// may have been applied; a context done before the call keeps it.
func TestRefundFaults(t *testing.T) {
	srv := redistest.StartT(t)
	client := srv.Client(t)
	l := newLimiter(t, client, 3, time.Hour, redislimit.WithTimeout(200*time.Millisecond))
	const key = "secret-api-key"
	d := mustTakeReceipt(t, l, key, 1)

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Refund(done, key, &d); !errors.Is(err, context.Canceled) || d.Receipt.N() != 1 {
		t.Fatalf("Refund with a done context = %v (receipt %+v), want context.Canceled and the receipt kept", err, d.Receipt)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	err := l.Refund(context.Background(), key, &d)
	if err == nil || errors.Is(err, keyrate.ErrNothingToRefund) || strings.Contains(err.Error(), key) {
		t.Fatalf("Refund with Redis stopped = %v, want an error of the store that does not quote the key", err)
	}
	if d.Receipt != (keyrate.Receipt{}) {
		t.Fatalf("a refund that may have been applied kept its receipt: %+v", d.Receipt)
	}
}
