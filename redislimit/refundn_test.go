package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/stretchr/testify/require"
)

// TestGCRARefundOfAnOldDecision is the case: under 1 per second,
// one decision a second for ten seconds, then a refund of the first,
// decided 10 s before. Its token was refilled 9 s ago, so the refund has
// nothing to give back, and the bucket stays as it was: a second request
// at 10 s is refused. Giving back a token's worth whatever the age would
// admit two requests at one instant.
func TestGCRARefundOfAnOldDecision(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 1, time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	first := mustTakeReceipt(t, l, "k", 1)
	require.True(t, first.Allowed)
	for i := 1; i <= 10; i++ {
		clock.Set(start.Add(time.Duration(i) * time.Second))
		require.True(t, mustTake(t, l, "k", 1).Allowed, "one a second, at %ds", i)
	}
	err := l.Refund(context.Background(), "k", &first)
	require.ErrorIs(t, err, keyrate.ErrNothingToRefund, "the first decision's token came back at 1s")
	require.False(t, mustTake(t, l, "k", 1).Allowed, "a second request at 10s")
}

// TestGCRARefundGivesBackWhatIsNotRefilled checks the amount: 10 per 10 s
// (a token a second); a decision of 5 at 0 s holds the bucket until 5 s,
// and a refund at 3 s gives back the 2 s of it not refilled yet, which
// leaves the bucket full, and no more: a burst of 10 then, not 13.
func TestGCRARefundGivesBackWhatIsNotRefilled(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	d := mustTakeReceipt(t, l, "k", 5)
	clock.Set(start.Add(3 * time.Second))
	require.NoError(t, l.Refund(context.Background(), "k", &d))
	got := mustTake(t, l, "k", 0)
	require.Equal(t, 10, got.Remaining)
	require.Zero(t, got.ResetAfter)
	require.True(t, mustTake(t, l, "k", 10).Allowed)
	require.False(t, mustTake(t, l, "k", 1).Allowed, "the eleventh token at 3s")
}

// TestGCRARefundAfterAnEarlierRefund gives back a decision whose tokens an
// earlier decision's refund moved forward: 10 per 10 s, z and a of 5 each
// at 0 s (a's tokens until 10 s), z refunded at 0 s (a's now until 5 s),
// then a full burst c at 7 s. At 7 s a's tokens have all come back, so its
// refund gives nothing: counting from the 10 s a was decided with would
// give back 3 of c's, and let 13 through at one instant.
func TestGCRARefundAfterAnEarlierRefund(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	z := mustTakeReceipt(t, l, "k", 5)
	a := mustTakeReceipt(t, l, "k", 5)
	require.True(t, z.Allowed && a.Allowed)
	require.NoError(t, l.Refund(ctx, "k", &z))
	clock.Set(start.Add(7 * time.Second))
	require.True(t, mustTake(t, l, "k", 10).Allowed, "a full bucket at 7s")
	require.ErrorIs(t, l.Refund(ctx, "k", &a), keyrate.ErrNothingToRefund)
	require.False(t, mustTake(t, l, "k", 1).Allowed, "an eleventh token at 7s")
}

// TestGCRARefundNTwice gives a decision back in two parts: the second
// part counts the decision's tokens as ending where the first refund left
// them, so it gives back nothing once those have come back, whatever later
// decisions hold.
func TestGCRARefundNTwice(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))

	// Both parts at once: the whole decision back.
	d := mustTakeReceipt(t, l, "a", 10)
	require.NoError(t, l.RefundN(ctx, "a", &d, 4))
	require.Equal(t, 6, d.Receipt.N())
	require.Equal(t, 4, mustTake(t, l, "a", 0).Remaining)
	require.NoError(t, l.RefundN(ctx, "a", &d, 6))
	require.Zero(t, d.Receipt.N())
	require.Equal(t, 10, mustTake(t, l, "a", 0).Remaining)

	// 9 of 10 back at once leave one token, until 1 s; a burst of 10 at
	// 5 s; the last part of the first decision came back at 1 s.
	d = mustTakeReceipt(t, l, "b", 10)
	require.NoError(t, l.RefundN(ctx, "b", &d, 9))
	clock.Set(start.Add(5 * time.Second))
	require.True(t, mustTake(t, l, "b", 10).Allowed)
	require.ErrorIs(t, l.RefundN(ctx, "b", &d, 1), keyrate.ErrNothingToRefund)
	require.False(t, mustTake(t, l, "b", 1).Allowed, "an eleventh token at 5s")
}

