package redislimit_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

var _ middleware.Concurrency = (*redislimit.Concurrency)(nil)

func newSlots(t *testing.T, client redis.UniversalClient, limit int, ttl time.Duration, opts ...redislimit.Option) *redislimit.Concurrency {
	t.Helper()
	c, err := redislimit.NewConcurrency(client, limit, ttl, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Two replicas share a limit of 3: twenty goroutines, ten on each, take
// and give back slots again and again, waiting or not. No more than 3 are
// ever held at once, and once all are back the key is gone from Redis and
// neither replica keeps a renewal goroutine.
func TestConcurrencySharedLimit(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	prefix := uniquePrefix()
	const goroutines, rounds, limit = 20, 15, 3
	replicas := []*redislimit.Concurrency{
		newSlots(t, client, limit, time.Second, redislimit.WithPrefix(prefix)),
		newSlots(t, client, limit, time.Second, redislimit.WithPrefix(prefix)),
	}
	var inside, most, taken, refused atomic.Int64
	hold := func(release func()) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond) // a request's work, so that slots are contended
		taken.Add(1)
		inside.Add(-1)
		release()
		release()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		c := replicas[g%2]
		wg.Go(func() {
			for i := range rounds {
				if (g+i)%2 == 0 {
					release, err := c.Acquire(context.Background(), "k")
					if assert.NoError(t, err) {
						hold(release)
					}
					continue
				}
				release, ok, err := c.TryAcquire(context.Background(), "k")
				switch {
				case !assert.NoError(t, err):
				case ok:
					hold(release)
				default:
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(limit), "slots held at once")
	assert.Positive(t, refused.Load(), "the limit was reached")
	assert.Equal(t, int64(goroutines*rounds), taken.Load()+refused.Load())
	n, err := client.Exists(context.Background(), replicas[0].SlotKey("k")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no key is left in Redis for an idle key")
	for _, c := range replicas {
		require.Eventually(t, func() bool { return !c.Renewing() }, 5*time.Second, 10*time.Millisecond,
			"the renewal goroutine stops once no lease is held")
	}
}

// Taking a slot is one round trip, and so is giving it back; giving it
// back twice costs nothing more and frees nothing more.
func TestConcurrencyRoundTrips(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	var trips redistest.RoundTrips
	client.AddHook(&trips)
	c := newSlots(t, client, 1, time.Minute, redislimit.WithPrefix(uniquePrefix()))
	ctx := context.Background()
	c.TryAcquire(ctx, "warm") // loads the script, once
	before := trips.Load()
	release, ok, err := c.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, int64(1), trips.Load()-before, "acquire")
	_, ok, err = c.TryAcquire(ctx, "k")
	require.NoError(t, err)
	assert.False(t, ok)
	before = trips.Load()
	release()
	release()
	assert.Equal(t, int64(1), trips.Load()-before, "release, twice")
	r, ok, _ := c.TryAcquire(ctx, "k")
	require.True(t, ok)
	_, ok, _ = c.TryAcquire(ctx, "k")
	assert.False(t, ok, "the second release gave back nothing")
	r()
}

// A lease lasts its time to live unless renewed, on the Redis clock (a
// manual one here): a replica that stops renewing loses its slots to the
// others once its leases lapse, and one that renews keeps them.
func TestConcurrencyLeasesLapseUnlessRenewed(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	prefix := uniquePrefix()
	const ttl = time.Minute
	a := newSlots(t, client, 2, ttl, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	b := newSlots(t, client, 2, ttl, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	ctx := context.Background()
	for range 2 {
		_, ok, err := a.TryAcquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, ok)
	}
	tryB := func() bool {
		t.Helper()
		r, ok, err := b.TryAcquire(ctx, "k")
		require.NoError(t, err)
		if ok {
			r()
		}
		return ok
	}
	clock.Advance(ttl - time.Microsecond)
	assert.False(t, tryB(), "a's leases are live to the end of their time to live")
	require.True(t, a.RenewNow())
	clock.Advance(ttl - time.Microsecond)
	assert.False(t, tryB(), "renewed, they last another time to live")
	clock.Advance(time.Microsecond)
	assert.True(t, tryB(), "unrenewed, they lapse, and b gets a slot")
	r1, ok, _ := b.TryAcquire(ctx, "k")
	assert.True(t, ok)
	_, ok, _ = b.TryAcquire(ctx, "k")
	assert.True(t, ok, "both of a's slots came back")
	require.True(t, a.RenewNow())
	r1()
	_, ok, _ = b.TryAcquire(ctx, "k")
	assert.True(t, ok, "a renewal put no lapsed lease back: b's one freed slot is free")
}

// Two replicas on one prefix, of times to live of 6s and 600ms (a rolling
// change of the setting), hold a slot each under a limit of 2. The key
// must outlive the longer lease, whichever replica wrote it last: expiring
// it at the shorter time to live would drop the other's live lease with
// it, and a third request would get a slot under the limit of 2.
func TestConcurrencyTimesToLiveShareAKey(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	prefix := uniquePrefix()
	long := newSlots(t, client, 2, 6*time.Second, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	short := newSlots(t, client, 2, 600*time.Millisecond, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	ctx := context.Background()
	key := long.SlotKey("k")
	ttl := func() time.Duration {
		t.Helper()
		d, err := client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		return d
	}
	_, ok, err := long.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = short.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Greater(t, ttl(), 5*time.Second, "after the 600ms replica's acquire, the key lives as long as the 6s lease")
	require.True(t, short.RenewNow())
	assert.Greater(t, ttl(), 5*time.Second, "and after its renewal")

	clock.Advance(time.Second) // the 600ms lease lapses; the 6s one is live
	_, ok, err = short.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok, "the lapsed lease's slot")
	assert.Greater(t, ttl(), 4*time.Second, "the 6s lease has 5s to go")
	_, ok, err = short.TryAcquire(ctx, "k")
	require.NoError(t, err)
	assert.False(t, ok, "two live leases under a limit of 2")

	require.True(t, long.RenewNow())
	assert.Greater(t, ttl(), 5*time.Second, "a renewal of the longer lease pushes the key's expiry back")
}

// Acquire waits for a slot another replica gives back, and gives up at its
// context's end.
func TestConcurrencyAcquireWaits(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	prefix := uniquePrefix()
	a := newSlots(t, client, 1, time.Minute, redislimit.WithPrefix(prefix))
	b := newSlots(t, client, 1, time.Minute, redislimit.WithPrefix(prefix))
	ctx := context.Background()
	release, ok, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)

	got := make(chan error, 1)
	go func() {
		r, err := b.Acquire(ctx, "k")
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	require.NoError(t, <-got, "the waiter got the slot given back")

	release, _, _ = a.TryAcquire(ctx, "k")
	defer release()
	start := time.Now()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(short, "k")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

	cancelled, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = b.Acquire(cancelled, "k")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = b.Acquire(cancelled, "k")
	assert.ErrorIs(t, err, context.Canceled, "a done context takes no slot, even a free one")
}

func TestConcurrencyTiers(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	plan := func(id string) string {
		if strings.HasPrefix(id, "pro-") {
			return "pro"
		}
		return ""
	}
	c := newSlots(t, client, 1, time.Minute, redislimit.WithPrefix(uniquePrefix()),
		redislimit.WithTiers(plan, map[string][]keyrate.Policy{"pro": {{Limit: 3}}}))
	ctx := backend.ContextWithIdentity(context.Background(), "pro-1")
	for i := range 4 {
		_, limit, err := c.AcquireSlot(ctx, "route\x00x-api-key=pro-1", false)
		require.NoError(t, err)
		assert.Equal(t, 3, limit, "slot %d", i)
	}
	r, limit, err := c.AcquireSlot(ctx, "route\x00x-api-key=pro-1", false)
	require.NoError(t, err)
	assert.Nil(t, r, "the pro plan's 3 are held")
	assert.Equal(t, 3, limit)
	_, ok, _ := c.TryAcquire(context.Background(), "free-1")
	assert.True(t, ok)
	_, ok, _ = c.TryAcquire(context.Background(), "free-1")
	assert.False(t, ok)
}

func TestConcurrencyClose(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	c, err := redislimit.NewConcurrency(client, 1, time.Minute, redislimit.WithPrefix(uniquePrefix()))
	require.NoError(t, err)
	ctx := context.Background()
	release, _, err := c.TryAcquire(ctx, "k")
	require.NoError(t, err)
	got := make(chan error)
	go func() {
		_, err := c.Acquire(ctx, "k")
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it wait; it returns ErrClosed either way
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	assert.ErrorIs(t, <-got, keyrate.ErrClosed)
	assert.False(t, c.Renewing())
	_, _, err = c.TryAcquire(ctx, "j")
	assert.ErrorIs(t, err, keyrate.ErrClosed, "a lease taken now would not be renewed")
	release()
	n, _ := client.Exists(ctx, c.SlotKey("k")).Result()
	assert.Zero(t, n, "giving back still works after Close")
}

func TestConcurrencyErrors(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	c := newSlots(t, client, 1, time.Minute, redislimit.WithPrefix(uniquePrefix()))
	_, _, err := c.TryAcquire(context.Background(), "")
	assert.ErrorIs(t, err, keyrate.ErrInvalidKey)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	down := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer down.Close()
	d := newSlots(t, down, 1, time.Minute, redislimit.WithTimeout(100*time.Millisecond))
	_, _, err = d.TryAcquire(context.Background(), "secret-api-key")
	assert.ErrorIs(t, err, keyrate.ErrUnavailable)
	assert.NotContains(t, err.Error(), "secret-api-key", "errors never name the key")
}

func TestNewConcurrencyErrors(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	plan := func(string) string { return "" }
	for name, tc := range map[string]struct {
		client redis.UniversalClient
		limit  int
		ttl    time.Duration
		opts   []redislimit.Option
	}{
		"nil client":              {nil, 1, time.Minute, nil},
		"limit 0":                 {client, 0, time.Minute, nil},
		"ttl 0":                   {client, 1, 0, nil},
		"ttl under twice budget":  {client, 1, 400 * time.Millisecond, nil},
		"ttl in nanoseconds":      {client, 1, time.Minute + 1, nil},
		"WithAlgorithm":           {client, 1, time.Minute, []redislimit.Option{redislimit.WithAlgorithm(keyrate.SlidingLog)}},
		"WithResolution":          {client, 1, time.Minute, []redislimit.Option{redislimit.WithResolution(time.Second)}},
		"WithDenyCache":           {client, 1, time.Minute, []redislimit.Option{redislimit.WithDenyCache(10)}},
		"WithLocalFallback":       {client, 1, time.Minute, []redislimit.Option{redislimit.WithLocalFallback(0.5)}},
		"WithHashTagFunc":         {client, 1, time.Minute, []redislimit.Option{redislimit.WithHashTagFunc(nil)}},
		"tier with a window":      {client, 1, time.Minute, []redislimit.Option{redislimit.WithTiers(plan, map[string][]keyrate.Policy{"pro": {{Limit: 2, Window: time.Second}}})}},
		"tier with a calendar":    {client, 1, time.Minute, []redislimit.Option{redislimit.WithTiers(plan, map[string][]keyrate.Policy{"pro": {{Limit: 2, Calendar: keyrate.Daily(time.UTC)}}})}},
		"tier with two policies":  {client, 1, time.Minute, []redislimit.Option{redislimit.WithTiers(plan, map[string][]keyrate.Policy{"pro": {{Limit: 2}, {Limit: 3}}})}},
		"nil tier function":       {client, 1, time.Minute, []redislimit.Option{redislimit.WithTiers(nil, nil)}},
		"prefix with a brace":     {client, 1, time.Minute, []redislimit.Option{redislimit.WithPrefix("a{")}},
		"short hash tag secret":   {client, 1, time.Minute, []redislimit.Option{redislimit.WithHashTagSecret([]byte("short"))}},
		"timeout 0":               {client, 1, time.Minute, []redislimit.Option{redislimit.WithTimeout(0)}},
		"ttl under a long budget": {client, 1, time.Second, []redislimit.Option{redislimit.WithTimeout(time.Second)}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := redislimit.NewConcurrency(tc.client, tc.limit, tc.ttl, tc.opts...)
			assert.ErrorIs(t, err, keyrate.ErrConfig)
			assert.Nil(t, c)
		})
	}
	c, err := redislimit.NewConcurrency(client, 1, time.Second, redislimit.WithPrefix("p:"), redislimit.WithTimeout(100*time.Millisecond),
		redislimit.WithHashTagSecret([]byte("0123456789abcdef")), redislimit.WithTiers(plan, nil), nil)
	require.NoError(t, err, "the options that concern slots")
	c.Close()
}

// Behind httplimit, replicas share the in-flight limit: a request running
// on one holds the slot another replica's request would need.
func TestConcurrencyBehindHTTP(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	prefix := uniquePrefix()
	started, finish := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-finish
	})
	var replicas []http.Handler
	for range 2 {
		l, err := keyrate.New(100, time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		m, err := httplimit.New(l, httplimit.WithRoute("report"),
			httplimit.WithConcurrency(newSlots(t, client, 1, time.Minute, redislimit.WithPrefix(prefix)), 0))
		require.NoError(t, err)
		replicas = append(replicas, m.Handler(slow))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		replicas[0].ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/report", nil))
	}()
	<-started
	rec := httptest.NewRecorder()
	replicas[1].ServeHTTP(rec, httptest.NewRequest("GET", "/report", nil))
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, `"report-inflight";q=1;qu="concurrent-requests"`, rec.Header().Values("RateLimit-Policy")[0])
	close(finish)
	<-done
}
