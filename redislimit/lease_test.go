package redislimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

var leaseEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// leased returns n Limiters of limit per window with leases of d on one
// prefix of client, decided on clock.
func leased(t *testing.T, client redis.UniversalClient, n, limit int, window, d time.Duration, clock keyrate.Clock, opts ...redislimit.Option) []*redislimit.Limiter {
	t.Helper()
	prefix := uniquePrefix()
	ls := make([]*redislimit.Limiter, n)
	for i := range ls {
		l, err := redislimit.New(client, limit, window, append([]redislimit.Option{
			redislimit.WithPrefix(prefix), redislimit.WithClock(clock), redislimit.WithLeases(d)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		ls[i] = l
	}
	return ls
}

// takeN makes n decisions of weight 1 for key and returns how many were
// admitted.
func takeN(t *testing.T, l *redislimit.Limiter, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		d, err := l.TakeContext(context.Background(), key, 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestLeaseLooksBackWindowPlusLease is the case that a look back of the
// window alone gets wrong, 100 per second with leases of 50ms: A's lease,
// taken at 0, is spent at 49ms; B decides at 1.001s. Looking back one
// second, B would not see A's lease and would admit 100 more, so that the
// second (0.001, 1.001] held 148. Looking back 1.05s, it admits only what
// leaves that second at the limit or under.
func TestLeaseLooksBackWindowPlusLease(t *testing.T) {
	clock := keyrate.NewManualClock(leaseEpoch)
	ls := leased(t, redistest.Shared(t).Client(t), 2, 100, time.Second, 50*time.Millisecond, clock)
	a, b := ls[0], ls[1]
	require.Equal(t, 2, takeN(t, a, "k", 2)) // a decision, then a lease of half the room
	clock.Advance(49 * time.Millisecond)
	late := takeN(t, a, "k", 48) // spent from the lease taken at 0
	require.Equal(t, 48, late)
	clock.Advance(time.Second + time.Millisecond - 49*time.Millisecond)
	got := takeN(t, b, "k", 100)
	require.LessOrEqual(t, late+got, 100, "the second (0.001s, 1.001s] holds %d from A's lease and %d of B's", late, got)
	require.Equal(t, 50, got, "B admits what the last 1.05s leave")
}

// TestLeaseCloseGivesBack: a replica that spent 10 of 100 and closed
// leaves 90 for the next; one abandoned holding its lease leaves less,
// never more, until the lease's entry leaves the window.
func TestLeaseCloseGivesBack(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	for _, close := range []bool{true, false} {
		clock := keyrate.NewManualClock(leaseEpoch)
		ls := leased(t, client, 2, 100, time.Minute, 100*time.Millisecond, clock)
		require.Equal(t, 10, takeN(t, ls[0], "k", 10))
		if close {
			require.NoError(t, ls[0].Close())
			require.NoError(t, ls[0].Close(), "Close is idempotent")
			_, err := ls[0].TakeContext(context.Background(), "k", 1)
			require.ErrorIs(t, err, keyrate.ErrClosed)
			require.Equal(t, 90, takeN(t, ls[1], "k", 200))
			continue
		}
		got := takeN(t, ls[1], "k", 200)
		require.Less(t, got, 90, "an abandoned lease stays counted")
		clock.Advance(time.Minute + 100*time.Millisecond)
		require.Equal(t, 100, takeN(t, ls[1], "k", 200), "until it leaves the window and the lease")
	}
}

// TestLeaseDecidesInProcess: a hot key decides in process, with at most one
// round trip per thousand decisions, and a quiet key as before, one round
// trip a decision.
func TestLeaseDecidesInProcess(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	var rt redistest.RoundTrips
	client.AddHook(&rt)
	clock := keyrate.NewManualClock(leaseEpoch)
	l := leased(t, client, 1, 1_000_000, time.Minute, 100*time.Millisecond, clock)[0]
	const hot = 100_000
	require.Equal(t, hot, takeN(t, l, "hot", hot))
	require.LessOrEqual(t, rt.Load(), int64(hot/1000), "round trips for %d decisions of a hot key", hot)

	before := rt.Load()
	for range 5 {
		clock.Advance(time.Second) // a lease's time and more between decisions
		require.Equal(t, 1, takeN(t, l, "quiet", 1))
	}
	require.Equal(t, int64(5), rt.Load()-before, "a quiet key decides in Redis")
}

// TestLeaseRefund: a refund of a decision spent from a live lease goes back
// into the lease, with no round trip; one of a lease that has ended goes
// back to its entry in Redis.
func TestLeaseRefund(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	var rt redistest.RoundTrips
	client.AddHook(&rt)
	ctx := context.Background()
	clock := keyrate.NewManualClock(leaseEpoch)
	ls := leased(t, client, 2, 10, time.Minute, 100*time.Millisecond, clock)
	a, b := ls[0], ls[1]
	require.Equal(t, 2, takeN(t, a, "k", 2)) // 1, then a lease of 4
	d, err := a.TakeContext(ctx, "k", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 5, d.Remaining, "Redis's 5 after the lease, and none of it left to spend")
	before := rt.Load()
	require.NoError(t, a.RefundN(ctx, "k", &d, 2))
	require.Equal(t, 1, d.Receipt.N())
	d2, err := a.TakeContext(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, d2.Allowed, "the refund went back into the lease")
	require.Equal(t, before, rt.Load(), "no round trip")

	// The lease ends; what it did not spend goes back at the next
	// decision, and a refund of its decisions from then on is Redis's.
	clock.Advance(100 * time.Millisecond)
	require.NoError(t, b.RefundN(ctx, "k", &d2, 2))
	require.ErrorIs(t, b.RefundN(ctx, "k", &d2, 1), keyrate.ErrNothingToRefund)
	redislimit.SweepLeases(a) // the lease was spent: nothing to give back
	// Held: the first two decisions' 2, and d's 1 it kept.
	require.Equal(t, 7, takeN(t, b, "k", 20))
}

// TestLeaseUnderAdmission: four replicas in turn, asked at four times the
// limit, admit at least 90% of what one exact limiter admits over the same
// requests. What leases cost is a look back of window + d, d / (window +
// d) of the limit at most, and the unused part of live leases.
func TestLeaseUnderAdmission(t *testing.T) {
	const limit, replicas = 100, 4
	window, d := time.Second, 20*time.Millisecond
	clock := keyrate.NewManualClock(leaseEpoch)
	ls := leased(t, redistest.Shared(t).Client(t), replicas, limit, window, d, clock)
	exact, err := keyrate.New(limit, window, keyrate.WithClock(clock))
	require.NoError(t, err)
	defer exact.Close()
	got, want := 0, 0
	const seconds = 10
	step := window / (4 * limit)
	for i := range seconds * 4 * limit {
		if exact.Allow("k") {
			want++
		}
		got += takeN(t, ls[i%replicas], "k", 1)
		clock.Advance(step)
	}
	t.Logf("over %ds at 4x the limit: leases admitted %d, one exact limiter %d (%.1f%%)", seconds, got, want, 100*float64(got)/float64(want))
	require.GreaterOrEqual(t, float64(got), 0.9*float64(want))
	require.LessOrEqual(t, got, want, "no more than exact")
}

// TestLeaseOutage: a live lease runs to its end while Redis cannot answer;
// then decisions fail as without leases.
func TestLeaseOutage(t *testing.T) {
	srv := redistest.StartT(t)
	client := srv.Client(t)
	clock := keyrate.NewManualClock(leaseEpoch)
	l := leased(t, client, 1, 1000, time.Minute, 100*time.Millisecond, clock, redislimit.WithTimeout(100*time.Millisecond))[0]
	require.Equal(t, 2, takeN(t, l, "k", 2))
	require.NoError(t, srv.Pause())
	defer srv.Resume()
	require.Equal(t, 100, takeN(t, l, "k", 100), "spent from the lease")
	clock.Advance(100 * time.Millisecond)
	_, err := l.TakeContext(context.Background(), "k", 1)
	require.ErrorIs(t, err, keyrate.ErrUnavailable)
}

// TestLeaseConfig: leases need the sliding log and a d from 1ms to the
// shortest window, in whole microseconds; SetTier holds a tier to it too.
func TestLeaseConfig(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	for _, c := range []struct {
		d    time.Duration
		opts []redislimit.Option
		want string
	}{
		{0, nil, "at least 1ms"},
		{time.Millisecond + 1, nil, "whole microseconds"},
		{2 * time.Second, nil, "shorter than the lease"},
		{time.Millisecond, []redislimit.Option{redislimit.WithAlgorithm(keyrate.FixedWindow)}, "sliding log"},
		{time.Millisecond, []redislimit.Option{redislimit.WithAlgorithm(keyrate.GCRA)}, "sliding log"},
	} {
		_, err := redislimit.New(client, 10, time.Second, append(c.opts, redislimit.WithLeases(c.d))...)
		require.ErrorIs(t, err, keyrate.ErrConfig, "lease %v", c.d)
		require.ErrorContains(t, err, c.want)
	}
	l, err := redislimit.New(client, 10, time.Second, redislimit.WithLeases(100*time.Millisecond))
	require.NoError(t, err)
	defer l.Close()
	err = l.SetTier("", []keyrate.Policy{{Limit: 5, Window: 50 * time.Millisecond}})
	require.ErrorIs(t, err, keyrate.ErrConfig)
	require.NoError(t, l.SetTier("", []keyrate.Policy{{Limit: 5, Window: time.Second}}))
	d, err := l.TakeContext(context.Background(), "k", 1)
	require.NoError(t, err)
	require.Equal(t, 5, d.Limit)
	require.False(t, errors.Is(err, keyrate.ErrClosed))
}

// TestLeaseBesideFallback: once a live lease has run out during an
// outage, the local fallback decides, as without leases, at its share.
func TestLeaseBesideFallback(t *testing.T) {
	srv := redistest.StartT(t)
	client := srv.Client(t)
	clock := keyrate.NewManualClock(leaseEpoch)
	l := leased(t, client, 1, 100, time.Minute, 100*time.Millisecond, clock,
		redislimit.WithTimeout(100*time.Millisecond), redislimit.WithLocalFallback(0.1))[0]
	require.Equal(t, 2, takeN(t, l, "k", 2))
	require.NoError(t, srv.Pause())
	defer srv.Resume()
	require.Equal(t, 48, takeN(t, l, "k", 48), "the rest of the lease of half the room")
	clock.Advance(100 * time.Millisecond)
	fallback, admitted := 0, 0
	for range 20 {
		d, err := l.TakeContext(context.Background(), "k", 1)
		require.NoError(t, err)
		if d.Fallback {
			fallback++
		}
		if d.Allowed {
			admitted++
		}
	}
	require.Equal(t, 20, fallback, "every decision after the lease is the fallback's")
	require.Equal(t, 10, admitted, "at a tenth of the limit")
}

// TestLeaseBesideDenyCache: a key Redis refused is refused in process,
// with no round trip, whether the lease state or the deny cache holds the
// refusal, and asked again once it may fit.
func TestLeaseBesideDenyCache(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	var rt redistest.RoundTrips
	client.AddHook(&rt)
	clock := keyrate.NewManualClock(leaseEpoch)
	l := leased(t, client, 1, 10, time.Second, 50*time.Millisecond, clock, redislimit.WithDenyCache(100))[0]
	require.Equal(t, 10, takeN(t, l, "k", 10))
	d, err := l.TakeContext(context.Background(), "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, time.Second+50*time.Millisecond, d.RetryAfter, "the look back is the window and the lease")
	before := rt.Load()
	require.Equal(t, 0, takeN(t, l, "k", 100))
	require.Equal(t, before, rt.Load(), "refused in process")
	clock.Advance(time.Second + 50*time.Millisecond)
	require.Equal(t, 10, takeN(t, l, "k", 10), "the window and the lease have passed")
}
