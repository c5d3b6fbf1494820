package benchcmp_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
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

// memoryEnv turns on TestMemoryPerKey, which takes about four minutes: a
// key under 10 per second reaches 1,000 a day in no less than 100 seconds
// of the server's clock, whatever the library (200 at a resolution of a
// second, which counts each second's calls at its end).
const memoryEnv = "KEYRATE_MEMORY_TABLE"

// memoryConfig is one row of the table: policies per client key, and
// the requests that fill a key: calls of weight 1 up to the longest
// window's limit, or the given weights.
type memoryConfig struct {
	name     string
	policies []keyrate.Policy
	res      time.Duration // keyrate's resolution column: a minute, or the shortest window if shorter
	weights  func() []int  // nil: weight 1, up to the longest window's limit
}

var memoryConfigs = []memoryConfig{
	{"100/min", []keyrate.Policy{{Limit: 100, Window: time.Minute}}, time.Minute, nil},
	{"1,000/hour", []keyrate.Policy{{Limit: 1000, Window: time.Hour}}, time.Minute, nil},
	{"10/s + 1,000/day", []keyrate.Policy{{Name: "second", Limit: 10, Window: time.Second}, {Name: "day", Limit: 1000, Window: 24 * time.Hour}}, time.Second, nil},
	{"10,000/day", []keyrate.Policy{{Limit: 10000, Window: 24 * time.Hour}}, time.Minute, nil},
	// Tokens per minute for a model API: 1,000 requests held, of 850 to
	// 949 tokens each (899,500 in all).
	{"1,000,000 tokens/min, 1,000 requests of ~900", []keyrate.Policy{{Limit: 1_000_000, Window: time.Minute}}, time.Minute, func() []int {
		w := make([]int, 1000)
		for i := range w {
			w[i] = 850 + i*37%100
		}
		return w
	}},
	{"one request of 2^31-1 under 2^31-1/hour", []keyrate.Policy{{Limit: math.MaxInt32, Window: time.Hour}}, time.Minute, func() []int { return []int{math.MaxInt32} }},
}

// fill returns the weights of the calls that fill a key of cfg.
func (cfg memoryConfig) fill() []int {
	if cfg.weights != nil {
		return cfg.weights()
	}
	w := make([]int, cfg.policies[len(cfg.policies)-1].Limit) // the longest window's
	for i := range w {
		w[i] = 1
	}
	return w
}

// memoryLib is one column: a library's limiter for every policy of a
// configuration, its keys under pattern.
type memoryLib struct {
	name    string
	pattern string
	new     func(tb testing.TB, c *redis.Client, cfg memoryConfig) allowNFunc
}

// allowNFunc is one library's "may this key go ahead now with a request
// of weight n" call.
type allowNFunc func(ctx context.Context, key string, n int) (bool, error)

var memoryLibs = []memoryLib{
	{"keyrate sliding log", "kr-log:*", func(tb testing.TB, c *redis.Client, cfg memoryConfig) allowNFunc {
		l, err := redislimit.NewPolicies(c, cfg.policies, redislimit.WithPrefix("kr-log:"), memoryBudget)
		if err != nil {
			tb.Fatal(err)
		}
		return takeN(l)
	}},
	{"keyrate, resolution", "kr-res:*", func(tb testing.TB, c *redis.Client, cfg memoryConfig) allowNFunc {
		l, err := redislimit.NewPolicies(c, cfg.policies, redislimit.WithPrefix("kr-res:"), redislimit.WithResolution(cfg.res), memoryBudget)
		if err != nil {
			tb.Fatal(err)
		}
		return takeN(l)
	}},
	{"redis_rate (GCRA)", "rate:*", func(tb testing.TB, c *redis.Client, cfg memoryConfig) allowNFunc {
		l := redis_rate.NewLimiter(c)
		// One limiter per policy, as redis_rate takes one limit a call,
		// asked shortest window first until one refuses (each records the
		// call it allows, whatever the next one says).
		return func(ctx context.Context, key string, n int) (bool, error) {
			for i, p := range cfg.policies {
				res, err := l.AllowN(ctx, fmt.Sprintf("rr%d:%s", i, key), redis_rate.Limit{Rate: p.Limit, Burst: p.Limit, Period: p.Window}, n)
				if err != nil || res.Allowed == 0 {
					return false, err
				}
			}
			return true, nil
		}
	}},
	{"ulule (fixed window)", "ulule*", func(tb testing.TB, c *redis.Client, cfg memoryConfig) allowNFunc {
		var ls []*limiter.Limiter
		for i, p := range cfg.policies {
			store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: fmt.Sprintf("ulule%d", i)})
			if err != nil {
				tb.Fatal(err)
			}
			ls = append(ls, limiter.New(store, limiter.Rate{Period: p.Window, Limit: int64(p.Limit)}))
		}
		// Asked as redis_rate's are.
		return func(ctx context.Context, key string, n int) (bool, error) {
			for _, l := range ls {
				lc, err := l.Increment(ctx, key, int64(n))
				if err != nil || lc.Reached {
					return false, err
				}
			}
			return true, nil
		}
	}},
}

