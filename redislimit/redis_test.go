package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The middleware takes a redislimit.Limiter as its backend as it is, and
// leaves the time budget to it.
var (
	_ keyrate.Backend   = (*redislimit.Limiter)(nil)
	_ backend.Bounded   = (*redislimit.Limiter)(nil)
	_ backend.Described = (*redislimit.Limiter)(nil)
)

// newLimiter returns a Limiter on the shared server with a prefix of its own.
func newLimiter(t *testing.T, client redis.UniversalClient, limit int, window time.Duration, opts ...redislimit.Option) *redislimit.Limiter {
	t.Helper()
	opts = append([]redislimit.Option{redislimit.WithPrefix(uniquePrefix())}, opts...)
	l, err := redislimit.New(client, limit, window, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// single completes want, whose own fields are set, into the Decision of
// one unnamed policy of limit per window: the same numbers are the
// policy's part, and Combine of that part is the Decision.
func single(limit int, window time.Duration, want keyrate.Decision) keyrate.Decision {
	return backend.Combine(keyrate.PolicyDecision{
		Policy:  keyrate.Policy{Limit: limit, Window: window},
		Allowed: want.Allowed, Remaining: want.Remaining,
		RetryAfter: want.RetryAfter, ResetAfter: want.ResetAfter, RefillAfter: want.RefillAfter,
	})
}

// mustTake returns TakeContext's Decision without its Receipt, which is
// the backend's own (an admission's receipt names its instant and the
// key's generation), so that Decisions compare by what they say;
// mustTakeReceipt keeps it.
func mustTake(t *testing.T, l *redislimit.Limiter, key string, n int) keyrate.Decision {
	t.Helper()
	d := mustTakeReceipt(t, l, key, n)
	d.Receipt = keyrate.Receipt{}
	return d
}

func mustTakeReceipt(t *testing.T, l *redislimit.Limiter, key string, n int) keyrate.Decision {
	t.Helper()
	d, err := l.TakeContext(context.Background(), key, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	return d
}

// TestServerTime exercises the production path, where the script reads the
// server's TIME: decisions that need no waiting, so real time cannot make
// the test flaky.
func TestServerTime(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit, window = 5, 24 * time.Hour
			l := newLimiter(t, client, limit, window, redislimit.WithAlgorithm(alg))
			for i := range limit {
				d := mustTake(t, l, "user", 1)
				if !d.Allowed || d.Remaining != limit-1-i || d.RetryAfter != 0 || d.Limit != limit {
					t.Fatalf("request %d: got %+v, want allowed with %d remaining", i, d, limit-1-i)
				}
				// The sliding log keeps a day's window in ticks of 64µs,
				// rounding the server's instant up.
				if d.ResetAfter <= 0 || d.ResetAfter > window+64*time.Microsecond {
					t.Fatalf("request %d: ResetAfter %v, want in (0, %v]", i, d.ResetAfter, window+64*time.Microsecond)
				}
			}
			d := mustTake(t, l, "user", 1)
			if d.Allowed || d.Remaining != 0 {
				t.Fatalf("request over the limit: got %+v, want refused with 0 remaining", d)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > window || d.ResetAfter < d.RetryAfter || d.ResetAfter > window+64*time.Microsecond {
				t.Fatalf("refused: RetryAfter %v, ResetAfter %v; want 0 < RetryAfter <= ResetAfter <= %v",
					d.RetryAfter, d.ResetAfter, window)
			}
			if ok, err := l.Allow(context.Background(), "user"); ok || err != nil {
				t.Fatalf("Allow over the limit = %v, %v; want false, nil", ok, err)
			}
			if ok, err := l.Allow(context.Background(), "other"); !ok || err != nil {
				t.Fatalf("Allow for another key = %v, %v; want true, nil", ok, err)
			}
		})
	}
}

// TestClientsShareOneWindow runs several limiters, each on its own client
// (own connection pool), as replicas of a service would: together they
// admit exactly the limit.
func TestClientsShareOneWindow(t *testing.T) {
	srv := redistest.Shared(t)
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit, clients, callsPerClient = 50, 4, 25
			prefix := uniquePrefix()
			var limiters []*redislimit.Limiter
			for range clients {
				l, err := redislimit.New(srv.Client(t), limit, 24*time.Hour,
					redislimit.WithPrefix(prefix), redislimit.WithAlgorithm(alg), redislimit.WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				limiters = append(limiters, l)
			}
			// 100 calls released at once against a limit of 50.
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			ready := make(chan struct{})
			for _, l := range limiters {
				for range callsPerClient {
					wg.Go(func() {
						<-ready
						d, err := l.TakeContext(context.Background(), "shared", 1)
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
				t.Fatalf("%d calls on %d clients: admitted %d with %d errors, want exactly %d and no errors",
					clients*callsPerClient, clients, admitted.Load(), failed.Load(), limit)
			}
		})
	}
}

// helperEnv carries TestHelperProcess's settings to a child process.
const helperEnv = "REDISLIMIT_TEST_HELPER"

// TestHelperProcess is not a test: run by TestProcessesShareOneWindow as a
// separate OS process, it hammers one key and prints how many calls were
// admitted. Without helperEnv set it does nothing.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		return
	}
	// spec: addr prefix key limit calls
	f := strings.Fields(spec)
	limit, _ := strconv.Atoi(f[3])
	calls, _ := strconv.Atoi(f[4])
	client := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := redislimit.New(client, limit, time.Hour, redislimit.WithPrefix(f[1]), redislimit.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			d, err := l.TakeContext(context.Background(), f[2], 1)
			if err != nil {
				failed.Add(1)
			} else if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("\nhelper: admitted=%d failed=%d\n", admitted.Load(), failed.Load())
}

// TestProcessesShareOneWindow re-runs this test binary as several OS
// processes hammering one key at once: exactly limit are admitted in total.
func TestProcessesShareOneWindow(t *testing.T) {
	srv := redistest.Shared(t)
	const procs, callsPerProc, limit = 4, 40, 50
	prefix := uniquePrefix()
	type out struct {
		text string
		err  error
	}
	results := make(chan out, procs)
	for range procs {
		go func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s hot %d %d", helperEnv, srv.Addr(), prefix, limit, callsPerProc))
			b, err := cmd.CombinedOutput()
			results <- out{string(b), err}
		}()
	}
	total := 0
	for range procs {
		r := <-results
		if r.err != nil {
			t.Fatalf("helper process: %v\n%s", r.err, r.text)
		}
		var admitted, failed int
		i := strings.Index(r.text, "helper: ")
		if i < 0 {
			t.Fatalf("helper process printed no result:\n%s", r.text)
		}
		if _, err := fmt.Sscanf(r.text[i:], "helper: admitted=%d failed=%d", &admitted, &failed); err != nil {
			t.Fatalf("helper output %q: %v", r.text, err)
		}
		if failed != 0 {
			t.Fatalf("helper process had %d failed calls:\n%s", failed, r.text)
		}
		total += admitted
	}
	if total != limit {
		t.Fatalf("%d processes x %d calls: admitted %d in total, want exactly %d", procs, callsPerProc, total, limit)
	}
}

