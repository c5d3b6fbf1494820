package benchcmp_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// allowFunc is one library's "may this key go ahead now" call.
type allowFunc func(ctx context.Context, key string) (bool, error)

// contender builds one library's limiter of limit per period on client.
type contender struct {
	name string
	new  func(tb testing.TB, client *redis.Client, limit int, period time.Duration) allowFunc
}

var contenders = []contender{
	{"keyrate-SlidingLog", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		l, err := redislimit.New(c, limit, period, redislimit.WithPrefix("keyrate-sl:"))
		if err != nil {
			tb.Fatal(err)
		}
		return l.Allow
	}},
	{"keyrate-SlidingLog-DenyCache", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		l, err := redislimit.New(c, limit, period, redislimit.WithPrefix("keyrate-sld:"), redislimit.WithDenyCache(10_000))
		if err != nil {
			tb.Fatal(err)
		}
		return l.Allow
	}},
	{"keyrate-FixedWindow", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		l, err := redislimit.New(c, limit, period, redislimit.WithPrefix("keyrate-fw:"),
			redislimit.WithAlgorithm(keyrate.FixedWindow))
		if err != nil {
			tb.Fatal(err)
		}
		return l.Allow
	}},
	{"keyrate-GCRA", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		l, err := redislimit.New(c, limit, period, redislimit.WithPrefix("keyrate-gcra:"),
			redislimit.WithAlgorithm(keyrate.GCRA))
		if err != nil {
			tb.Fatal(err)
		}
		return l.Allow
	}},
	{"redis_rate-GCRA", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		l := redis_rate.NewLimiter(c)
		rate := redis_rate.Limit{Rate: limit, Burst: limit, Period: period}
		return func(ctx context.Context, key string) (bool, error) {
			res, err := l.Allow(ctx, key, rate)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}
	}},
	{"ulule-FixedWindow", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule"})
		if err != nil {
			tb.Fatal(err)
		}
		l := limiter.New(store, limiter.Rate{Period: period, Limit: int64(limit)})
		return func(ctx context.Context, key string) (bool, error) {
			lc, err := l.Get(ctx, key)
			if err != nil {
				return false, err
			}
			return !lc.Reached, nil
		}
	}},
}

// TestSameBudget checks that the contenders are configured alike: each
// admits exactly limit of limit+20 immediate calls on a fresh key. With a
// period of an hour, GCRA's emission interval (36s) is far longer than the
// test, so its answer is as exact as the others'.
func TestSameBudget(t *testing.T) {
	addr := redistest.StartT(t).Addr()
	for _, c := range contenders {
		t.Run(c.name, func(t *testing.T) {
			const limit = 100
			allow := c.new(t, newClient(t, addr), limit, time.Hour)
			key := "same-budget-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			admitted := 0
			for range limit + 20 {
				ok, err := allow(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				}
			}
			if admitted != limit {
				t.Fatalf("admitted %d of %d calls, want %d", admitted, limit+20, limit)
			}
		})
	}
}

// benchKeys is the key set of the many-keys workloads.
var benchKeys = func() []string {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}()

// workload is one scenario of BenchmarkAllow.
type workload struct {
	name     string
	parallel bool
	hot      bool // one key, refused past its limit; else benchKeys in turn
	limit    int  // per minute
}

// workloads: Admitted puts 10,000 keys under a limit no run reaches (a
// thousand per minute), so every call is admitted and recorded: the cost
// of a decision that writes. HotKey is one key at 100 per minute, refused
// after its first 100 calls: the cost of turning an abusive client away.
var workloads = []workload{
	{"Serial-Admitted", false, false, 1000},
	{"Serial-HotKey", false, true, 100},
	{"Parallel-Admitted", true, false, 1000},
	{"Parallel-HotKey", true, true, 100},
}

// BenchmarkAllow runs every contender through the same workloads against
// one local redis-server, serial and parallel (16 goroutines per CPU), and
// reports decisions per second, the server's CPU time per decision (see
// redistest.ServerCPU), round trips per decision (counted by a go-redis hook that
// leaves out connection handshakes) and the share of calls admitted, which
// shows what each workload measured.
//
// Three comparisons come out of one run: the sliding log's time per
// admitted decision against redis_rate's (Admitted); the hot key's
// decisions per second with the deny cache against redis_rate's (HotKey,
// keyrate-SlidingLog-DenyCache); and round trips per decision everywhere.
func BenchmarkAllow(b *testing.B) {
	addr := redistest.StartT(b).Addr()
	for _, work := range workloads {
		for _, c := range contenders {
			// key=value names let benchstat put the libraries side by side:
			// benchstat -col /lib results.txt
			b.Run("work="+work.name+"/lib="+c.name, func(b *testing.B) {
				client := newClient(b, addr)
				ctx := context.Background()
				if err := client.FlushDB(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				var rt redistest.RoundTrips
				client.AddHook(&rt)
				allow := c.new(b, client, work.limit, time.Minute)
				if _, err := allow(ctx, "warm-up"); err != nil {
					b.Fatal(err)
				}
				key := func(i int) string {
					if work.hot {
						return "hot"
					}
					return benchKeys[i%len(benchKeys)]
				}
				var admitted atomic.Int64
				before, cpu := rt.Load(), redistest.ServerCPU(b, client)
				b.ResetTimer()
				if work.parallel {
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						for i := 0; pb.Next(); i++ {
							ok, err := allow(ctx, key(i))
							if err != nil {
								b.Error(err)
								return
							}
							if ok {
								admitted.Add(1)
							}
						}
					})
				} else {
					for i := range b.N {
						ok, err := allow(ctx, key(i))
						if err != nil {
							b.Fatal(err)
						}
						if ok {
							admitted.Add(1)
						}
					}
				}
				b.StopTimer()
				b.ReportMetric((redistest.ServerCPU(b, client)-cpu).Seconds()*1e6/float64(b.N), "server-µs/op")
				b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
			})
		}
	}
}

// newClient returns a go-redis client of the server at addr, closed when tb
// ends, with ContextTimeoutEnabled on as redislimit recommends.
func newClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}
