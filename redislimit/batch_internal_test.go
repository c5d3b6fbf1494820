package redislimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/stretchr/testify/require"
)

// isolatePrefixes makes TestRunIsolatesErrors's keys unique on the shared
// server on every run (-count, -shuffle), as uniquePrefix does for the
// external tests: a run finds the keys an earlier one left otherwise.
var isolatePrefixes atomic.Int64

// TestRunIsolatesErrors decides, in one script run, requests of which
// one has a key holding a value of another type: that request alone fails,
// with Redis's error, naming its key; the others are decided.
func TestRunIsolatesErrors(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		l, err := New(client, 5, time.Hour, WithAlgorithm(alg), WithPrefix(fmt.Sprintf("isolate%d:%v:", isolatePrefixes.Add(1), alg)))
		require.NoError(t, err)
		tr := l.tiers.Load().def
		key := func(k string) string { return l.storeKey(k, l.tagOf(k, k)) }
		require.NoError(t, client.Set(ctx, key("bad"), "x", 0).Err())
		if alg == keyrate.SlidingLog {
			require.NoError(t, client.Del(ctx, key("bad")).Err())
			require.NoError(t, client.HSet(ctx, key("bad"), "x", "y").Err())
		}
		reqs := []*request{
			{keys: []string{key("a")}, weights: []int{2}, tiers: []*tier{tr}},
			{keys: []string{key("b"), key("bad")}, weights: []int{1, 1}, tiers: []*tier{tr, tr}},
			{keys: []string{key("a")}, weights: []int{3}, tiers: []*tier{tr}},
			{keys: []string{key("a")}, weights: []int{1}, tiers: []*tier{tr}},
		}
		l.send(ctx, reqs)
		require.NoError(t, reqs[0].ans.err, alg)
		require.True(t, reqs[0].ans.admitted)
		require.Error(t, reqs[1].ans.err, alg)
		require.Equal(t, 1, reqs[1].ans.failedAt, "the key at fault")
		require.True(t, reqs[2].ans.admitted, "the same key again in the run: 2 + 3 of 5")
		require.False(t, reqs[3].ans.admitted, "and then full")
		require.Equal(t, int64(0), reqs[3].ans.replies[0].policy(0)[0])
		n, err := client.Exists(ctx, key("b")).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the failed request recorded nothing for its first key")
	}
}