// TestSameInstantEventsAllCount checks that events admitted in one
// microsecond all count, in one entry of the log that holds their weights,
// and that the log's key is set to expire 1.5 windows ahead.
func TestSameInstantEventsAllCount(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	prefix := uniquePrefix()
	l, err := redislimit.New(client, 2000, time.Minute, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	key := l.StoreKey("k")
	for i, n := range []int{1, 1, 3, 1200, 795} {
		if d := mustTake(t, l, "k", n); !d.Allowed {
			t.Fatalf("call %d: weight %d refused: %+v", i, n, d)
		}
	}
	g, err := redislimit.ReadLog(context.Background(), client, key)
	if err != nil || len(g.Entries) != 1 || g.Held() != 2000 {
		t.Fatalf("log after 5 calls at one instant: %+v, %v; want one entry of weight 2000", g, err)
	}
	if d := mustTake(t, l, "k", 1); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Minute {
		t.Fatalf("call over the limit: %+v", d)
	}
	ttl := client.PTTL(context.Background(), key).Val()
	if ttl <= time.Minute || ttl > 90*time.Second {
		t.Fatalf("PTTL of the log = %v, want in (1m, 1m30s]", ttl)
	}
}

// TestHugeWeightIsOneEvent checks that a weight costs the server what a
// weight of one does: Take(k, 1,000,000) under a limit of a million stores
// one 8-byte entry, not a million, and the decisions around it stay exact.
func TestHugeWeightIsOneEvent(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	prefix := uniquePrefix()
	const limit = 1_000_000
	l, err := redislimit.New(client, limit, 10*time.Second, redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	key := l.StoreKey("big")
	want := single(limit, 10*time.Second, keyrate.Decision{Allowed: true, ResetAfter: 10 * time.Second, RefillAfter: 10 * time.Second})
	if d := mustTake(t, l, "big", limit); d != want {
		t.Fatalf("Take(%d) on a fresh key = %+v, want %+v", limit, d, want)
	}
	entries := func() []redislimit.LogEntry {
		t.Helper()
		g, err := redislimit.ReadLog(ctx, client, key)
		if err != nil {
			t.Fatal(err)
		}
		return g.Entries
	}
	if e := entries(); len(e) != 1 || e[0].Weight != limit {
		t.Fatalf("log after one event of weight %d: %+v, want one entry", limit, e)
	}
	clock.Advance(3 * time.Second)
	want = single(limit, 10*time.Second, keyrate.Decision{RetryAfter: 7 * time.Second, ResetAfter: 7 * time.Second, RefillAfter: 7 * time.Second})
	if d := mustTake(t, l, "big", 1); d != want {
		t.Fatalf("Take(1) 3s later = %+v, want %+v", d, want)
	}
	clock.Advance(7 * time.Second)
	for i, n := range []int{limit / 2, limit / 4, limit / 4} {
		if d := mustTake(t, l, "big", n); !d.Allowed {
			t.Fatalf("after the window, Take(%d) = %+v", n, d)
		}
		clock.Advance(time.Duration(i+1) * time.Millisecond)
	}
	at := start.Add(10 * time.Second).UnixMicro()
	wantLog := []redislimit.LogEntry{{At: at, Weight: limit / 2}, {At: at + 1000, Weight: limit / 4}, {At: at + 3000, Weight: limit / 4}}
	sameEvent := func(a, b redislimit.LogEntry) bool { return a.At == b.At && a.Weight == b.Weight }
	if e := entries(); !slices.EqualFunc(e, wantLog, sameEvent) {
		t.Fatalf("log after three more events: %+v, want %+v (the first event pruned)", e, wantLog)
	}
}

// TestKeys checks the key layout (prefix, hash tag, key, algorithm), that
// prefixes keep budgets apart, and that unusual keys are kept apart too.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	prefix := uniquePrefix()
	sl, err := redislimit.New(client, 1, time.Hour, redislimit.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := redislimit.New(client, 1, time.Hour, redislimit.WithPrefix(prefix), redislimit.WithAlgorithm(keyrate.FixedWindow))
	if err != nil {
		t.Fatal(err)
	}
	mustTake(t, sl, "user:42", 1)
	mustTake(t, fw, "user:42", 1)
	slKey, fwKey := sl.StoreKey("user:42"), fw.StoreKey("user:42")
	layout := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `\{[0-9a-f]{8}\}user:42:(log|fw)$`)
	for _, k := range []string{slKey, fwKey} {
		if !layout.MatchString(k) {
			t.Errorf("Redis key %q, want %s", k, layout)
		}
	}
	if typ := client.Type(ctx, slKey).Val(); typ != "string" {
		t.Errorf("sliding log key %q has type %q, want string", slKey, typ)
	}
	if typ := client.Type(ctx, fwKey).Val(); typ != "hash" {
		t.Errorf("fixed window key %q has type %q, want hash", fwKey, typ)
	}

	other, err := redislimit.New(client, 1, time.Hour, redislimit.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, other, "user:42", 1); !d.Allowed {
		t.Errorf("a limiter with another prefix shared the budget: %+v", d)
	}

	keys := []string{"a}b", "{a}", "}", "{", "a b", "ключ", "\x00\xff", strings.Repeat("k", 128)}
	for _, k := range keys {
		if d := mustTake(t, sl, k, 1); !d.Allowed {
			t.Errorf("first call for key %q refused: %+v", k, d)
		}
	}
	for _, k := range keys {
		if d := mustTake(t, sl, k, 1); d.Allowed {
			t.Errorf("second call for key %q admitted over a limit of 1: %+v", k, d)
		}
	}
}

// TestBadInput checks that bad keys and weights give clear errors or the
// documented decisions, and that nothing panics.
func TestBadInput(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	l := newLimiter(t, client, 3, time.Hour)
	ctx := context.Background()

	d, err := l.TakeContext(ctx, "", 1)
	if !errors.Is(err, keyrate.ErrInvalidKey) || d.Allowed || d.Limit != 3 {
		t.Errorf("Take(\"\") = %+v, %v; want ErrInvalidKey", d, err)
	}
	if ok, err := l.Allow(ctx, ""); ok || !errors.Is(err, keyrate.ErrInvalidKey) {
		t.Errorf("Allow(\"\") = %v, %v; want false, ErrInvalidKey", ok, err)
	}

	// Weights, with the server's clock: the core's rules.
	for _, c := range []struct {
		n    int
		want keyrate.Decision
	}{
		{0, keyrate.Decision{Allowed: true, Remaining: 3}},
		{-1, keyrate.Decision{Remaining: 3}},
		{math.MinInt64, keyrate.Decision{Remaining: 3}},
		{4, keyrate.Decision{Remaining: 3}},
		{math.MaxInt64, keyrate.Decision{Remaining: 3}},
	} {
		if got := mustTake(t, l, "weights", c.n); got != single(3, time.Hour, c.want) {
			t.Errorf("Take(n=%d) on a fresh key = %+v, want %+v", c.n, got, c.want)
		}
	}
	if d := mustTake(t, l, "weights", 3); !d.Allowed {
		t.Errorf("after the invalid weights the key was not whole: %+v", d)
	}
}

// TestNewErrors checks every invalid argument and option.
func TestNewErrors(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	cases := []struct {
		name   string
		client redis.UniversalClient
		limit  int
		window time.Duration
		opts   []redislimit.Option
	}{
		{"nil client", nil, 1, time.Second, nil},
		{"zero limit", client, 0, time.Second, nil},
		{"negative limit", client, -1, time.Second, nil},
		{"huge limit", client, math.MaxInt32 + 1, time.Second, nil},
		{"zero window", client, 1, 0, nil},
		{"negative window", client, 1, -time.Second, nil},
		{"sub-millisecond window", client, 1, 999 * time.Microsecond, nil},
		{"fractional microseconds", client, 1, time.Second + time.Nanosecond, nil},
		{"prefix with {", client, 1, time.Second, []redislimit.Option{redislimit.WithPrefix("a{")}},
		{"prefix with }", client, 1, time.Second, []redislimit.Option{redislimit.WithPrefix("}")}},
		{"huge prefix", client, 1, time.Second, []redislimit.Option{redislimit.WithPrefix(strings.Repeat("p", 257))}},
		{"zero timeout", client, 1, time.Second, []redislimit.Option{redislimit.WithTimeout(0)}},
		{"negative timeout", client, 1, time.Second, []redislimit.Option{redislimit.WithTimeout(-time.Second)}},
		{"unknown algorithm", client, 1, time.Second, []redislimit.Option{redislimit.WithAlgorithm(7)}},
	}
	for _, c := range cases {
		l, err := redislimit.New(c.client, c.limit, c.window, c.opts...)
		if !errors.Is(err, keyrate.ErrConfig) || l != nil {
			t.Errorf("%s: New = %v, %v; want nil and an error wrapping keyrate.ErrConfig", c.name, l, err)
		}
	}
	l, err := redislimit.New(client, 7, time.Millisecond, nil, redislimit.WithPrefix(""))
	if err != nil || l.Limit() != 7 || l.Window() != time.Millisecond {
		t.Errorf("New with a nil option and an empty prefix = %v, %v; want a limiter of 7 per 1ms", l, err)
	}
}

// TestRoundTrips checks that every decision is one round trip, for both
// algorithms, and that a script cache flushed on the server (as after a
// restart) costs one extra round trip once, not an error.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Shared(t)
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			client := srv.Client(t)
			var rt redistest.RoundTrips
			client.AddHook(&rt)
			l := newLimiter(t, client, 10, time.Hour, redislimit.WithAlgorithm(alg))
			mustTake(t, l, "warm", 1) // connects and, if needed, loads the script

			before := rt.Load()
			for i := range 20 {
				mustTake(t, l, fmt.Sprint("key", i%3), 1+i%2)
			}
			if got := rt.Load() - before; got != 20 {
				t.Fatalf("20 decisions took %d round trips, want 20", got)
			}

			if err := client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			before = rt.Load()
			if d := mustTake(t, l, "after-flush", 1); !d.Allowed {
				t.Fatalf("first decision after SCRIPT FLUSH: %+v", d)
			}
			if got := rt.Load() - before; got != 2 {
				t.Fatalf("decision after SCRIPT FLUSH took %d round trips, want 2 (EVALSHA, then EVAL)", got)
			}
			before = rt.Load()
			mustTake(t, l, "after-flush", 1)
			if got := rt.Load() - before; got != 1 {
				t.Fatalf("next decision took %d round trips, want 1 (EVAL cached the script)", got)
			}
		})
	}
}

