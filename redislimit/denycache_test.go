package redislimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// countedLimiter returns a Limiter on its own client, whose round trips rt
// counts.
func countedLimiter(t *testing.T, srv *redistest.Server, prefix string, limit int, window time.Duration, opts ...redislimit.Option) (*redislimit.Limiter, *redistest.RoundTrips) {
	t.Helper()
	client := srv.Client(t)
	rt := new(redistest.RoundTrips)
	client.AddHook(rt)
	l, err := redislimit.New(client, limit, window, append([]redislimit.Option{redislimit.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mustTake(t, l, "warm-up", 0) // connects and loads the script, recording nothing
	return l, rt
}

// TestDenyCache walks a key past its limit with the deny cache on, under
// a manual clock: after Redis's refusal the same request is refused with
// no round trip, with exactly the Decision Redis gives at that instant (a
// twin limiter without the cache asks Redis each time to compare), until
// the oldest event leaves, when Redis is asked again and admits. The
// maximum hold is set past the window, so that the refusal's own hold is
// what is traced (TestDenyCacheLostState traces the bound).
func TestDenyCache(t *testing.T) {
	srv := redistest.Shared(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	prefix := uniquePrefix()
	const limit, window = 3, 10 * time.Second
	l, rt := countedLimiter(t, srv, prefix, limit, window, redislimit.WithDenyCache(100),
		redislimit.WithDenyCacheMaxHold(time.Hour), redislimit.WithClock(clock))
	twin, _ := countedLimiter(t, srv, prefix, limit, window, redislimit.WithClock(clock))

	take := func(n int, wantTrips int64) keyrate.Decision {
		t.Helper()
		before := rt.Load()
		d := mustTake(t, l, "hot", n)
		if got := rt.Load() - before; got != wantTrips {
			t.Fatalf("at +%v Take(%d) = %+v took %d round trips, want %d", clock.Now().Sub(start), n, d, got, wantTrips)
		}
		return d
	}
	sameAsRedis := func(d keyrate.Decision, n int) {
		t.Helper()
		if want := mustTake(t, twin, "hot", n); d != want {
			t.Fatalf("at +%v: cached %+v\nRedis says %+v", clock.Now().Sub(start), d, want)
		}
	}

	take(1, 1) // +0s
	clock.Advance(time.Second)
	take(1, 1) // +1s
	clock.Advance(time.Second)
	take(1, 1) // +2s: full until the event at +0s leaves at +10s
	clock.Advance(time.Second)
	first := take(1, 1)
	if first.Allowed || first.RetryAfter != 7*time.Second {
		t.Fatalf("over the limit at +3s: %+v, want refused for 7s", first)
	}
	for range 100 {
		if d := take(1, 0); d != first {
			t.Fatalf("cached refusal at the same instant: %+v, want %+v", d, first)
		}
	}
	for _, at := range []time.Duration{4 * time.Second, 9500 * time.Millisecond, 10*time.Second - time.Microsecond} {
		clock.Set(start.Add(at))
		d := take(1, 0)
		if d.Allowed || d.RetryAfter != 10*time.Second-at {
			t.Fatalf("cached refusal at +%v: %+v, want RetryAfter %v", at, d, 10*time.Second-at)
		}
		sameAsRedis(d, 1)
	}
	take(2, 1) // another weight: Redis decides, and the cache now holds weight 2
	take(2, 0)
	take(1, 1)

	clock.Set(start.Add(10 * time.Second))
	if d := take(1, 1); !d.Allowed {
		t.Fatalf("at +10s, when the oldest event has left: %+v, want admitted by Redis", d)
	}
	if d := take(1, 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("at +10s, full again: %+v, want refused for 1s", d)
	}
	take(1, 0)
}

// TestDenyCacheServerTime runs the cache on the production path, where
// Redis decides on its own TIME: once Redis refuses, further refusals cost
// no round trip, and their RetryAfter counts down from Redis's, never up.
// The maximum hold is an hour, so that a stall of the test machine cannot
// send a refusal to Redis.
func TestDenyCacheServerTime(t *testing.T) {
	srv := redistest.Shared(t)
	l, rt := countedLimiter(t, srv, uniquePrefix(), 2, time.Hour, redislimit.WithDenyCache(10), redislimit.WithDenyCacheMaxHold(time.Hour))
	mustTake(t, l, "k", 1)
	mustTake(t, l, "k", 1)
	first := mustTake(t, l, "k", 1)
	if first.Allowed || first.RetryAfter <= 0 {
		t.Fatalf("over the limit: %+v", first)
	}
	before := rt.Load()
	prev := first
	for i := range 50 {
		d := mustTake(t, l, "k", 1)
		if d.Allowed || d.RetryAfter > prev.RetryAfter || d.RetryAfter < first.RetryAfter-time.Minute ||
			d.RefillAfter != d.RetryAfter || d.Remaining != 0 || d.Limit != 2 {
			t.Fatalf("cached refusal %d: %+v after %+v", i, d, prev)
		}
		prev = d
	}
	if got := rt.Load() - before; got != 0 {
		t.Fatalf("50 refusals after Redis's took %d round trips, want 0", got)
	}
	if d := mustTake(t, l, "other", 1); !d.Allowed || rt.Load()-before != 1 {
		t.Fatalf("another key: %+v after %d round trips, want admitted by Redis in 1", d, rt.Load()-before)
	}
}

// TestDenyCacheReplicas runs two limiters with deny caches, each on its
// own client, as two replicas sharing one Redis, under concurrent load
// over several windows: each window admits exactly the limit, and the
// caches took refusals off Redis.
func TestDenyCacheReplicas(t *testing.T) {
	srv := redistest.Shared(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	prefix := uniquePrefix()
	const limit, window, windows, workers, calls = 7, 10 * time.Second, 5, 8, 40
	var replicas []*redislimit.Limiter
	var trips []*redistest.RoundTrips
	for range 2 {
		l, rt := countedLimiter(t, srv, prefix, limit, window,
			redislimit.WithDenyCache(16), redislimit.WithClock(clock), redislimit.WithTimeout(5*time.Second))
		replicas, trips = append(replicas, l), append(trips, rt)
	}
	for w := range windows {
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range workers {
			l := replicas[i%2]
			wg.Go(func() {
				<-ready
				for range calls {
					d, err := l.TakeContext(context.Background(), "shared", 1)
					if err != nil {
						failed.Add(1)
					} else if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		close(ready)
		wg.Wait()
		if failed.Load() != 0 || admitted.Load() != limit {
			t.Fatalf("window %d: %d calls on two replicas admitted %d with %d errors, want exactly %d",
				w, workers*calls, admitted.Load(), failed.Load(), limit)
		}
		clock.Advance(window)
	}
	if total := trips[0].Load() + trips[1].Load(); total >= windows*workers*calls {
		t.Fatalf("%d calls took %d round trips: the deny caches refused nothing", windows*workers*calls, total)
	}
}

func TestDenyCacheConfig(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	for _, n := range []int{0, -1} {
		if _, err := redislimit.New(client, 1, time.Second, redislimit.WithDenyCache(n)); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("WithDenyCache(%d): %v, want keyrate.ErrConfig", n, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := redislimit.New(client, 1, time.Second, redislimit.WithDenyCache(10), redislimit.WithDenyCacheMaxHold(d)); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("WithDenyCacheMaxHold(%v): %v, want keyrate.ErrConfig", d, err)
		}
	}
	if _, err := redislimit.New(client, 1, time.Second, redislimit.WithDenyCacheMaxHold(time.Second)); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("WithDenyCacheMaxHold without WithDenyCache: %v, want keyrate.ErrConfig", err)
	}
}

// TestDenyCachePolicies runs the cache under 3 per second and 5 per minute
// with a manual clock, against a twin limiter without the cache that asks
// Redis each time. A refusal by the minute is held only until the second's
// one event leaves its window, the first change to any policy's numbers;
// asked again then, Redis refuses with the second's window empty, and that
// refusal is held until the minute's oldest event leaves, when Redis
// admits. Every cached Decision is Redis's, every policy's part included.
// The maximum hold is set past the minute, as in TestDenyCache.
func TestDenyCachePolicies(t *testing.T) {
	srv := redistest.Shared(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	policies := []keyrate.Policy{{Name: "second", Limit: 3, Window: time.Second}, {Name: "minute", Limit: 5, Window: time.Minute}}
	prefix := uniquePrefix()
	limiter := func(opts ...redislimit.Option) (*redislimit.Limiter, *redistest.RoundTrips) {
		client := srv.Client(t)
		rt := new(redistest.RoundTrips)
		client.AddHook(rt)
		l, err := redislimit.NewPolicies(client, policies, append(opts, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))...)
		if err != nil {
			t.Fatal(err)
		}
		mustTake(t, l, "warm-up", 0)
		return l, rt
	}
	l, rt := limiter(redislimit.WithDenyCache(100), redislimit.WithDenyCacheMaxHold(time.Hour))
	twin, _ := limiter()

	const ms = time.Millisecond
	for _, step := range []struct {
		at      time.Duration
		allowed bool
		trips   int64
	}{
		{0, true, 1}, {10000 * ms, true, 1}, {20000 * ms, true, 1}, {30000 * ms, true, 1}, {40500 * ms, true, 1},
		{40900 * ms, false, 1}, // the minute is full; the second's event leaves at 41.5s
		{40900 * ms, false, 0},
		{41499 * ms, false, 0},
		{41500 * ms, false, 1}, // the second's window is empty now
		{50000 * ms, false, 0},
		{60*time.Second - time.Microsecond, false, 0},
		{60 * time.Second, true, 1}, // the event of 0s has left the minute
	} {
		clock.Set(start.Add(step.at))
		before := rt.Load()
		d := mustTake(t, l, "hot", 1)
		if got := rt.Load() - before; d.Allowed != step.allowed || got != step.trips {
			t.Fatalf("at +%v: %+v after %d round trips; want allowed %v after %d", step.at, d, got, step.allowed, step.trips)
		}
		if !d.Allowed && step.trips == 0 {
			if want := mustTake(t, twin, "hot", 1); d != want {
				t.Fatalf("at +%v: cached %+v\nRedis says %+v", step.at, d, want)
			}
		}
	}
}

// TestDenyCacheTiers: a refusal cached for a key is not used once the key
// is under other policies, whether SetTier changed its tier or the key
// moved to another tier.
func TestDenyCacheTiers(t *testing.T) {
	srv := redistest.Shared(t)
	var mu sync.Mutex
	plan := map[string]string{}
	tierOf := func(key string) string {
		mu.Lock()
		defer mu.Unlock()
		return plan[key]
	}
	client := srv.Client(t)
	rt := new(redistest.RoundTrips)
	client.AddHook(rt)
	l, err := redislimit.New(client, 2, time.Hour, redislimit.WithPrefix(uniquePrefix()),
		redislimit.WithDenyCache(10), redislimit.WithDenyCacheMaxHold(time.Hour), // no lapse on the system clock mid-test
		redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{"pro": {{Limit: 4, Window: time.Hour}}}))
	if err != nil {
		t.Fatal(err)
	}
	fill := func(key string, want int) {
		t.Helper()
		for i := range want {
			if d := mustTake(t, l, key, 1); !d.Allowed {
				t.Fatalf("%s, request %d: %+v", key, i, d)
			}
		}
		mustTake(t, l, key, 1) // refused by Redis, and cached
		before := rt.Load()
		if d := mustTake(t, l, key, 1); d.Allowed || rt.Load() != before {
			t.Fatalf("%s: %+v after %d round trips, want a cached refusal", key, d, rt.Load()-before)
		}
	}
	fill("a", 2)
	mu.Lock()
	plan["a"] = "pro"
	mu.Unlock()
	fill("a", 2) // moved to pro: two more, from Redis
	if err := l.SetTier("pro", []keyrate.Policy{{Limit: 5, Window: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	fill("a", 1) // pro raised: one more
}

// TestDenyCacheLostState: Redis forgets a key it had refused, by FLUSHALL
// (as after a restart without persistence or a failover that lost the
// writes) or by a DEL of the key. The cache may keep refusing it only up
// to the maximum hold, 1s by default: at +1s Redis is asked again and
// admits, where the refusal itself would have stood for a day. The manual
// clock drives the script and the cache alike.
func TestDenyCacheLostState(t *testing.T) {
	for _, c := range []struct {
		name string
		hold time.Duration // 0: the default
		lose func(ctx context.Context, client *redis.Client, storeKey string) error
	}{
		{"FLUSHALL", 0, func(ctx context.Context, client *redis.Client, _ string) error {
			return client.FlushAll(ctx).Err()
		}},
		{"DEL", 0, func(ctx context.Context, client *redis.Client, k string) error {
			return client.Del(ctx, k).Err()
		}},
		{"DEL/MaxHold250ms", 250 * time.Millisecond, func(ctx context.Context, client *redis.Client, k string) error {
			return client.Del(ctx, k).Err()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			if c.name == "FLUSHALL" {
				srv = redistest.StartT(t) // FLUSHALL must not touch the other tests' keys
			}
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := keyrate.NewManualClock(start)
			opts := []redislimit.Option{redislimit.WithDenyCache(10), redislimit.WithClock(clock)}
			maxHold := time.Second // the default hold
			if c.hold > 0 {
				maxHold = c.hold
				opts = append(opts, redislimit.WithDenyCacheMaxHold(c.hold))
			}
			l, rt := countedLimiter(t, srv, uniquePrefix(), 2, 24*time.Hour, opts...)
			take := func(wantAllowed bool, wantTrips int64) {
				t.Helper()
				before := rt.Load()
				d := mustTake(t, l, "api-key", 1)
				if got := rt.Load() - before; d.Allowed != wantAllowed || got != wantTrips {
					t.Fatalf("at +%v: %+v after %d round trips; want allowed %v after %d",
						clock.Now().Sub(start), d, got, wantAllowed, wantTrips)
				}
			}
			take(true, 1)
			take(true, 1)
			take(false, 1) // Redis refuses for a day; the cache holds it
			take(false, 0)

			if err := c.lose(context.Background(), srv.Client(t), l.StoreKey("api-key")); err != nil {
				t.Fatal(err)
			}
			clock.Advance(maxHold - time.Microsecond)
			take(false, 0) // within the bound: still the cached refusal
			clock.Advance(time.Microsecond)
			take(true, 1) // Redis, which has forgotten the key, admits
			take(true, 1)
			take(false, 1)
		})
	}
}
