package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// ledgerTop is 2^48, past the most a receipt's ledger holds.
const ledgerTop = 1 << 48

// TestGCRARefundBeyondTheWindow refunds, at its own instant, a decision
// whose bucket takes longer than the window to refill, limit refill
// intervals of window/limit rounded up to a microsecond: its ResetAfter
// says the window, its span ends later, and a full refund must give it all
// back.
func TestGCRARefundBeyondTheWindow(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		limit      int
		window     time.Duration
		held, take int
	}{
		{7, time.Second, 0, 7},                       // 7 of 142,858µs
		{7, time.Second, 2, 5},                       // the same, on a bucket holding 2
		{math.MaxInt32, time.Hour, 0, math.MaxInt32}, // 2^31-1 of 2µs
		{1000, 999 * time.Millisecond, 1, 999},       // 1,000 of 999µs, no rounding: the window
	} {
		name := fmt.Sprintf("%d of %d per %v, %d held", tc.take, tc.limit, tc.window, tc.held)
		clock := keyrate.NewManualClock(start)
		l := newLimiter(t, client, tc.limit, tc.window, redislimit.WithClock(clock), redislimit.WithAlgorithm(keyrate.GCRA))
		if tc.held > 0 {
			mustTake(t, l, "k", tc.held)
		}
		before := remaining(t, l, "k")
		d := mustTakeReceipt(t, l, "k", tc.take)
		if !d.Allowed {
			t.Fatalf("%s: %+v, want admitted", name, d)
		}
		if err := l.Refund(ctx, "k", &d); err != nil {
			t.Fatalf("%s: refund: %v", name, err)
		}
		if got := remaining(t, l, "k"); got != before {
			t.Errorf("%s: Remaining %d after a full refund at the decision's instant, want %d as before it", name, got, before)
		}
	}
}

// TestGCRARefundLedgerPast48Bits refunds a decision a whose span an
// earlier refund moved to the bucket's start, once its key's ledger has
// counted 2^48 of weight refunded since a (Take and Refund pairs at one
// instant: 2^17 of the largest weight, which the test writes into the
// ledger rather than make). a's tokens refill soon after; its refund must
// then give back nothing. A ledger kept mod 2^48 read "nothing refunded
// since a" there and gave back the tokens of a live request.
func TestGCRARefundLedgerPast48Bits(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 1000, time.Second, redislimit.WithClock(clock), redislimit.WithAlgorithm(keyrate.GCRA))
	z := mustTakeReceipt(t, l, "k", 500)
	a := mustTakeReceipt(t, l, "k", 500)
	if err := l.Refund(ctx, "k", &z); err != nil { // a's span is now the bucket's first 500ms
		t.Fatal(err)
	}
	mark := int64(backend.ReceiptID(a.Receipt) & (ledgerTop - 1))
	if err := client.HSet(ctx, l.StoreKey("k"), "r", mark+ledgerTop).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(600 * time.Millisecond) // a's tokens have refilled
	if d := mustTake(t, l, "k", 500); !d.Allowed {
		t.Fatalf("the live request: %+v, want admitted", d)
	}
	if err := l.Refund(ctx, "k", &a); !errors.Is(err, keyrate.ErrNothingToRefund) {
		t.Fatalf("refund of a, whose tokens refilled: %v, want ErrNothingToRefund", err)
	}
	if got := remaining(t, l, "k"); got != 500 {
		t.Fatalf("Remaining %d, want 500: the live request's tokens stay taken", got)
	}
}

// TestGCRARefundLedgerFull checks the top of the ledger: a refund that
// would take it past what a receipt holds gives nothing back and changes
// nothing, rather than wrap, and the next admission that finds the bucket
// full starts a new generation, whose ledger starts at 0 and whose
// refunds give back again.
func TestGCRARefundLedgerFull(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 100, time.Second, redislimit.WithClock(clock), redislimit.WithAlgorithm(keyrate.GCRA))
	key := l.StoreKey("k")
	mustTake(t, l, "k", 1)
	if err := client.HSet(ctx, key, "r", ledgerTop-11).Err(); err != nil {
		t.Fatal(err)
	}
	d := mustTakeReceipt(t, l, "k", 5)
	if err := l.Refund(ctx, "k", &d); err != nil {
		t.Fatalf("a refund that fits the ledger: %v", err)
	}
	e := mustTakeReceipt(t, l, "k", 10)
	if err := l.Refund(ctx, "k", &e); !errors.Is(err, keyrate.ErrNothingToRefund) {
		t.Fatalf("a refund past the ledger's top: %v, want ErrNothingToRefund", err)
	}
	if got, err := client.HGet(ctx, key, "r").Int64(); err != nil || got != ledgerTop-6 {
		t.Fatalf("ledger %d (%v), want %d: unchanged", got, err, int64(ledgerTop-6))
	}
	if got := remaining(t, l, "k"); got != 89 {
		t.Fatalf("Remaining %d, want 89: 1 and 10 taken", got)
	}

	clock.Advance(time.Second) // full again
	f := mustTakeReceipt(t, l, "k", 3)
	if redislimit.ReceiptGen(f.Receipt) == redislimit.ReceiptGen(e.Receipt) {
		t.Fatal("the admission at a full bucket kept the generation")
	}
	if got, err := client.HGet(ctx, key, "r").Int64(); err != nil || got != 0 {
		t.Fatalf("ledger %d (%v), want 0 in the new generation", got, err)
	}
	if err := l.Refund(ctx, "k", &f); err != nil {
		t.Fatalf("a refund in the new generation: %v", err)
	}
	if err := l.Refund(ctx, "k", &e); !errors.Is(err, keyrate.ErrNothingToRefund) {
		t.Fatalf("a receipt of the old generation: %v, want ErrNothingToRefund", err)
	}
	if got := remaining(t, l, "k"); got != 100 {
		t.Fatalf("Remaining %d, want 100", got)
	}
}