// TestFixedWindow traces the fixed window under a manual clock: windows
// aligned to multiples of the window length, and the boundary burst the
// sliding log prevents.
func TestFixedWindow(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // a multiple of 10s since the epoch
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 10, 10*time.Second,
		redislimit.WithAlgorithm(keyrate.FixedWindow), redislimit.WithClock(clock))
	s := time.Second
	steps := []struct {
		at   time.Duration
		n    int
		want keyrate.Decision
	}{
		{0, 0, keyrate.Decision{Allowed: true, Remaining: 10}},
		{9 * s, 10, keyrate.Decision{Allowed: true, Remaining: 0, ResetAfter: 1 * s}},
		{9 * s, 1, keyrate.Decision{Remaining: 0, RetryAfter: 1 * s, ResetAfter: 1 * s}},
		{9 * s, 11, keyrate.Decision{Remaining: 0, ResetAfter: 1 * s}},
		// 00:11 is in the next window: the burst the sliding log refuses.
		{11 * s, 10, keyrate.Decision{Allowed: true, Remaining: 0, ResetAfter: 9 * s}},
		{11 * s, 1, keyrate.Decision{Remaining: 0, RetryAfter: 9 * s, ResetAfter: 9 * s}},
		{20 * s, 4, keyrate.Decision{Allowed: true, Remaining: 6, ResetAfter: 10 * s}},
		{25 * s, 7, keyrate.Decision{Remaining: 6, RetryAfter: 5 * s, ResetAfter: 5 * s}},
		{25 * s, 6, keyrate.Decision{Allowed: true, Remaining: 0, ResetAfter: 5 * s}},
		{25 * s, -1, keyrate.Decision{Remaining: 0, ResetAfter: 5 * s}},
		// Backwards to an earlier window: decided at the newest instant
		// seen, 25s, in the newest window, with no fresh budget.
		{15 * s, 1, keyrate.Decision{Remaining: 0, RetryAfter: 5 * s, ResetAfter: 5 * s}},
		{30 * s, 0, keyrate.Decision{Allowed: true, Remaining: 10}},
	}
	for i, st := range steps {
		clock.Set(start.Add(st.at))
		// A window's events all leave when it ends: the first quota comes
		// back when the whole of it does.
		st.want.RefillAfter = st.want.ResetAfter
		st.want = single(10, 10*time.Second, st.want)
		if got := mustTake(t, l, "fw", st.n); got != st.want {
			t.Errorf("step %d: at +%v Take(%d)\n got %+v\nwant %+v", i, st.at, st.n, got, st.want)
		}
	}
}

