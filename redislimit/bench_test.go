package redislimit_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// benchKeys is the key set of the many-keys workloads: enough distinct keys
// that the server works on many logs, few enough calls per key (at
// 100 per minute) that most decisions admit and record.
var benchKeys = func() []string {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkTake measures decisions per second against the test's local
// redis-server, serial and with many calls in flight, on many keys and on
// one hot key (which, past its limit, takes the refusal path), and reports
// round trips per decision, counted by a go-redis hook. The clients have
// ContextTimeoutEnabled set, as recommended; the Goroutine cases use a
// client without it, to show what enforcing the budget in Take costs, and
// the DenyCache cases refuse the hot key locally once Redis has (asking
// Redis again once a second, the default maximum hold), and the
// TwoPolicies cases add a day's limit to the minute's.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Shared(b)
	type bench struct {
		alg            keyrate.Algorithm
		parallel, hot  bool
		ctxTimeoutsOff bool
		deny           bool
		twoPolicies    bool // 100 per minute and 1,000 per day
	}
	var cases []bench
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		for _, parallel := range []bool{false, true} {
			for _, hot := range []bool{false, true} {
				cases = append(cases, bench{alg: alg, parallel: parallel, hot: hot})
			}
		}
	}
	cases = append(cases,
		bench{alg: keyrate.SlidingLog, hot: true, deny: true},
		bench{alg: keyrate.SlidingLog, parallel: true, hot: true, deny: true},
		bench{alg: keyrate.SlidingLog, twoPolicies: true},
		bench{alg: keyrate.SlidingLog, parallel: true, twoPolicies: true},
		bench{alg: keyrate.SlidingLog, parallel: true, hot: true, twoPolicies: true},
		bench{alg: keyrate.SlidingLog, ctxTimeoutsOff: true},
		bench{alg: keyrate.SlidingLog, parallel: true, ctxTimeoutsOff: true})
	for _, c := range cases {
		name := c.alg.String() + "/" + map[bool]string{false: "Serial", true: "Parallel"}[c.parallel] +
			"/" + map[bool]string{false: "ManyKeys", true: "HotKey"}[c.hot]
		if c.ctxTimeoutsOff {
			name += "/Goroutine"
		}
		if c.deny {
			name += "/DenyCache"
		}
		if c.twoPolicies {
			name += "/TwoPolicies"
		}
		b.Run(name, func(b *testing.B) {
			client := srv.Client(b)
			if c.ctxTimeoutsOff {
				client = redis.NewClient(&redis.Options{Addr: srv.Addr()})
				b.Cleanup(func() { client.Close() })
			}
			ctx := context.Background()
			if err := client.FlushDB(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			var rt redistest.RoundTrips
			client.AddHook(&rt)
			opts := []redislimit.Option{redislimit.WithAlgorithm(c.alg)}
			if c.deny {
				opts = append(opts, redislimit.WithDenyCache(1000))
			}
			policies := []keyrate.Policy{{Name: "minute", Limit: 100, Window: time.Minute}}
			if c.twoPolicies {
				policies = append(policies, keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour})
			}
			l, err := redislimit.NewPolicies(client, policies, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.TakeContext(ctx, "warm-up", 1); err != nil {
				b.Fatal(err)
			}
			key := func(i int) string {
				if c.hot {
					return "hot"
				}
				return benchKeys[i%len(benchKeys)]
			}
			before := rt.Load()
			b.ResetTimer()
			if c.parallel {
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						if _, err := l.TakeContext(ctx, key(i), 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for i := range b.N {
					if _, err := l.TakeContext(ctx, key(i), 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkBatchShape compares the ways concurrent decisions can share
// round trips, with 32 and 128 callers (16 and 64 per core) on distinct
// keys, every call admitted: one script run deciding every request of a
// batch, with two batches in flight at once (Run, what a Limiter does) or
// one (OneFlight), and a pipeline of one script run per request
// (Pipeline). It reports decisions per second, the server's CPU time per
// decision (INFO cpu) and round trips per decision.
func BenchmarkBatchShape(b *testing.B) {
	srv := redistest.Shared(b)
	for _, callers := range []int{32, 128} {
		for _, shape := range []string{"Run", "OneFlight", "Pipeline"} {
			b.Run(fmt.Sprintf("callers=%d/shape=%s", callers, shape), func(b *testing.B) {
				client := srv.Client(b)
				ctx := context.Background()
				if err := client.FlushDB(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				var rt redistest.RoundTrips
				client.AddHook(&rt)
				l, err := redislimit.New(client, 1_000_000_000, time.Minute, redislimit.WithTimeout(5*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				switch shape {
				case "Pipeline":
					redislimit.SendEachRequestAlone(l)
				case "OneFlight":
					defer redislimit.SetMaxFlights(redislimit.SetMaxFlights(1))
				}
				if _, err := l.TakeContext(ctx, "warm-up", 1); err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				before, cpu := rt.Load(), redistest.ServerCPU(b, client)
				b.ResetTimer()
				b.SetParallelism(callers / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					keys := benchKeys[next.Add(1)%100*100:][:100]
					for i := 0; pb.Next(); i++ {
						if d, err := l.TakeContext(ctx, keys[i%len(keys)], 1); err != nil || !d.Allowed {
							b.Errorf("%+v, %v", d, err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric((redistest.ServerCPU(b, client)-cpu).Seconds()*1e6/float64(b.N), "server-µs/op")
				b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}