// TestRefundOnlyEntryKeepsLast refunds the only entry of a sliding log
// whose earlier events an admission pruned, then steps the server's
// clock back (a failover, a correction): the log keeps the newest instant
// it decided at, so decisions do not go back before it, and no span of a
// second holds more than 2 of the events admitted, at the instants they
// were recorded at. With the key deleted, the decision at 0.5 s would
// count without the events of 0 s and admit a third within the second.
func TestRefundOnlyEntryKeepsLast(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 2, time.Second, redislimit.WithClock(clock))
	var kept []int64 // the instants of the admissions not refunded, µs
	take := func() keyrate.Decision {
		d := mustTakeReceipt(t, l, "k", 1)
		if d.Allowed {
			kept = append(kept, redislimit.ReceiptRecorded(d.Receipt))
		}
		return d
	}
	require.True(t, take().Allowed)
	require.True(t, take().Allowed)
	clock.Set(start.Add(1050 * time.Millisecond))
	c := take() // prunes the two events of 0s
	require.True(t, c.Allowed)
	require.NoError(t, l.Refund(ctx, "k", &c))
	kept = kept[:2]
	ttl, err := client.PTTL(ctx, l.StoreKey("k")).Result()
	require.NoError(t, err)

	clock.Set(start.Add(500 * time.Millisecond))
	for range 3 {
		take()
	}
	for _, end := range kept {
		in := 0
		for _, at := range kept {
			if at > end-time.Second.Microseconds() && at <= end {
				in++
			}
		}
		require.LessOrEqual(t, in, 2, "admitted at %v (µs after the start)", kept)
	}
	require.Positive(t, ttl, "the log of no entries keeps its expiry")
	at := start.Add(1050 * time.Millisecond).UnixMicro()
	require.Equal(t, []int64{at, at}, kept[2:], "two admitted after the step back, at the newest instant decided at")
}

// TestRefundN settles a decision in parts, under each algorithm: each
// part comes back, the receipt keeps what is left, asking for more than
// is left or less than 1 changes nothing, and once all is back the
// decision has nothing to refund.
func TestRefundN(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := keyrate.NewManualClock(start)
			l := newLimiter(t, client, 1000, time.Minute, redislimit.WithAlgorithm(alg), redislimit.WithClock(clock))
			d := mustTakeReceipt(t, l, "k", 900)
			require.True(t, d.Allowed)
			receipt := d.Receipt
			for _, n := range []int{0, -1, 901} {
				require.ErrorIs(t, l.RefundN(ctx, "k", &d, n), keyrate.ErrExceedsLimit, "RefundN(%d) of 900", n)
				require.Equal(t, receipt, d.Receipt)
			}
			require.Equal(t, 100, remaining(t, l, "k"))
			require.NoError(t, l.RefundN(ctx, "k", &d, 300))
			require.Equal(t, 600, d.Receipt.N())
			require.Equal(t, backend.ReceiptAt(receipt), backend.ReceiptAt(d.Receipt))
			require.Equal(t, backend.ReceiptID(receipt), backend.ReceiptID(d.Receipt))
			require.Equal(t, 400, remaining(t, l, "k"))
			require.ErrorIs(t, l.RefundN(ctx, "k", &d, 601), keyrate.ErrExceedsLimit)
			require.Equal(t, 400, remaining(t, l, "k"))
			require.NoError(t, l.Refund(ctx, "k", &d), "the rest")
			require.Equal(t, keyrate.Receipt{}, d.Receipt)
			require.Equal(t, 1000, remaining(t, l, "k"))
			require.ErrorIs(t, l.RefundN(ctx, "k", &d, 1), keyrate.ErrNothingToRefund)
			require.ErrorIs(t, l.Refund(ctx, "k", &d), keyrate.ErrNothingToRefund)

			// A stale receipt: the key lost and made again.
			old := mustTakeReceipt(t, l, "s", 10)
			client.Del(ctx, l.StoreKey("s"))
			again := mustTakeReceipt(t, l, "s", 10)
			for redislimit.ReceiptGen(again.Receipt) == redislimit.ReceiptGen(old.Receipt) {
				client.Del(ctx, l.StoreKey("s"))
				again = mustTakeReceipt(t, l, "s", 10)
			}
			require.ErrorIs(t, l.RefundN(ctx, "s", &old, 5), keyrate.ErrNothingToRefund)
			require.Equal(t, 10, old.Receipt.N(), "a refused refund keeps the receipt")
			require.Equal(t, 990, remaining(t, l, "s"))
		})
	}
}