// TestClockSteppedBack checks that a clock moved backwards (a failover to a
// server whose clock is behind) never admits more than the limit.
func TestClockSteppedBack(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 3, 10*time.Second, redislimit.WithClock(clock))
	clock.Set(start.Add(20 * time.Second))
	if d := mustTake(t, l, "b", 3); !d.Allowed {
		t.Fatalf("filling: %+v", d)
	}
	for _, back := range []time.Duration{15 * time.Second, 5 * time.Second, 0, -time.Hour} {
		clock.Set(start.Add(back))
		if d := mustTake(t, l, "b", 1); d.Allowed || d.RetryAfter != 10*time.Second {
			t.Fatalf("clock at +%v after filling at +20s: got %+v, want refused with RetryAfter 10s", back, d)
		}
	}
	clock.Set(start.Add(30 * time.Second))
	if d := mustTake(t, l, "b", 3); !d.Allowed {
		t.Fatalf("at +30s: %+v", d)
	}
}

// TestClockSteppedBackAfterPrune checks that a decision after a backwards
// step is taken at the newest instant the key was decided at, a refusal's
// too: that refusal pruned the event that left its window, and the
// decision after the step counts the window it pruned for, never one
// that would hold the pruned event but not its count.
func TestClockSteppedBackAfterPrune(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 2, 10*time.Second, redislimit.WithClock(clock))
	mustTake(t, l, "p", 1) // 00:00
	clock.Set(start.Add(5 * time.Second))
	mustTake(t, l, "p", 1) // 00:05
	clock.Set(start.Add(14 * time.Second))
	if d := mustTake(t, l, "p", 2); d.Allowed {
		t.Fatalf("at +14s with one event in the window, Take(2) of 2: %+v", d)
	}
	g, err := redislimit.ReadLog(context.Background(), client, l.StoreKey("p"))
	if err != nil || len(g.Entries) != 1 || g.Last != start.Add(14*time.Second).UnixMicro() {
		t.Fatalf("the log after the refusal at +14s: %+v, %v; want the event of 5s alone, decided at 14s", g, err)
	}
	clock.Set(start.Add(9 * time.Second)) // back
	d := mustTakeReceipt(t, l, "p", 1)
	if !d.Allowed || d.RefillAfter != time.Second || !backend.ReceiptAt(d.Receipt).Equal(start.Add(14*time.Second)) {
		t.Fatalf("at +9s after a step back: got %+v, want admitted at 14s, the event of 5s leaving in 1s", d)
	}
	if d := mustTake(t, l, "p", 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("then: %+v, want refused for 1s: (4s, 14s] holds 2", d)
	}
}

