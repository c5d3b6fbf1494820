package keyrate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefundRemovesItsOwnInstants refunds an older decision while a newer
// one stands: the window afterwards holds the newer one's instant, so the
// key waits for it, not for the refunded one. Removing the newest event
// instead would let the window at 9s hold 2 events from 0s, 5s... and then
// a third at 10s.
func TestRefundRemovesItsOwnInstants(t *testing.T) {
	l, c := newManual(t, 2, 10*time.Second)
	first := l.Take("k", 1) // 0s
	c.Set(t0.Add(5 * time.Second))
	require.True(t, l.Take("k", 1).Allowed) // 5s
	c.Set(t0.Add(6 * time.Second))
	require.NoError(t, l.Refund(context.Background(), "k", &first))
	assert.Zero(t, first.Receipt, "a refund consumes its receipt")
	require.True(t, l.Allow("k"), "room again at 6s")
	d := l.Take("k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, 9*time.Second, d.RetryAfter, "the event of 5s leaves at 15s; the refunded one of 0s is gone")
}

// TestRefundErrors checks what Refund refuses, and that it changes nothing
// when it does.
func TestRefundErrors(t *testing.T) {
	l, c := newManual(t, 2, 10*time.Second)
	held := func(key string) int { return 2 - noReceipt(l.Take(key, 0)).Remaining }

	admitted := l.Take("a", 1)
	require.True(t, admitted.Allowed)
	l.Take("a", 1)
	refused := l.Take("a", 1)
	require.False(t, refused.Allowed)
	assert.ErrorIs(t, l.Refund(context.Background(), "a", &refused), ErrNothingToRefund, "a refusal recorded nothing")
	assert.ErrorIs(t, l.Refund(context.Background(), "a", nil), ErrNothingToRefund)
	weightless := l.Take("a", 0)
	assert.ErrorIs(t, l.Refund(context.Background(), "a", &weightless), ErrNothingToRefund)

	l.Take("b", 1)
	copied := admitted
	assert.ErrorIs(t, l.Refund(context.Background(), "b", &copied), ErrNothingToRefund, "another key's decision")
	assert.Equal(t, 1, held("b"))
	assert.Equal(t, 2, held("a"))

	require.NoError(t, l.Refund(context.Background(), "a", &admitted))
	assert.ErrorIs(t, l.Refund(context.Background(), "a", &admitted), ErrNothingToRefund, "refunded already")
	assert.Equal(t, 1, held("a"))

	again := l.Take("a", 1)
	l.Reset("a")
	l.Take("a", 1)
	assert.ErrorIs(t, l.Refund(context.Background(), "a", &again), ErrNothingToRefund, "the key's log was reset since")
	assert.Equal(t, 1, held("a"))

	late := l.Take("c", 1)
	c.Advance(10 * time.Second)
	l.Take("c", 2)
	assert.ErrorIs(t, l.Refund(context.Background(), "c", &late), ErrNothingToRefund, "its events left the window")
	assert.Equal(t, 2, held("c"))
}

// TestRefundUnderPolicies checks that refunded events leave every policy,
// under a resolution too, where they share an entry with other events.
func TestRefundUnderPolicies(t *testing.T) {
	policies := []Policy{{Name: "second", Limit: 3, Window: time.Second}, {Name: "minute", Limit: 5, Window: time.Minute}}
	for _, opts := range [][]Option{nil, {WithResolution(time.Second)}} {
		c := NewManualClock(t0)
		l, err := NewPolicies(policies, append(opts, WithClock(c), WithJanitorInterval(0))...)
		require.NoError(t, err)
		a := l.Take("k", 2)
		b := l.Take("k", 1)
		require.True(t, b.Allowed)
		require.NoError(t, l.Refund(context.Background(), "k", &a))
		d := noReceipt(l.Take("k", 0))
		assert.Equal(t, []int{2, 4}, []int{d.Policies()[0].Remaining, d.Policies()[1].Remaining}, "%v", opts)
		c.Advance(2 * time.Second)
		require.NoError(t, l.Refund(context.Background(), "k", &b), "still in the minute's window")
		d = noReceipt(l.Take("k", 0))
		assert.Equal(t, 5, d.Policies()[1].Remaining, "%v", opts)
		l.Close()
	}
}

// TestRefundTakeAll refunds each key of an admitted request.
func TestRefundTakeAll(t *testing.T) {
	l, _ := newManual(t, 3, time.Minute)
	ds, ok, _ := l.TakeAll(context.Background(), []Hit{{"user", 2}, {"org", 2}})
	require.True(t, ok)
	require.NoError(t, l.Refund(context.Background(), "user", &ds[0]))
	require.NoError(t, l.Refund(context.Background(), "org", &ds[1]))
	assert.Equal(t, 3, noReceipt(l.Take("org", 0)).Remaining)
}

// TestRefundAlgorithms checks refunds under the O(1) algorithms: events
// leave their fixed window while it lasts; the bucket gets its tokens back.
func TestRefundAlgorithms(t *testing.T) {
	l, c := newManual(t, 2, 10*time.Second, WithAlgorithm(FixedWindow))
	d := l.Take("k", 2)
	require.NoError(t, l.Refund(context.Background(), "k", &d))
	assert.True(t, l.AllowN("k", 2), "the window's count went back to 0")
	c.Advance(10 * time.Second)
	d = l.Take("k", 1)
	c.Advance(10 * time.Second)
	assert.ErrorIs(t, l.Refund(context.Background(), "k", &d), ErrNothingToRefund, "its window has ended")

	g, c := newManual(t, 10, 10*time.Second, WithAlgorithm(GCRA))
	d = g.Take("k", 10)
	require.False(t, g.Allow("k"))
	require.NoError(t, g.Refund(context.Background(), "k", &d))
	assert.True(t, g.AllowN("k", 10), "ten tokens back")
	c.Advance(time.Hour)
	d = g.Take("k", 1)
	c.Advance(time.Hour)
	assert.ErrorIs(t, g.Refund(context.Background(), "k", &d), ErrNothingToRefund, "the bucket is full already")
}

// TestRefundConcurrent takes and refunds on a few keys from many
// goroutines: every key ends holding exactly what was admitted and not
// refunded.
func TestRefundConcurrent(t *testing.T) {
	l, _ := newManual(t, 1000, time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := map[string]int{}
	for w := range 8 {
		wg.Go(func() {
			for i := range 300 {
				key := fmt.Sprint("k", (w+i)%3)
				d := l.Take(key, 1+i%3)
				if !d.Allowed {
					continue
				}
				if i%2 == 0 {
					require.NoError(t, l.Refund(context.Background(), key, &d))
					continue
				}
				mu.Lock()
				kept[key] += 1 + i%3
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for key, n := range kept {
		assert.Equal(t, 1000-n, noReceipt(l.Take(key, 0)).Remaining, "key %s", key)
	}
}

// TestGCRARefundLedgerPast32Bits takes and refunds at one instant until the
// key's refund ledger has counted 2^32 of weight since a decision a, whose
// span an earlier refund had moved to the bucket's start. a's tokens refill
// soon after; a refund of a then must give back nothing. A ledger of 32
// bits read "nothing refunded since a" there, and a's refund took the
// tokens of a live request of 1,000, so that a full bucket was admitted
// beside it.
func TestGCRARefundLedgerPast32Bits(t *testing.T) {
	const limit = 1 << 30 // a window of 2^30ns: a tick of 1ns, a refill of 1 tick
	l, c := newManual(t, limit, limit*time.Nanosecond, WithAlgorithm(GCRA))
	z := l.Take("k", limit-1000)
	a := l.Take("k", 1000)
	require.True(t, a.Allowed)
	require.NoError(t, l.Refund(context.Background(), "k", &z)) // a's span is now the bucket's first 1,000 ticks
	given := limit - 1000
	for _, w := range []int{limit - 1000, limit - 1000, limit - 1000, 4000} {
		b := l.Take("k", w)
		require.True(t, b.Allowed, "weight %d", w)
		require.NoError(t, l.Refund(context.Background(), "k", &b), "weight %d", w)
		given += w
	}
	require.Equal(t, 1<<32, given, "the weight refunded since a")

	c.Advance(2000 * time.Nanosecond) // a's 1,000 ticks have refilled
	live := l.Take("k", 1000)
	require.True(t, live.Allowed)
	assert.ErrorIs(t, l.Refund(context.Background(), "k", &a), ErrNothingToRefund, "a's tokens are back in the bucket already")
	assert.Equal(t, limit-1000, noReceipt(l.Take("k", 0)).Remaining, "the live 1,000 stay taken")
	assert.False(t, l.Take("k", limit).Allowed, "a full bucket beside the live 1,000")
}

// TestGCRARefundLedgerFull checks that a ledger too full to count one more
// refund gives nothing back and changes nothing, rather than wrap.
func TestGCRARefundLedgerFull(t *testing.T) {
	l, _ := newManual(t, 10, time.Second, WithAlgorithm(GCRA))
	d := l.Take("k", 4)
	g := l.lock("k", false)
	g.head, g.n = math.MaxUint32, math.MaxUint32-math.MaxInt32+1 // maxLedger + 1
	g.mu.Unlock()
	assert.ErrorIs(t, l.Refund(context.Background(), "k", &d), ErrNothingToRefund)
	assert.Equal(t, 4, d.Receipt.N(), "the receipt is kept")
	assert.Equal(t, 6, noReceipt(l.Take("k", 0)).Remaining)
}

// TestGCRARefundBeyondTheWindow refunds, at its own instant, a decision
// whose bucket takes longer than the window to refill: limit refills of
// window/limit rounded up to a tick, or a tick more from an instant within
// one. Its ResetAfter says the window, but its span ends later, and a full
// refund must give it all back.
func TestGCRARefundBeyondTheWindow(t *testing.T) {
	for _, tc := range []struct {
		limit      int
		window     time.Duration
		at         time.Duration // from t0
		held, take int
	}{
		{7, time.Second, 0, 0, 7},                       // 7 refills of 142,857,143ns
		{7, time.Second, 0, 3, 4},                       // the same, on a bucket holding 3
		{math.MaxInt32, time.Hour, 0, 0, math.MaxInt32}, // 2^31-1 refills of a 2µs tick
		{10, time.Hour, time.Microsecond, 0, 10},        // within a 2µs tick: the window and 1µs
		{1, time.Hour, time.Microsecond, 0, 1},
	} {
		name := fmt.Sprintf("%d per %v, %d of %d at %v", tc.take, tc.window, tc.held, tc.limit, tc.at)
		l, c := newManual(t, tc.limit, tc.window, WithAlgorithm(GCRA))
		c.Set(t0.Add(tc.at))
		if tc.held > 0 {
			require.True(t, l.Take("k", tc.held).Allowed, name)
		}
		before := noReceipt(l.Take("k", 0)).Remaining
		d := l.Take("k", tc.take)
		require.True(t, d.Allowed, name)
		require.NoError(t, l.Refund(context.Background(), "k", &d), name)
		assert.Zero(t, d.Receipt, name)
		assert.Equal(t, before, noReceipt(l.Take("k", 0)).Remaining, name)
		assert.True(t, l.AllowN("k", tc.take), name)
	}
}
