package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestBatchedCallersExact runs 64 goroutines on one Limiter, deciding 8
// keys of a limit of 100 each (TakeContext, and TakeAll over two keys), 40
// calls each, for every algorithm: the calls share round trips (fewer
// than there are calls), and every key admits exactly its limit, as one
// caller at a time would.
func TestBatchedCallersExact(t *testing.T) {
	srv := redistest.Shared(t)
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			client := srv.Client(t)
			var rt redistest.RoundTrips
			client.AddHook(&rt)
			clock := keyrate.NewManualClock(start)
			l := newLimiter(t, client, 100, time.Hour, redislimit.WithAlgorithm(alg), redislimit.WithClock(clock),
				redislimit.WithTimeout(10*time.Second))
			mustTake(t, l, "warm", 1)
			before := rt.Load()
			var admitted [8]atomic.Int64
			var calls atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 40 {
						a, b := (g+i)%8, (g+i+1)%8
						calls.Add(1)
						if i%4 == 3 {
							_, ok, err := l.TakeAll(context.Background(), []keyrate.Hit{{Key: fmt.Sprint("k", a), Weight: 1}, {Key: fmt.Sprint("k", b), Weight: 1}})
							if err != nil {
								t.Error(err)
								return
							}
							if ok {
								admitted[a].Add(1)
								admitted[b].Add(1)
							}
							continue
						}
						d, err := l.TakeContext(context.Background(), fmt.Sprint("k", a), 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted[a].Add(1)
						}
					}
				})
			}
			wg.Wait()
			for i := range admitted {
				require.Equal(t, int64(100), admitted[i].Load(), "key k%d", i)
				require.Equal(t, 0, remaining(t, l, fmt.Sprint("k", i)))
			}
			require.Less(t, rt.Load()-before, calls.Load(), "round trips for %d calls", calls.Load())
		})
	}
}

// TestBatchedCallerKeepsItsBudget pauses Redis (CLIENT PAUSE) while two
// callers wait in one batcher: the one with a short budget gets its own
// deadline's error at its deadline, the other its decision once Redis
// runs again.
func TestBatchedCallerKeepsItsBudget(t *testing.T) {
	srv := redistest.StartT(t)
	ctx := context.Background()
	client := srv.Client(t)
	l := newLimiter(t, client, 10, time.Hour, redislimit.WithTimeout(5*time.Second))
	mustTake(t, l, "warm", 1)
	require.NoError(t, client.Do(ctx, "CLIENT", "PAUSE", "400", "ALL").Err())
	type result struct {
		d   keyrate.Decision
		err error
		in  time.Duration
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, budget := range []time.Duration{50 * time.Millisecond, 5 * time.Second} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, budget)
			defer cancel()
			begin := time.Now()
			d, err := l.TakeContext(ctx, fmt.Sprint("k", i), 1)
			results[i] = result{d, err, time.Since(begin)}
		})
	}
	wg.Wait()
	require.ErrorIs(t, results[0].err, context.DeadlineExceeded)
	require.Less(t, results[0].in, 300*time.Millisecond, "the short budget ends its own call")
	require.NoError(t, results[1].err)
	require.True(t, results[1].d.Allowed)
}

// TestBatchedErrorFailsItsCallerAlone decides, from many goroutines at
// once, keys of which one holds a value of another type: its calls fail
// with Redis's error, every other call gets its decision.
func TestBatchedErrorFailsItsCallerAlone(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	l := newLimiter(t, client, 1000, time.Hour)
	require.NoError(t, client.HSet(context.Background(), l.StoreKey("bad"), "x", "y").Err())
	var bad, good, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				key := fmt.Sprint("good", (g+i)%5)
				if i%5 == 0 {
					key = "bad"
				}
				d, err := l.TakeContext(context.Background(), key, 1)
				switch {
				case key == "bad" && err != nil && !errors.Is(err, keyrate.ErrUnavailable):
					bad.Add(1)
				case key != "bad" && err == nil && d.Allowed:
					good.Add(1)
				default:
					failed.Add(1)
					t.Errorf("Take(%q): %+v, %v", key, d, err)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(32*4), bad.Load())
	require.Equal(t, int64(32*16), good.Load())
}

// TestBatchedClusterExact decides keys spread over the three masters of a
// Cluster from many goroutines: each node's calls share round trips, and
// every key admits exactly its limit.
func TestBatchedClusterExact(t *testing.T) {
	cluster := redistest.StartClusterT(t)
	client := cluster.Client(t)
	var rt redistest.RoundTrips
	client.OnNewNode(func(node *redis.Client) { node.AddHook(&rt) })
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 20, time.Hour, redislimit.WithClock(clock), redislimit.WithTimeout(10*time.Second))
	const keys = 30
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Go(func() {
			for i := range 20 {
				k := (g*7 + i) % keys
				d, err := l.TakeContext(context.Background(), fmt.Sprint("c", k), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		require.Equal(t, int64(20), admitted[k].Load(), "key c%d", k)
	}
	require.Less(t, rt.Load(), int64(48*20))
}

// TestClusterSlotMoves moves a key's slot to another master while a
// Limiter's client still has the old slot map, in the two steps of a
// resharding: first the slot is migrating, with the key already moved
// (the old master answers ASK), then the slot is the new master's (the old
// one answers MOVED). Decisions from many goroutines follow the key
// wherever it is, and the key admits exactly its limit across the move.
func TestClusterSlotMoves(t *testing.T) {
	cluster := redistest.StartClusterT(t)
	ctx := context.Background()
	l := newLimiter(t, cluster.Client(t), 30, time.Hour, redislimit.WithTimeout(10*time.Second))
	const key = "moving"
	var admitted atomic.Int64
	burst := func(calls int) {
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				d, err := l.TakeContext(ctx, key, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
	}
	burst(10)
	require.Equal(t, int64(10), admitted.Load())

	nodes := map[string]*redis.Client{} // by node ID
	var order []string
	for _, addr := range cluster.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		nodes[id] = c
		order = append(order, id)
	}
	storeKey := l.StoreKey(key)
	slot, err := nodes[order[0]].ClusterKeySlot(ctx, storeKey).Result()
	require.NoError(t, err)
	var src, dst string
	for _, id := range order {
		if n, _ := nodes[id].ClusterCountKeysInSlot(ctx, int(slot)).Result(); n > 0 {
			src = id
		}
	}
	require.NotEmpty(t, src, "the key's master")
	for _, id := range order {
		if id != src {
			dst = id
			break
		}
	}
	dstAddr := nodes[dst].Options().Addr
	host, port, _ := strings.Cut(dstAddr, ":")
	require.NoError(t, nodes[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src).Err())
	require.NoError(t, nodes[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst).Err())
	require.NoError(t, nodes[src].Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", storeKey).Err())
	burst(10) // ASK
	require.Equal(t, int64(20), admitted.Load())

	for _, id := range order {
		require.NoError(t, nodes[id].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst).Err())
	}
	burst(20) // MOVED
	require.Equal(t, int64(30), admitted.Load())
	n, err := nodes[dst].Exists(ctx, storeKey).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the key lives on the new master")
	errs, err := nodes[src].Info(ctx, "errorstats").Result()
	require.NoError(t, err)
	require.Contains(t, errs, "errorstat_ASK:", "the old master sent the client on with ASK")
	require.Contains(t, errs, "errorstat_MOVED:", "and then with MOVED")
}
