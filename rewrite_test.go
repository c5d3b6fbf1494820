package keyrate

import (
	"context"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The tests of this file each pin a way a key's log was once rewritten or
// misread after a change of policies, a refund, a Reset or an eviction,
// letting a window hold more than its limit.

// TestPlanChangeKeepsNewestEvents changes a key's policies right after it
// filled a minute: [1,000 a day, 3 a minute] to [3 a minute] by SetTier,
// the same by a tier move, and a window that only grows (1 per 3s to 1 per
// 7s). The events already in the minute still count: 10µs later nothing
// more fits, and the minute holds 3.
func TestPlanChangeKeepsNewestEvents(t *testing.T) {
	daily := []Policy{{Name: "day", Limit: 1000, Window: 24 * time.Hour}, {Name: "minute", Limit: 3, Window: time.Minute}}
	minute := []Policy{{Name: "minute", Limit: 3, Window: time.Minute}}

	t.Run("SetTier", func(t *testing.T) {
		l, c := newPolicies(t, daily)
		c.Set(t0.Add(1234567 * time.Nanosecond)) // between ticks of every size
		require.True(t, l.AllowN("k", 3))
		require.NoError(t, l.SetTier("", minute))
		c.Advance(10 * time.Microsecond)
		d := l.Take("k", 1)
		assert.False(t, d.Allowed, "the minute holds 3 already: %+v", d)
		assert.Zero(t, d.Remaining)
	})
	t.Run("tier move", func(t *testing.T) {
		plan := "daily"
		l, c := newPolicies(t, minute, WithTiers(func(string) string { return plan }, map[string][]Policy{"daily": daily}))
		c.Set(t0.Add(1234567 * time.Nanosecond))
		require.True(t, l.AllowN("k", 3))
		plan = ""
		c.Advance(10 * time.Microsecond)
		for range 3 {
			assert.False(t, l.Allow("k"), "the minute holds 3 already")
		}
	})
	t.Run("a window that grows", func(t *testing.T) {
		l, c := newPolicies(t, []Policy{{Name: "p", Limit: 1, Window: 3 * time.Second}}, WithMaxWindow(7*time.Second))
		c.Set(t0.Add(5 * time.Nanosecond)) // on a 5ns tick, and between 2ns ones
		require.True(t, l.Allow("k"))
		require.NoError(t, l.SetTier("", []Policy{{Name: "p", Limit: 1, Window: 7 * time.Second}}))
		assert.False(t, l.Allow("k"), "one event at the same instant already fills the window")
	})
}

// TestRefundAfterWindowChange refunds an older decision after the window
// grew: it gives back its own event or nothing, never a newer one's, so
// that the window never holds more than the limit. Under 1 per 1ns, a at
// 1ns and b at 2ns, then the window becomes 7s: a's refund must leave b's
// event in it (if b was admitted: a 5ns tick, which a 7s window needs,
// cannot tell 1ns from 2ns), and a Take at 2ns is then refused. Under 1
// per 10ns the same at 10ns and 20ns, where b is admitted for sure: a left
// its window and the log forgot it, so its refund finds nothing.
func TestRefundAfterWindowChange(t *testing.T) {
	for _, unit := range []time.Duration{1, 10} {
		l, c := newPolicies(t, []Policy{{Name: "p", Limit: 1, Window: unit}}, WithMaxWindow(7*time.Second))
		c.Set(t0.Add(unit))
		a := l.Take("k", 1)
		require.True(t, a.Allowed)
		c.Set(t0.Add(2 * unit))
		b := l.Take("k", 1)
		require.NoError(t, l.SetTier("", []Policy{{Name: "p", Limit: 1, Window: 7 * time.Second}}))
		err := l.Refund(context.Background(), "k", &a)
		if unit == 10 {
			require.True(t, b.Allowed, "a at 10ns has left the window (10ns, 20ns]")
			require.ErrorIs(t, err, ErrNothingToRefund)
		}
		// After the refund a holds nothing: it gave its event back, or the
		// log had forgotten it. b's event, if admitted, is the window's one.
		held := 0
		if b.Allowed {
			held++
		}
		if l.Take("k", 1).Allowed {
			held++
		}
		assert.Equal(t, 1, held, "window %v: the 7s window holds one event (refund: %v)", unit, err)
	}
}

// TestStaleReceipt refunds a decision after its key's log was Reset, or
// evicted to make room (WithMaxKeys), and the key decided again at the
// same instant. The allocator may well put the key's next log where the
// old one was; the test stands for that by giving the old receipt the new
// log's address. A receipt names its log itself, not its address, so it
// still gives nothing back: under a limit of 1 an hour, the hour never
// holds 2.
func TestStaleReceipt(t *testing.T) {
	for name, forget := range map[string]func(l *Limiter){
		"Reset":    func(l *Limiter) { l.Reset("k") },
		"eviction": func(l *Limiter) { l.Allow("other"); l.Reset("other") }, // a bound of one key: k goes
	} {
		t.Run(name, func(t *testing.T) {
			l, _ := newManual(t, 1, time.Hour, WithMaxKeys(1))
			old := l.Take("k", 1)
			require.True(t, old.Allowed)
			forget(l)
			fresh := l.Take("k", 1)
			require.True(t, fresh.Allowed, "the key's events were forgotten")
			old.Receipt.id = uint64(uintptr(unsafe.Pointer(l.keys.load("k"))))
			require.ErrorIs(t, l.Refund(context.Background(), "k", &old), ErrNothingToRefund)
			assert.False(t, l.Allow("k"), "the hour holds the fresh event")
		})
	}
}

// TestGCRARefundAfterRefill refunds a decision whose tokens the bucket has
// refilled since: under 1 per second, a decision at 0s, another at 10s, and
// a refund of the first gives nothing back, so that a third request at 10s
// is refused. A refund while the tokens are still out gives back the part
// not yet refilled.
func TestGCRARefundAfterRefill(t *testing.T) {
	l, c := newManual(t, 1, time.Second, WithAlgorithm(GCRA))
	old := l.Take("k", 1)
	require.True(t, old.Allowed)
	c.Advance(10 * time.Second)
	require.True(t, l.Allow("k"))
	require.ErrorIs(t, l.Refund(context.Background(), "k", &old), ErrNothingToRefund, "its token came back at 1s")
	assert.False(t, l.Allow("k"), "one token a second: the one of 10s is spent")

	l, c = newManual(t, 4, 4*time.Second, WithAlgorithm(GCRA))
	d := l.Take("k", 2)
	require.True(t, d.Allowed)
	c.Advance(time.Second) // one of its two tokens has come back
	require.NoError(t, l.Refund(context.Background(), "k", &d))
	assert.Equal(t, 4, l.Peek("k").Remaining+1, "the other is given back: the bucket is full")
	assert.False(t, l.AllowN("k", 5))
	assert.True(t, l.AllowN("k", 4))
}

// TestWeightIsOneEntry takes the largest weight a limiter admits: one
// entry, whatever the weight, in time and memory that do not depend on it,
// then weights of 1 beside it, refunds of part of it, and the window's end.
func TestWeightIsOneEntry(t *testing.T) {
	l, c := newManual(t, math.MaxInt32, time.Minute)
	d := l.Take("k", math.MaxInt32)
	require.True(t, d.Allowed)
	g := l.keys.load("k")
	assert.Equal(t, uint32(1), g.n, "one entry")
	assert.True(t, g.wide)
	assert.False(t, l.Allow("k"), "the window is full")

	require.NoError(t, l.RefundN(context.Background(), "k", &d, 1<<30))
	assert.Equal(t, math.MaxInt32-1<<30, d.Receipt.N(), "the receipt keeps what is left")
	c.Advance(time.Second)
	for range 3 {
		require.True(t, l.Allow("k"))
	}
	assert.Equal(t, uint32(2), g.n, "the weights of 1 of one instant share an entry")
	assert.Equal(t, 1<<30-3, l.Peek("k").Remaining+1)
	require.ErrorIs(t, l.RefundN(context.Background(), "k", &d, math.MaxInt32), ErrExceedsLimit, "more than is left")
	require.NoError(t, l.Refund(context.Background(), "k", &d))
	assert.Equal(t, math.MaxInt32-3, l.Peek("k").Remaining+1)

	c.Advance(time.Minute)
	assert.Equal(t, math.MaxInt32, l.Peek("k").Remaining+1, "everything left the window")
	assert.True(t, l.Allow("k"))
	assert.False(t, g.wide, "an empty log takes weights of 1 at 4 bytes again")
}

// TestWidenKeepsEvents turns a narrow log of weight-1 events into a wide
// one, by a weight of 3, and checks every policy's numbers against a
// limiter that was wide from the start.
func TestWidenKeepsEvents(t *testing.T) {
	policies := []Policy{{Name: "second", Limit: 5, Window: time.Second}, {Name: "ten", Limit: 9, Window: 10 * time.Second}}
	narrow, nc := newPolicies(t, policies)
	wide, wc := newPolicies(t, policies)
	at := []time.Duration{0, 0, 300 * time.Millisecond, 2 * time.Second, 2 * time.Second}
	for _, a := range at {
		nc.Set(t0.Add(a))
		wc.Set(t0.Add(a))
		require.True(t, narrow.Allow("k"))
	}
	wc.Set(t0)
	require.True(t, wide.AllowN("k", 2)) // wide from its first decision
	wc.Set(t0.Add(300 * time.Millisecond))
	require.True(t, wide.Allow("k"))
	wc.Set(t0.Add(2 * time.Second))
	require.True(t, wide.AllowN("k", 2))
	require.False(t, narrow.keys.load("k").wide)
	for _, step := range []time.Duration{0, 500 * time.Millisecond, 2 * time.Second, 7 * time.Second} {
		nc.Set(t0.Add(2*time.Second + step))
		wc.Set(t0.Add(2*time.Second + step))
		n, w := noReceipt(narrow.Take("k", 3)), noReceipt(wide.Take("k", 3))
		assert.Equal(t, w, n, "at 2s+%v", step)
		assert.Equal(t, w.Policies(), n.Policies(), "at 2s+%v", step)
		assert.True(t, narrow.keys.load("k").wide)
	}
}

// TestResetAfterWithinWindow checks that no duration but RetryAfter is
// ever longer than its policy's window, at instants between ticks too: a
// fresh key under 60s says t=60, never 61 once rounded up to seconds.
func TestResetAfterWithinWindow(t *testing.T) {
	for _, algorithm := range []Algorithm{SlidingLog, FixedWindow, GCRA} {
		l, c := newPolicies(t, []Policy{{Name: "minute", Limit: 7, Window: time.Minute}, {Name: "day", Limit: 100, Window: 24 * time.Hour}}, WithAlgorithm(algorithm))
		for i := range 20 {
			c.Advance(time.Duration(i*i)*time.Second + 7*time.Nanosecond)
			d := l.Take("k", 1)
			for _, p := range d.Policies() {
				assert.LessOrEqual(t, p.ResetAfter, p.Window, "%v, call %d: %+v", algorithm, i, p)
				assert.LessOrEqual(t, p.RefillAfter, p.Window, "%v, call %d: %+v", algorithm, i, p)
			}
		}
		if algorithm == SlidingLog {
			d := l.Take("fresh", 1)
			assert.Equal(t, time.Minute, d.Policies()[0].RefillAfter)
			assert.Equal(t, time.Minute, d.Policies()[0].ResetAfter)
		}
	}
}

// TestGCRARefundAfterAnEarlierRefund refunds a decision after a refund of
// one ahead of it moved its tokens earlier: under 10 per 10s, z(5) and a(5)
// at 0s, z given back; a's tokens are then the first five, back by 5s, so
// that at 7s a bucket of 10 is full, and a's refund gives nothing back: no
// eleventh token at 7s.
func TestGCRARefundAfterAnEarlierRefund(t *testing.T) {
	l, c := newManual(t, 10, 10*time.Second, WithAlgorithm(GCRA))
	z, a := l.Take("k", 5), l.Take("k", 5)
	require.True(t, z.Allowed && a.Allowed)
	require.NoError(t, l.Refund(context.Background(), "k", &z))
	c.Advance(7 * time.Second)
	require.True(t, l.AllowN("k", 10), "a full bucket at 7s")
	require.ErrorIs(t, l.Refund(context.Background(), "k", &a), ErrNothingToRefund)
	assert.False(t, l.Allow("k"), "an eleventh token at 7s")
}

// TestGCRARefundNTwice gives a decision back in two parts: the second
// counts the decision's tokens as ending where the first left them, so it
// gives back nothing once those have come back, whatever later decisions
// hold.
func TestGCRARefundNTwice(t *testing.T) {
	l, c := newManual(t, 10, 10*time.Second, WithAlgorithm(GCRA))
	d := l.Take("a", 10)
	require.NoError(t, l.RefundN(context.Background(), "a", &d, 4))
	assert.Equal(t, 4, l.Peek("a").Remaining+1)
	require.NoError(t, l.RefundN(context.Background(), "a", &d, 6))
	assert.Equal(t, 10, l.Peek("a").Remaining+1, "both parts at once: the whole decision back")

	d = l.Take("b", 10)
	require.NoError(t, l.RefundN(context.Background(), "b", &d, 9)) // one token left, back at 1s
	c.Advance(5 * time.Second)
	require.True(t, l.AllowN("b", 10))
	require.ErrorIs(t, l.RefundN(context.Background(), "b", &d, 1), ErrNothingToRefund)
	assert.False(t, l.Allow("b"), "an eleventh token at 5s")
}

// TestGCRARefundsNeverOverAdmit takes, refunds and refunds in part at
// random on one GCRA key, and checks what GCRA promises against what the
// limiter admitted: over any span [a, b] of the instants it admitted at,
// the weight it admitted and kept (less all that was asked back, which is
// at least what came back) is at most a full bucket and what refilled in
// between, limit + (b-a)/T tokens. A refund that gave back tokens already
// refilled, or ones a refund ahead of it had moved, would let a span hold
// more.
func TestGCRARefundsNeverOverAdmit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 10).Draw(t, "limit")
		window := time.Duration(rapid.IntRange(1, 10).Draw(t, "window")) * time.Second
		c := NewManualClock(t0)
		l, err := New(limit, window, WithClock(c), WithJanitorInterval(0), WithAlgorithm(GCRA))
		require.NoError(t, err)
		defer l.Close()
		every := l.tiers.Load().def.refill[0] * l.scale.unit // ns per token
		type admission struct {
			at   int64
			kept int64 // weight, less what was asked back
			d    Decision
		}
		var held []*admission
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			c.Advance(time.Duration(rapid.IntRange(0, 8).Draw(t, "step")) * window / 8)
			now := int64(c.Now().Sub(t0))
			if len(held) > 0 && rapid.IntRange(0, 2).Draw(t, "refund") == 0 {
				a := rapid.SampledFrom(held).Draw(t, "decision")
				if left := a.d.Receipt.N(); left > 0 {
					n := rapid.IntRange(1, left).Draw(t, "refund n")
					if l.RefundN(context.Background(), "k", &a.d, n) == nil {
						a.kept -= int64(n)
					}
				}
				continue
			}
			n := rapid.IntRange(1, limit).Draw(t, "n")
			if d := l.Take("k", n); d.Allowed {
				held = append(held, &admission{at: now, kept: int64(n), d: d})
			}
		}
		for i, a := range held {
			sum := int64(0)
			for _, b := range held[i:] {
				sum += b.kept
				require.LessOrEqual(t, sum*every, int64(limit)*every+b.at-a.at,
					"the admissions from %v to %v keep %d tokens", time.Duration(a.at), time.Duration(b.at), sum)
			}
		}
	})
}
