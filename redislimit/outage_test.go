package redislimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// fastCall bounds the median time of a call during an outage, once the
// breaker is open: a local decision or error takes microseconds, and the
// bound leaves room for a loaded 2-core machine under -race.
const fastCall = 5 * time.Millisecond

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// deadAddr returns a loopback address where nothing listens: connecting
// to it is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// deadClient returns a client of a port where nothing listens.
func deadClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitForRedis calls l with a weight of 0 (which records nothing, in Redis
// or the fallback) until a decision comes from Redis again, and returns
// how long that took; it fails t after within.
func waitForRedis(t *testing.T, l *redislimit.Limiter, key string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		d, err := l.TakeContext(context.Background(), key, 0)
		if err == nil && !d.Fallback {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond) // polling for the breaker's probe, not timing a decision
	}
	t.Fatalf("decisions did not return to Redis within %v", within)
	return 0
}

// The scenario on a paused Redis (SIGSTOP): a limit of 10 with a
// local fallback at a share of 0.5. Three are admitted through Redis;
// while Redis is stopped, 100 calls on the key all get decisions, fast
// once the breaker has opened, and exactly 5 are admitted (the fallback's
// share, from an empty local log). Once Redis runs again (SIGCONT),
// decisions return to it within 5s: a fresh key gets Redis's 10, and the
// first key at most 7 more, so that it got at most the limit plus the
// share (15) in the window across the outage.
func TestOutagePausedFallback(t *testing.T) {
	srv := redistest.StartT(t)
	client := srv.Client(t)
	const limit, share = 10, 0.5
	l, err := redislimit.New(client, limit, time.Hour, redislimit.WithPrefix("outage:"),
		redislimit.WithTimeout(budget), redislimit.WithLocalFallback(share))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d := mustTake(t, l, "k", 1); !d.Allowed || d.Fallback {
			t.Fatalf("request %d before the outage: %+v, want admitted by Redis", i, d)
		}
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	local := 0
	var took []time.Duration
	for i := range 100 {
		d, err, dur := timedTake(context.Background(), l, "k")
		if err != nil {
			t.Fatalf("call %d during the outage: %v, want a decision", i, err)
		}
		if !d.Fallback || d.Limit != 5 {
			t.Fatalf("call %d during the outage: %+v, want the fallback's, with its limit of 5", i, d)
		}
		if d.Allowed {
			local++
		}
		took = append(took, dur)
	}
	if local != 5 {
		t.Errorf("admitted %d of 100 during the outage, want 5 (10 x 0.5)", local)
	}
	if took[0] > budget+slack {
		t.Errorf("the first call during the outage took %v, want at most the %v budget (+%v slack)", took[0], budget, slack)
	}
	if p50 := median(took[3:]); p50 >= fastCall {
		t.Errorf("p50 of the calls after the first 3: %v, want under %v", p50, fastCall)
	}
	t.Logf("during the outage: first call %v, p50 after the first 3 %v, max %v", took[0], median(took[3:]), slices.Max(took[3:]))

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("decisions back on Redis %v after SIGCONT", waitForRedis(t, l, "k", 5*time.Second))
	for i := range limit {
		if d := mustTake(t, l, "fresh", 1); !d.Allowed || d.Fallback {
			t.Fatalf("a fresh key's request %d after the outage: %+v, want admitted by Redis", i, d)
		}
	}
	if d := mustTake(t, l, "fresh", 1); d.Allowed || d.Fallback {
		t.Fatalf("a fresh key's request %d after the outage: %+v, want refused by Redis", limit+1, d)
	}
	more := 0
	for {
		d := mustTake(t, l, "k", 1)
		if d.Fallback {
			t.Fatalf("after the outage: %+v from the fallback", d)
		}
		if !d.Allowed {
			break
		}
		if more++; more > limit {
			t.Fatalf("the first key admitted more than its limit after the outage")
		}
	}
	// The call that met the pause first was sent before the budget ran
	// out; Redis runs it when it resumes, which can only leave less.
	if more > limit-3 || more < limit-3-1 {
		t.Errorf("the first key got %d more after the outage, want %d (or one less)", more, limit-3)
	}
	if total := 3 + local + more; total > limit+int(limit*share) {
		t.Errorf("the first key got %d in the window across the outage, want at most %d", total, limit+int(limit*share))
	}
}