// TestRefundNFromItsOwnEntry gives back part of an older decision while
// a newer one stands: the weight leaves the older decision's entry, so a
// refusal then waits for the older entry's rest to leave, not the newer's.
func TestRefundNFromItsOwnEntry(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second, redislimit.WithClock(clock))
	a := mustTakeReceipt(t, l, "k", 5)
	clock.Set(start.Add(5 * time.Second))
	mustTake(t, l, "k", 5)
	clock.Set(start.Add(6 * time.Second))
	require.NoError(t, l.RefundN(context.Background(), "k", &a, 3))
	require.True(t, mustTake(t, l, "k", 3).Allowed)
	d := mustTake(t, l, "k", 1)
	require.False(t, d.Allowed)
	require.Equal(t, 4*time.Second, d.RetryAfter, "the 2 left of 0s leave at 10s")
	g, err := redislimit.ReadLog(context.Background(), client, l.StoreKey("k"))
	require.NoError(t, err)
	require.Equal(t, []int64{2, 5, 3}, []int64{g.Entries[0].Weight, g.Entries[1].Weight, g.Entries[2].Weight})
}

// TestRefundNTakeAllAndDenyCache settles the receipts of a TakeAll in
// part, each key on its own, and checks that a partial refund drops the
// key's refusal from the deny cache, so that its next call asks Redis.
func TestRefundNTakeAllAndDenyCache(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, time.Minute, redislimit.WithClock(clock), redislimit.WithDenyCache(10))
	ds, ok, err := l.TakeAll(ctx, []keyrate.Hit{{Key: "a", Weight: 8}, {Key: "b", Weight: 4}})
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, mustTake(t, l, "a", 5).Allowed, "held by the deny cache from now")
	require.NoError(t, l.RefundN(ctx, "a", &ds[0], 3))
	require.Equal(t, 5, ds[0].Receipt.N())
	require.True(t, mustTake(t, l, "a", 5).Allowed, "asked Redis after the refund")
	require.NoError(t, l.RefundN(ctx, "b", &ds[1], 4))
	require.Equal(t, 10, remaining(t, l, "b"))
}

// TestRefundNFallbackDecision settles a decision the local fallback made
// while Redis could not answer: the parts go back to the fallback, which
// made it.
func TestRefundNFallbackDecision(t *testing.T) {
	l, err := redislimit.New(deadClient(t), 10, time.Minute, redislimit.WithLocalFallback(1))
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.TakeContext(ctx, "alice", 8)
	require.NoError(t, err)
	require.True(t, d.Allowed && d.Fallback)
	require.ErrorIs(t, l.RefundN(ctx, "alice", &d, 9), keyrate.ErrExceedsLimit)
	require.NoError(t, l.RefundN(ctx, "alice", &d, 5))
	require.Equal(t, 3, d.Receipt.N())
	after, err := l.TakeContext(ctx, "alice", 0)
	require.NoError(t, err)
	require.Equal(t, 7, after.Remaining, "8 taken, 5 given back")
	require.NoError(t, l.Refund(ctx, "alice", &d))
	require.ErrorIs(t, l.RefundN(ctx, "alice", &d, 1), keyrate.ErrNothingToRefund)
}