// memoryBudget is the time budget of the table's keyrate limiters: long,
// as the table measures memory, not time, and its 32 fillers share a
// small machine with the server.
var memoryBudget = redislimit.WithTimeout(10 * time.Second)

// takeN is a redislimit Limiter's allowNFunc.
func takeN(l *redislimit.Limiter) allowNFunc {
	return func(ctx context.Context, key string, n int) (bool, error) {
		d, err := l.TakeContext(ctx, key, n)
		return d.Allowed, err
	}
}

// TestMemoryPerKey fills 8 client keys of every configuration with its
// requests (calls of weight 1 up to the longest window's limit, or the
// row's weights), through each library at once (their own keys on one
// redis-server), and prints what Redis reports
// per client key (MEMORY USAGE of every key the library wrote for it,
// summed) as a Markdown table. A call refused by a shorter window is
// retried 20ms later. Run it with KEYRATE_MEMORY_TABLE=1.
func TestMemoryPerKey(t *testing.T) {
	if os.Getenv(memoryEnv) == "" {
		t.Skipf("set %s=1 to measure memory per key (about four minutes)", memoryEnv)
	}
	const keys = 8
	addr := redistest.StartT(t).Addr()
	ctx := context.Background()
	client := newClient(t, addr)
	var b strings.Builder
	b.WriteString("| policies per key |")
	for _, lib := range memoryLibs {
		b.WriteString(" " + lib.name + " |")
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(memoryLibs)) + "\n")
	for _, cfg := range memoryConfigs {
		if err := client.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		fill := cfg.fill()
		var wg sync.WaitGroup
		for _, lib := range memoryLibs {
			allow := lib.new(t, newClient(t, addr), cfg)
			for k := range keys {
				wg.Go(func() {
					key := fmt.Sprintf("user-%d", k)
					for admitted := 0; admitted < len(fill); {
						ok, err := allow(ctx, key, fill[admitted])
						switch {
						case err != nil:
							t.Error(err)
							return
						case ok:
							admitted++
						default:
							time.Sleep(20 * time.Millisecond) // pacing the fill, not timing anything
						}
					}
				})
			}
		}
		wg.Wait()
		fmt.Fprintf(&b, "| %s |", cfg.name)
		for _, lib := range memoryLibs {
			var total int64
			iter := client.Scan(ctx, 0, lib.pattern, 1000).Iterator()
			for iter.Next(ctx) {
				n, err := client.MemoryUsage(ctx, iter.Val()).Result()
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, " %s |", byteSize(total/keys))
			if lib.name == "keyrate sliding log" && cfg.name == "1,000/hour" && total/keys > 10_000 {
				t.Errorf("keyrate: %d bytes per key holding 1,000 events, want at most 10,000", total/keys)
			}
			if lib.name == "keyrate sliding log" && cfg.weights != nil && total/keys > 16<<10 {
				t.Errorf("keyrate: %d bytes per key of %s, want at most 16 KiB: a request costs one entry whatever its weight", total/keys, cfg.name)
			}
		}
		b.WriteString("\n")
	}
	t.Logf("MEMORY USAGE per client key, %d keys filled to the longest window's limit:\n%s", keys, b.String())
}

// byteSize formats n bytes for the table.
func byteSize(n int64) string {
	if n < 10_000 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KB", float64(n)/1000)
}