// A port where nothing listens, with and without a fallback: connecting is
// refused, never mistaken for a timeout; after the first calls, every call
// answers in well under a millisecond on an idle machine. With a share of
// 1, the fallback admits exactly the limit.
func TestOutageRefused(t *testing.T) {
	for _, withFallback := range []bool{false, true} {
		name := map[bool]string{false: "Error", true: "Fallback"}[withFallback]
		t.Run(name, func(t *testing.T) {
			const limit = 5
			opts := []redislimit.Option{redislimit.WithTimeout(budget)}
			if withFallback {
				opts = append(opts, redislimit.WithLocalFallback(1))
			}
			l, err := redislimit.New(deadClient(t), limit, time.Hour, opts...)
			if err != nil {
				t.Fatal(err)
			}
			admitted := 0
			var took []time.Duration
			for i := range 50 {
				d, err, dur := timedTake(context.Background(), l, "k")
				took = append(took, dur)
				switch {
				case withFallback && (err != nil || !d.Fallback):
					t.Fatalf("call %d: %+v, %v; want the fallback's decision", i, d, err)
				case withFallback:
					if d.Allowed {
						admitted++
					}
				case err == nil || d.Allowed || !errors.Is(err, keyrate.ErrUnavailable):
					t.Fatalf("call %d: %+v, %v; want an error wrapping ErrUnavailable", i, d, err)
				case i == 0 && !connRefused(err):
					t.Fatalf("the first call: %v, want the refused connection in the error", err)
				case i > 0 && errors.Is(err, context.DeadlineExceeded):
					t.Fatalf("call %d: %v; a refused connection is no timeout, and nothing waited", i, err)
				}
			}
			if withFallback && admitted != limit {
				t.Errorf("the fallback admitted %d of 50 at a share of 1, want %d", admitted, limit)
			}
			if p50 := median(took[3:]); p50 >= fastCall {
				t.Errorf("p50 of the calls after the first 3: %v, want under %v", p50, fastCall)
			}
			t.Logf("first call %v, p50 after the first 3 %v, max %v", took[0], median(took[3:]), slices.Max(took[3:]))

			// A request whose caller has gone is not decided, fallback or not.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if d, err := l.TakeContext(ctx, "k", 1); !errors.Is(err, context.Canceled) || d.Allowed || d.Fallback {
				t.Errorf("a cancelled call during the outage: %+v, %v; want context.Canceled", d, err)
			}
		})
	}
}

// scriptCalls records when each script command was sent and answered, as
// a go-redis hook.
type scriptCalls struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		s.mu.Lock()
		s.spans = append(s.spans, [2]time.Time{start, time.Now()})
		s.mu.Unlock()
		return err
	}
}

// During an outage, calls do not reach Redis: only probes do, one at a
// time, at most every 100ms at first and less often as they fail. Eight
// callers hammer a Redis that accepts connections and never answers for
// 1.5s: after the first calls, which wait out the budget and open the
// breaker, the commands sent are the probes alone, none overlapping
// another.
func TestOutageProbes(t *testing.T) {
	calls := &scriptCalls{}
	client := redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	client.AddHook(calls)
	l, err := redislimit.New(client, 5, time.Hour, redislimit.WithTimeout(budget), redislimit.WithLocalFallback(1))
	if err != nil {
		t.Fatal(err)
	}
	const callers = 8
	var made atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(1500 * time.Millisecond)
	for i := range callers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := l.TakeContext(context.Background(), string(rune('a'+i)), 1); err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				made.Add(1)
				time.Sleep(time.Millisecond) // a steady load, not a spin
			}
		})
	}
	wg.Wait()
	time.Sleep(budget + slack) // the last probe ends within its budget

	calls.mu.Lock()
	spans := slices.Clone(calls.spans)
	calls.mu.Unlock()
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	// The first calls were all sent before the first of them timed out.
	opened := spans[0][1]
	for _, s := range spans {
		if s[1].Before(opened) {
			opened = s[1]
		}
	}
	var probes [][2]time.Time
	for _, s := range spans {
		if s[0].After(opened) {
			probes = append(probes, s)
		}
	}
	if first := len(spans) - len(probes); first > callers {
		t.Errorf("%d calls reached Redis before the breaker opened, want at most the %d callers' first", first, callers)
	}
	// Probes at 100, 300 and 700ms after the opening at the earliest, each
	// then waiting out its 200ms budget: at most 4 in 1.5s.
	if len(probes) == 0 || len(probes) > 4 {
		t.Errorf("%d probes in 1.5s, want 1 to 4", len(probes))
	}
	for i := 1; i < len(probes); i++ {
		if probes[i][0].Before(probes[i-1][1]) {
			t.Errorf("probe %d began before probe %d ended", i, i-1)
		}
	}
	if made.Load() < 100 {
		t.Errorf("only %d calls were made in 1.5s", made.Load())
	}
	t.Logf("%d calls, %d reached Redis: %d first calls and %d probes", made.Load(), len(spans), len(spans)-len(probes), len(probes))
}

