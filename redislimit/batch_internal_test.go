package redislimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
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

// runArgs returns the KEYS and ARGV of the script run deciding reqs, as
// runCmd lays them out, for tests that run a script by go-redis's Run.
func (l *Limiter) runArgs(reqs []*request) ([]string, []any) {
	cmd := l.runCmd(reqs)
	keys := make([]string, cmd[2].(int))
	for i := range keys {
		keys[i] = cmd[3+i].(string)
	}
	return keys, cmd[3+len(keys):]
}

// TestRunCmdIsSizedOnce checks argvLen against what appendArgs appends,
// for runs of every shape a Limiter sends: the command is one allocation
// only if the two agree.
func TestRunCmdIsSizedOnce(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	l, err := New(c, 10, time.Minute)
	require.NoError(t, err)
	def := l.tiers.Load().def
	cal, err := newTier("policies", []keyrate.Policy{
		{Name: "minute", Limit: 5, Window: time.Minute},
		{Name: "day", Limit: 100, Calendar: keyrate.Daily(time.UTC)},
	})
	require.NoError(t, err)
	lease := oneKey("k3", 1, cal, "t", 0)
	lease.lease = 4
	runs := map[string][]*request{
		"one key":       {oneKey("k", 1, def, "t", 0)},
		"calendar":      {oneKey("k", 2, cal, "t", 0)},
		"lease":         {lease},
		"many requests": {oneKey("k1", 1, def, "t", 0), {keys: []string{"k2", "k4"}, weights: []int{1, 3}, tiers: []*tier{cal, def}}, lease},
	}
	for name, run := range runs {
		cmd := l.runCmd(run)
		require.Equal(t, cap(cmd), len(cmd), "%s: %d entries in room for %d", name, len(cmd), cap(cmd))
	}
}
