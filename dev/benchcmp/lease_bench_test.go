package benchcmp_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLeaseHotKey decides one hot key from four replicas of eight
// callers each, every replica a client of its own on one local
// redis-server: redislimit with leases of 100ms (lib=keyrate-leases),
// redis_rate, and for the same 32 callers one in-process keyrate.Limiter
// (lib=core). Under limit=unreached every call is admitted; under
// limit=reached (10,000 a second, which the callers pass many times over)
// most are refused. It reports decisions per second, round trips and the
// commands Redis ran (INFO commandstats, those inside scripts included)
// per decision, and the share admitted.
func BenchmarkLeaseHotKey(b *testing.B) {
	const replicas, callers = 4, 8
	addr := redistest.StartT(b).Addr()
	for _, work := range []struct {
		name   string
		limit  int
		window time.Duration
	}{
		{"unreached", 1_000_000_000, time.Minute},
		{"reached", 10_000, time.Second},
	} {
		for _, lib := range []string{"keyrate-leases", "redis_rate", "core"} {
			b.Run("limit="+work.name+"/lib="+lib, func(b *testing.B) {
				ctx := context.Background()
				var rt redistest.RoundTrips
				allows := make([]allowFunc, replicas)
				var admin *redis.Client
				for i := range allows {
					c := newClient(b, addr)
					c.AddHook(&rt)
					if i == 0 {
						admin = c
						if err := c.FlushDB(ctx).Err(); err != nil {
							b.Fatal(err)
						}
					}
					switch lib {
					case "keyrate-leases":
						l, err := redislimit.New(c, work.limit, work.window, redislimit.WithPrefix("lease:"), redislimit.WithLeases(100*time.Millisecond))
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { l.Close() })
						allows[i] = l.Allow
					case "redis_rate":
						l := redis_rate.NewLimiter(c)
						rate := redis_rate.Limit{Rate: work.limit, Burst: work.limit, Period: work.window}
						allows[i] = func(ctx context.Context, key string) (bool, error) {
							res, err := l.Allow(ctx, key, rate)
							return err == nil && res.Allowed > 0, err
						}
					case "core":
						if i == 0 {
							l, err := keyrate.New(work.limit, work.window)
							if err != nil {
								b.Fatal(err)
							}
							b.Cleanup(func() { l.Close() })
							allows[i] = func(_ context.Context, key string) (bool, error) { return l.Allow(key), nil }
						} else {
							allows[i] = allows[0]
						}
					}
				}
				for _, allow := range allows {
					if _, err := allow(ctx, "hot"); err != nil {
						b.Fatal(err)
					}
				}
				calls := func(s map[string]commandStat) (n int64) {
					for name, c := range s {
						if name != "info" {
							n += c.calls
						}
					}
					return n
				}
				trips, cmds := rt.Load(), calls(commandStats(b, admin))
				left := atomic.Int64{}
				left.Store(int64(b.N))
				var admitted atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for r := range replicas {
					for range callers {
						wg.Go(func() {
							n := 0
							for left.Add(-1) >= 0 {
								ok, err := allows[r](ctx, "hot")
								if err != nil {
									b.Error(err)
									return
								}
								if ok {
									n++
								}
							}
							admitted.Add(int64(n))
						})
					}
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64(rt.Load()-trips)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(calls(commandStats(b, admin))-cmds-1)/float64(b.N), "commands/op")
				b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
			})
		}
	}
}