// Two replicas (two limiters, each on its own client) of a limit of 20 an
// hour with a fallback at a share of 0.5 each, under a steady load from 8
// identities, through an outage: before it, Redis admits exactly 20 per
// identity across both; while Redis is stopped, each replica's fallback
// admits its 10, so an identity gets at most 20 x 0.5 x 2 more; after it,
// Redis admits nothing more for them (it still holds their 20) and
// exactly 20 for a new identity.
func TestOutageReplicas(t *testing.T) {
	srv := redistest.StartT(t)
	const limit, share, identities, workers = 20, 0.5, 8, 4
	var replicas [2]*redislimit.Limiter
	for i := range replicas {
		l, err := redislimit.New(srv.Client(t), limit, time.Hour, redislimit.WithPrefix("replicas:"),
			redislimit.WithTimeout(budget), redislimit.WithLocalFallback(share))
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = l
	}
	type count struct{ redis, local, calls int }
	var mu sync.Mutex
	counts := map[string]*[3]count{} // by identity, by phase: before, during, after
	var took []time.Duration         // calls decided by the fallback
	var phase atomic.Int32
	run := func(ids []string, d time.Duration) {
		var wg sync.WaitGroup
		var next atomic.Int64
		stop := time.Now().Add(d)
		for range workers {
			wg.Go(func() {
				for time.Now().Before(stop) {
					i := int(next.Add(1))
					id, l := ids[i%len(ids)], replicas[i/len(ids)%2]
					p := phase.Load()
					dec, err, dur := timedTake(context.Background(), l, id)
					if err != nil {
						t.Errorf("%s in phase %d: %v", id, p, err)
						return
					}
					mu.Lock()
					c := &counts[id][p]
					c.calls++
					switch {
					case dec.Fallback:
						took = append(took, dur)
						if dec.Allowed {
							c.local++
						}
					case dec.Allowed:
						c.redis++
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
	}
	var old []string
	for i := range identities {
		id := "load-" + string(rune('a'+i))
		old = append(old, id)
		counts[id] = &[3]count{}
	}
	run(old, time.Second)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	phase.Store(1)
	run(old, 1500*time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, l := range replicas {
		waitForRedis(t, l, "load-a", 5*time.Second)
	}
	phase.Store(2)
	fresh := []string{"new-a", "new-b"}
	for _, id := range fresh {
		counts[id] = &[3]count{}
	}
	run(append(slices.Clone(old), fresh...), time.Second)

	for _, id := range old {
		c := counts[id]
		if c[0].redis != limit || c[0].local != 0 {
			t.Errorf("%s before the outage: %+v, want exactly %d admitted by Redis", id, c[0], limit)
		}
		// Hammered throughout, each replica's fallback fills its share.
		if c[1].redis != 0 || c[1].local != int(limit*share*2) {
			t.Errorf("%s during the outage: %+v, want exactly %d admitted by the fallbacks together", id, c[1], int(limit*share*2))
		}
		if c[2].redis != 0 || c[2].local != 0 {
			t.Errorf("%s after the outage: %+v, want none admitted: Redis holds its %d", id, c[2], limit)
		}
	}
	for _, id := range fresh {
		if c := counts[id][2]; c.redis != limit || c.local != 0 {
			t.Errorf("%s, new after the outage: %+v, want exactly %d admitted by Redis", id, c, limit)
		}
	}
	if p50 := median(took); p50 >= fastCall {
		t.Errorf("p50 of the fallback's decisions: %v, want under %v", p50, fastCall)
	}
	t.Logf("%d decisions by the fallbacks, p50 %v", len(took), median(took))
}

// A Redis at its maxmemory that cannot record an admission is answering:
// the fallback decides that call, and the next call still asks Redis,
// which refuses a key at its limit as before.
func TestOutOfMemoryFallback(t *testing.T) {
	srv := redistest.StartT(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	client := srv.Client(t)
	l := newLimiter(t, client, 2, time.Hour, redislimit.WithLocalFallback(0.5))
	for range 2 {
		mustTake(t, l, "full", 1)
	}
	fillRedis(t, client)
	for i := range 2 {
		if d := mustTake(t, l, "fresh", 1); d.Allowed != (i == 0) || !d.Fallback || d.Limit != 1 {
			t.Errorf("a new key on a full Redis, call %d: %+v; want the fallback's decision under a limit of 1", i, d)
		}
		if d := mustTake(t, l, "full", 1); d.Allowed || d.Fallback || d.RetryAfter <= 0 {
			t.Errorf("a key at its limit on a full Redis: %+v; want Redis's refusal", d)
		}
	}
}

// An error that Redis answers with, other than that it cannot serve now,
// is no outage: it is returned, not decided locally, and calls go on
// asking Redis.
func TestFallbackNotForScriptErrors(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	l := newLimiter(t, client, 2, time.Hour, redislimit.WithLocalFallback(1))
	if err := client.Set(context.Background(), l.StoreKey("k"), "not a log", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, err := l.TakeContext(context.Background(), "k", 1); err == nil || d.Fallback || errors.Is(err, keyrate.ErrUnavailable) {
			t.Fatalf("call %d on a key of another kind: %+v, %v; want Redis's error", i, d, err)
		}
	}
	if d := mustTake(t, l, "other", 1); !d.Allowed || d.Fallback {
		t.Errorf("another key: %+v, want Redis's decision", d)
	}
}

// The fallback has the Limiter's tiers, scaled, chosen by the tier
// function from the identity as sent (or the whole key, however long),
// and SetTier changes them in both.
func TestFallbackTiers(t *testing.T) {
	tier := func(key string) string {
		if strings.HasPrefix(key, "pro-") {
			return "pro"
		}
		return ""
	}
	l, err := redislimit.New(deadClient(t), 4, time.Hour, redislimit.WithTimeout(budget), redislimit.WithLocalFallback(0.5),
		redislimit.WithTiers(tier, map[string][]keyrate.Policy{"pro": {{Limit: 10, Window: time.Hour}}}))
	if err != nil {
		t.Fatal(err)
	}
	admit := func(ctx context.Context, key string) (n int) {
		t.Helper()
		for range 20 {
			d, err := l.TakeContext(ctx, key, 1)
			if err != nil || !d.Fallback {
				t.Fatalf("%+v, %v; want the fallback's decision", d, err)
			}
			if d.Allowed {
				n++
			}
		}
		return n
	}
	if n := admit(context.Background(), "free"); n != 2 {
		t.Errorf("the default tier's 4 at 0.5: admitted %d, want 2", n)
	}
	if n := admit(context.Background(), "pro-a"); n != 5 {
		t.Errorf("the pro tier's 10 at 0.5: admitted %d, want 5", n)
	}
	long := "pro-" + strings.Repeat("x", 200) // stored under its digest, tiered by itself
	if n := admit(context.Background(), long); n != 5 {
		t.Errorf("a pro key over 128 bytes: admitted %d, want 5", n)
	}
	if n := admit(backend.ContextWithIdentity(context.Background(), "pro-b"), "route\x00b"); n != 5 {
		t.Errorf("a key whose identity is pro: admitted %d, want 5", n)
	}
	if err := l.SetTier("pro", []keyrate.Policy{{Limit: 20, Window: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if n := admit(context.Background(), "pro-a"); n != 5 {
		t.Errorf("pro-a after SetTier to 20 at 0.5: admitted %d more, want 5 (10 less the 5 it had)", n)
	}
	if d, _ := l.TakeContext(context.Background(), "pro-c", 1); d.Limit != 10 {
		t.Errorf("a pro key after SetTier: limit %d, want 10", d.Limit)
	}
}

// A decision the fallback makes runs the tier function once, as one Redis
// makes: the Limiter chooses the tier and hands it to the fallback.
func TestFallbackChoosesTierOnce(t *testing.T) {
	var calls atomic.Int64
	tier := func(key string) string {
		calls.Add(1)
		if strings.HasPrefix(key, "pro-") {
			return "pro"
		}
		return ""
	}
	l, err := redislimit.New(deadClient(t), 4, time.Hour, redislimit.WithTimeout(budget), redislimit.WithLocalFallback(0.5),
		redislimit.WithTiers(tier, map[string][]keyrate.Policy{"pro": {{Limit: 10, Window: time.Hour}}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 { // the first call finds Redis down, the others the open breaker
		calls.Store(0)
		d, err := l.TakeContext(ctx, "pro-a", 1)
		if err != nil || !d.Fallback || d.Limit != 5 {
			t.Fatalf("call %d: %+v, %v; want the fallback's decision under the pro tier's 5", i, d, err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("TakeContext %d in the fallback ran the tier function %d times, want 1", i, n)
		}
	}
	calls.Store(0)
	ds, ok, err := l.TakeAll(ctx, []keyrate.Hit{{Key: "pro-b", Weight: 1}, {Key: "free", Weight: 1}})
	if err != nil || !ok || !ds[0].Fallback || ds[0].Limit != 5 || ds[1].Limit != 2 {
		t.Fatalf("TakeAll: %+v, %v, %v; want the fallback's admission under pro's 5 and the default's 2", ds, ok, err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("TakeAll of 2 keys in the fallback ran the tier function %d times, want 2", n)
	}
}

// WithLocalFallback's share and key bound are checked.
func TestLocalFallbackConfig(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	for _, opts := range [][]redislimit.Option{
		{redislimit.WithLocalFallback(0)},
		{redislimit.WithLocalFallback(-0.5)},
		{redislimit.WithLocalFallback(1.01)},
		{redislimit.WithLocalFallback(nan())},
		{redislimit.WithLocalFallbackMaxKeys(10)},
		{redislimit.WithLocalFallback(0.5), redislimit.WithLocalFallbackMaxKeys(0)},
	} {
		if _, err := redislimit.New(client, 10, time.Minute, opts...); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("New with %d options: %v, want an error wrapping keyrate.ErrConfig", len(opts), err)
		}
	}
	if _, err := redislimit.New(client, 10, time.Minute, redislimit.WithLocalFallback(1), redislimit.WithLocalFallbackMaxKeys(1)); err != nil {
		t.Errorf("a share of 1 and a bound of 1 key: %v", err)
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// Behind httplimit, the fallback's decisions are decisions: with
// FailClosed, a Redis that refuses connections gets requests served and
// refused at the fallback's share, never answered 503, and OnError never
// called; only without a fallback does the failure mode apply, and then
// at once, once the breaker has opened.
func TestFallbackBehindMiddleware(t *testing.T) {
	for _, withFallback := range []bool{true, false} {
		name := map[bool]string{false: "Error", true: "Fallback"}[withFallback]
		t.Run(name, func(t *testing.T) {
			opts := []redislimit.Option{redislimit.WithTimeout(budget)}
			if withFallback {
				opts = append(opts, redislimit.WithLocalFallback(0.5))
			}
			l, err := redislimit.New(deadClient(t), 4, time.Hour, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var decided, failed []middleware.Event
			m, err := httplimit.New(l,
				httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)),
				httplimit.WithFailureMode(middleware.FailClosed),
				httplimit.WithOnDecision(func(e middleware.Event) { decided = append(decided, e) }),
				httplimit.WithOnError(func(e middleware.Event) { failed = append(failed, e) }),
			)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			var codes []int
			for range 4 {
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("X-API-Key", "alice")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				codes = append(codes, w.Code)
				if withFallback && w.Header().Get("RateLimit-Policy") != `"default";q=2;w=3600` {
					t.Errorf("RateLimit-Policy %q, want the fallback's limit of 2", w.Header().Get("RateLimit-Policy"))
				}
			}
			want := []int{200, 200, 429, 429}
			if !withFallback {
				want = []int{503, 503, 503, 503}
			}
			if !slices.Equal(codes, want) {
				t.Errorf("status codes %v, want %v", codes, want)
			}
			if withFallback {
				if len(failed) != 0 || len(decided) != 4 || !decided[0].Decision.Fallback {
					t.Errorf("%d errors and %d decisions reported (the first %+v), want 4 decisions from the fallback", len(failed), len(decided), decided)
				}
			} else if len(failed) != 4 || !errors.Is(failed[3].Err, keyrate.ErrUnavailable) || failed[3].Duration >= budget {
				t.Errorf("errors reported: %+v, want 4 wrapping ErrUnavailable, the last at once", failed)
			}
		})
	}
}

// A decision the local fallback made is refunded in the fallback, which
// holds its events: on a dead port at a share of 1, a refunded admission
// leaves the fallback's budget whole.
func TestRefundFallbackDecision(t *testing.T) {
	l, err := redislimit.New(deadClient(t), 2, time.Minute, redislimit.WithLocalFallback(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := l.TakeContext(ctx, "alice", 2)
	if err != nil || !d.Allowed || !d.Fallback {
		t.Fatalf("first call: %+v, %v; want admitted by the fallback", d, err)
	}
	if err := l.Refund(ctx, "alice", &d); err != nil {
		t.Fatalf("refund of a fallback decision: %v", err)
	}
	if err := l.Refund(ctx, "alice", &d); !errors.Is(err, keyrate.ErrNothingToRefund) {
		t.Fatalf("second refund: %v, want ErrNothingToRefund", err)
	}
	if d, _ := l.TakeContext(ctx, "alice", 2); !d.Allowed {
		t.Fatalf("after the refund: %+v, want the fallback's whole budget back", d)
	}
}
