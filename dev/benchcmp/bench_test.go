package benchcmp_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keyrate/keyrate/dev/internal/redisserver"
	"github.com/keyrate/keyrate/redislimit"
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
			redislimit.WithAlgorithm(redislimit.FixedWindow))
		if err != nil {
			tb.Fatal(err)
		}
		return l.Allow
	}},
	{"keyrate-GCRA", func(tb testing.TB, c *redis.Client, limit int, period time.Duration) allowFunc {
		l, err := redislimit.New(c, limit, period, redislimit.WithPrefix("keyrate-gcra:"),
			redislimit.WithAlgorithm(redislimit.GCRA))
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
	addr := redisserver.Start(t)
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
// serverCPU), round trips per decision (counted by a go-redis hook that
// leaves out connection handshakes) and the share of calls admitted, which
// shows what each workload measured.
//
// Three comparisons come out of one run: the sliding log's time per
// admitted decision against redis_rate's (Admitted); the hot key's
// decisions per second with the deny cache against redis_rate's (HotKey,
// keyrate-SlidingLog-DenyCache); and round trips per decision everywhere.
func BenchmarkAllow(b *testing.B) {
	addr := redisserver.Start(b)
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
				var rt roundTrips
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
				before, cpu := rt.Load(), serverCPU(b, client)
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
				b.ReportMetric((serverCPU(b, client)-cpu).Seconds()*1e6/float64(b.N), "server-µs/op")
				b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
			})
		}
	}
}

// serverCPU returns the CPU time the Redis server has used since it
// started, user and system (INFO cpu): its difference over a run, per
// decision, is what a decision costs the server, which bounds how many a
// server can decide per second, and which the client's wall time, shared
// with the benchmark's own goroutines on a small machine, blurs.
func serverCPU(tb testing.TB, client *redis.Client) time.Duration {
	info, err := client.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			s, err := strconv.ParseFloat(value, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += time.Duration(s * float64(time.Second))
		}
	}
	return total
}

// newClient returns a go-redis client of the server at addr, closed when tb
// ends, with ContextTimeoutEnabled on as redislimit recommends.
func newClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// roundTrips is a go-redis hook that counts round trips: each command sent
// on its own is one, and so is each pipeline. The handshake go-redis sends
// on every new connection (HELLO, CLIENT SETINFO, AUTH, SELECT) is left out,
// being a cost of the pool, not of any decision.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) Load() int64 { return r.n.Load() }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isHandshake(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !isHandshake(c) {
				r.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func isHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly":
		return true
	case "client":
		args := cmd.Args()
		return len(args) > 1 && strings.EqualFold(fmt.Sprint(args[1]), "setinfo")
	}
	return false
}
