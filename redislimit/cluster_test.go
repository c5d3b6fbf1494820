package redislimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backendtest"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCluster runs the limiter on a real Redis Cluster of three masters,
// through a redis.ClusterClient: the shared behavioural suite, several
// policies per key (one script on one slot), the upgrade from the earlier
// releases' layout (two keys, one slot), refunds made by another client
// than the decision's, the server's clock under every algorithm, replicas
// sharing a key, the deny cache, and keys built to pile onto one slot
// landing on every master.
func TestCluster(t *testing.T) {
	cluster := redistest.StartClusterT(t)
	client := cluster.Client(t)
	ctx := context.Background()

	t.Run("BackendSuite", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) keyrate.Backend {
			l, err := redislimit.New(client, limit, window,
				redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})

	t.Run("BackendPoliciesSuite", func(t *testing.T) { backendtest.RunPolicies(t, newPoliciesBackend(client)) })

	t.Run("TenPerSecondThousandPerDay", func(t *testing.T) { tenPerSecondThousandPerDay(t, client) })

	t.Run("PoliciesConcurrent", func(t *testing.T) {
		testPoliciesConcurrent(t, func(t *testing.T) redis.UniversalClient { return cluster.Client(t) })
	})

	// A refund is one script on the key's slot, from any cluster client.
	t.Run("Refund", func(t *testing.T) {
		testRefundTwoClients(t, func(t *testing.T) redis.UniversalClient { return cluster.Client(t) })
	})

	t.Run("ServerTime", func(t *testing.T) {
		for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
			l := newLimiter(t, client, 3, time.Hour, redislimit.WithAlgorithm(alg))
			for i := range 5 {
				if d := mustTake(t, l, "user", 1); d.Allowed != (i < 3) {
					t.Fatalf("%v, call %d: %+v; want 3 admitted", alg, i, d)
				}
			}
		}
	})

	t.Run("SharedKey", func(t *testing.T) {
		// Four limiters on four cluster clients, 100 calls at once on one
		// key with a limit of 50, half of them with a deny cache.
		const limit = 50
		prefix := uniquePrefix()
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range 4 {
			opts := []redislimit.Option{redislimit.WithPrefix(prefix), redislimit.WithTimeout(5 * time.Second)}
			if i%2 == 0 {
				opts = append(opts, redislimit.WithDenyCache(10))
			}
			l, err := redislimit.New(cluster.Client(t), limit, time.Hour, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for range 25 {
				wg.Go(func() {
					<-ready
					d, err := l.TakeContext(ctx, "shared", 1)
					if err != nil {
						failed.Add(1)
					} else if d.Allowed {
						admitted.Add(1)
					}
				})
			}
		}
		close(ready)
		wg.Wait()
		if failed.Load() != 0 || admitted.Load() != limit {
			t.Fatalf("100 calls on four cluster clients: admitted %d with %d errors, want exactly %d", admitted.Load(), failed.Load(), limit)
		}
	})

	t.Run("HashTagSecret", func(t *testing.T) {
		// Two limiters with one secret, on two cluster clients, share a
		// budget; a limiter with another secret keeps its own.
		prefix := uniquePrefix()
		mk := func(secret []byte) *redislimit.Limiter {
			t.Helper()
			l, err := redislimit.New(cluster.Client(t), 3, time.Hour, redislimit.WithPrefix(prefix), redislimit.WithHashTagSecret(secret))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		a, b := mk(tagSecret), mk(tagSecret)
		for i, l := range []*redislimit.Limiter{a, b, a, b, a} {
			if d := mustTake(t, l, "shared", 1); d.Allowed != (i < 3) {
				t.Fatalf("call %d, alternating between two limiters with one secret: %+v; want 3 admitted in all", i, d)
			}
		}
		other := mk([]byte("another secret of 32 bytes......"))
		if d := mustTake(t, other, "shared", 1); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("under another secret: %+v, want a budget of its own", d)
		}

		// 300 keys aimed, with the unkeyed tag, at the slots of one master
		// (the lowest third: redis-cli gives one master slots 0-5460) land
		// there without a secret, and on every master with one.
		keys := aimedKeys(t, 300, func(slot int) bool { return slot <= 5460 })
		for _, secret := range [][]byte{nil, tagSecret} {
			var opts []redislimit.Option
			if secret != nil {
				opts = append(opts, redislimit.WithHashTagSecret(secret))
			}
			prefix := uniquePrefix()
			l, err := redislimit.New(client, 1, time.Hour, append(opts, redislimit.WithPrefix(prefix))...)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				mustTake(t, l, k, 1)
			}
			perNode := map[string]int{}
			var mu sync.Mutex
			err = client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				n := 0
				iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
				for iter.Next(ctx) {
					n++
				}
				mu.Lock()
				perNode[node.Options().Addr] = n
				mu.Unlock()
				return iter.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
			busiest := 0
			for _, n := range perNode {
				busiest = max(busiest, n)
			}
			if secret == nil && busiest != len(keys) {
				t.Fatalf("aimed keys without a secret, per master: %v; want all %d on one (the aim did not work)", perNode, len(keys))
			}
			if secret != nil && (len(perNode) != 3 || busiest > len(keys)/2) {
				t.Errorf("aimed keys with a secret, per master: %v; want them spread over 3", perNode)
			}
		}
	})

	t.Run("Slots", func(t *testing.T) {
		l := newLimiter(t, client, 1, time.Hour)
		perNode := map[string]int{}
		var mu sync.Mutex
		const keys = 300
		for i := range keys {
			key := fmt.Sprintf("a}%d", i)
			mustTake(t, l, key, 1)
			if i < 20 {
				slot, err := client.ClusterKeySlot(ctx, l.StoreKey(key)).Result()
				if err != nil || int(slot) != keySlot(l.StoreKey(key)) {
					t.Fatalf("CLUSTER KEYSLOT %q = %d, %v; the tests compute %d", l.StoreKey(key), slot, err, keySlot(l.StoreKey(key)))
				}
			}
		}
		err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			n, err := node.DBSize(ctx).Result()
			mu.Lock()
			perNode[node.Options().Addr] = int(n)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(perNode) != 3 {
			t.Fatalf("masters: %v, want 3", perNode)
		}
		for addr, n := range perNode {
			// A master holds a third of the slots: about 100 of the 300 keys
			// plus other subtests' keys, never none.
			if n < keys/6 {
				t.Errorf("master %s holds %d keys after %d keys \"a}<n>\" (per master: %v), want them spread", addr, n, keys, perNode)
			}
		}
	})
}