// TestRefillAfterIsDraftT checks the IETF draft's meaning of t on Redis:
// at 5 per 60s with one request every 10s, the fifth is admitted with no
// quota left, more coming in 20s (when the first leaves), not in 60s.
func TestRefillAfterIsDraftT(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 5, time.Minute, redislimit.WithClock(clock))
	var d keyrate.Decision
	for range 5 {
		d = mustTake(t, l, "draft", 1)
		clock.Advance(10 * time.Second)
	}
	want := single(5, time.Minute, keyrate.Decision{Allowed: true, RefillAfter: 20 * time.Second, ResetAfter: time.Minute})
	if d != want {
		t.Fatalf("fifth request at +40s: %+v, want %+v", d, want)
	}
}

// TestLogExpiry checks when an admission sets the log's expiry: to 1.5
// windows ahead when the key would otherwise expire within a window of the
// admission, and not otherwise (once per half window for a busy key). The
// test shortens the key's TTL to 2s by hand between admissions, which
// shows whether the next admission set it again.
func TestLogExpiry(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 100, 10*time.Second, redislimit.WithClock(clock))
	key := l.StoreKey("e")
	for _, step := range []struct {
		at      time.Duration
		refresh bool
	}{
		{0, true},                // a new key: expires at +15s
		{4 * time.Second, false}, // +15s is a window after +4s and more
		{5 * time.Second, false}, // exactly a window after
		{5*time.Second + time.Millisecond, true},
		{9 * time.Second, false}, // expires at +20.001s now
		{30 * time.Second, true},
	} {
		clock.Set(start.Add(step.at))
		if d := mustTake(t, l, "e", 1); !d.Allowed {
			t.Fatalf("at +%v: %+v", step.at, d)
		}
		ttl := client.PTTL(ctx, key).Val()
		if refreshed := ttl > 10*time.Second; refreshed != step.refresh || ttl > 15*time.Second {
			t.Fatalf("admission at +%v: PTTL %v; want a refresh to 15s: %v", step.at, ttl, step.refresh)
		}
		if err := client.PExpire(ctx, key, 2*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResetAfterWithinWindow checks that ResetAfter and RefillAfter never
// pass the policy's window, as in every backend (the IETF t <= w): a day's
// sliding log counts in ticks of 64µs, a resolution rounds an instant up
// to its end, and 3 per 10 s refills every 3.333334 s; each would say more
// than the window if reported as counted. RetryAfter stays exact.
func TestResetAfterWithinWindow(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	for _, c := range []struct {
		name   string
		limit  int
		window time.Duration
		n      int
		opts   []redislimit.Option
	}{
		{"a day's ticks", 10, 24 * time.Hour, 1, nil},
		{"a resolution", 10, time.Minute, 1, []redislimit.Option{redislimit.WithResolution(time.Minute)}},
		{"GCRA", 3, 10 * time.Second, 3, []redislimit.Option{redislimit.WithAlgorithm(keyrate.GCRA)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := keyrate.NewManualClock(start.Add(30*time.Second + time.Millisecond))
			l := newLimiter(t, client, c.limit, c.window, append(c.opts, redislimit.WithClock(clock))...)
			d := mustTake(t, l, "k", c.n)
			require.True(t, d.Allowed)
			require.LessOrEqual(t, d.ResetAfter, c.window)
			require.LessOrEqual(t, d.RefillAfter, c.window)
			require.LessOrEqual(t, d.Policies()[0].ResetAfter, c.window)
			require.LessOrEqual(t, d.Policies()[0].RefillAfter, c.window)
		})
	}
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 3, 10*time.Second, redislimit.WithAlgorithm(keyrate.GCRA), redislimit.WithClock(clock))
	mustTake(t, l, "k", 3)
	d := mustTake(t, l, "k", 3)
	require.Equal(t, 3*3333334*time.Microsecond, d.RetryAfter, "RetryAfter, exact")
}
