package redislimit_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// The policies of the TakeAll tests: a default tier of two policies, and a
// "pro" tier of one for keys that start with "pro-".
var (
	allDefault = []keyrate.Policy{{Name: "second", Limit: 3, Window: time.Second}, {Name: "ten", Limit: 5, Window: 10 * time.Second}}
	allPro     = []keyrate.Policy{{Name: "pro", Limit: 6, Window: 2 * time.Second}}
)

// hitsOf returns a TakeAll request of weight n on every one of keys.
func hitsOf(n int, keys []string) []keyrate.Hit {
	hits := make([]keyrate.Hit, len(keys))
	for i, k := range keys {
		hits[i] = keyrate.Hit{Key: k, Weight: n}
	}
	return hits
}

func allTier(key string) string {
	if strings.HasPrefix(key, "pro-") {
		return "pro"
	}
	return ""
}

// newAllLimiter returns a Limiter of the TakeAll tests' tiers on client,
// deciding on clock.
func newAllLimiter(t *testing.T, client redis.UniversalClient, clock keyrate.Clock, opts ...redislimit.Option) *redislimit.Limiter {
	t.Helper()
	opts = append([]redislimit.Option{redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock),
		redislimit.WithTiers(allTier, map[string][]keyrate.Policy{"pro": allPro})}, opts...)
	l, err := redislimit.NewPolicies(client, allDefault, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sameGroup puts every key in one group, so that a Cluster decides them
// in one slot.
func sameGroup(string) string { return "g" }

// TakeAll on Redis decides as the in-process Limiter's TakeAll does, every
// number of every Decision, over random calls of one to four keys
// (duplicates, tiers, a key of zero bytes, one of 200 bytes), weights
// (0, negative, over every limit) and clock moves, on a server and on a
// Cluster, whose keys share a group.
func TestTakeAllMatchesInProcess(t *testing.T) {
	t.Run("Server", func(t *testing.T) {
		compareTakeAll(t, redistest.Shared(t).Client(t))
	})
	t.Run("Cluster", func(t *testing.T) {
		compareTakeAll(t, redistest.StartClusterT(t).Client(t), redislimit.WithHashTagFunc(sameGroup))
	})
}

func compareTakeAll(t *testing.T, client redis.UniversalClient, opts ...redislimit.Option) {
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newAllLimiter(t, client, clock, opts...)
	model, err := keyrate.NewPolicies(allDefault, keyrate.WithClock(clock),
		keyrate.WithTiers(allTier, map[string][]keyrate.Policy{"pro": allPro}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	pool := []string{"a", "b", "pro-c", "d\x00e", strings.Repeat("f", 200)}
	weights := []int{1, 1, 1, 2, 0, -1, 7}
	rng := rand.New(rand.NewPCG(1, 2))
	admitted := 0
	for step := range 400 {
		// Half the calls weigh every key alike, the others each key at its own.
		hits := make([]keyrate.Hit, 1+rng.IntN(4))
		n := weights[rng.IntN(len(weights))]
		for i := range hits {
			hits[i] = keyrate.Hit{Key: pool[rng.IntN(len(pool))], Weight: n}
			if step%2 == 1 {
				hits[i].Weight = weights[rng.IntN(len(weights))]
			}
		}
		want, wantOK, _ := model.TakeAll(context.Background(), hits)
		got, ok, err := l.TakeAll(context.Background(), hits)
		if err != nil {
			t.Fatalf("step %d: TakeAll(%v): %v", step, hits, err)
		}
		if ok != wantOK {
			t.Fatalf("step %d: TakeAll(%v) admitted %v, in process %v", step, hits, ok, wantOK)
		}
		if ok && slices.ContainsFunc(hits, func(h keyrate.Hit) bool { return h.Weight > 0 }) {
			admitted++
		}
		for i := range want {
			if ok && hits[i].Weight > 0 && got[i].Receipt.N() == 0 {
				t.Fatalf("step %d: TakeAll(%v), hit %d: admitted without a receipt", step, hits, i)
			}
			// Each backend's receipt is its own.
			want[i].Receipt, got[i].Receipt = keyrate.Receipt{}, keyrate.Receipt{}
			if !sameDecision(got[i], want[i]) {
				t.Fatalf("step %d: TakeAll(%v), hit %d:\n got %+v %+v\nwant %+v %+v", step, hits, i, got[i], got[i].Policies(), want[i], want[i].Policies())
			}
		}
		clock.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
	}
	if admitted < 50 {
		t.Errorf("only %d of 400 calls admitted: the sequence tests little", admitted)
	}
}

// sameDecision reports whether a and b agree on every field and every
// policy's numbers.
func sameDecision(a, b keyrate.Decision) bool {
	pa, pb := a.Policies(), b.Policies()
	if len(pa) != len(pb) {
		return false
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return false
		}
	}
	return a == b
}

// One key refusing refuses the call and records nothing against the
// others; an admitted call is recorded against every key, in Redis, where
// TakeContext sees it: the two share each key's budget.
func TestTakeAllAllOrNothing(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newAllLimiter(t, client, clock)
	ctx := context.Background()
	for range 3 {
		mustTake(t, l, "full", 1)
	}
	ds, ok, err := l.TakeAll(ctx, hitsOf(1, []string{"fresh", "full"}))
	if err != nil || ok || !ds[0].Allowed || ds[1].Allowed || ds[0].Remaining != 3 || ds[1].RetryAfter != time.Second {
		t.Fatalf("TakeAll(fresh, full): %+v, %v, %v; want refused by full, fresh described with its 3", ds, ok, err)
	}
	if n, err := redislimit.EventsStored(ctx, client, l.StoreKey("fresh")); err != nil || n != 0 {
		t.Fatalf("the refused call left %d events on fresh (%v), want none", n, err)
	}
	ds, ok, err = l.TakeAll(ctx, hitsOf(1, []string{"fresh", "other", "fresh"}))
	if err != nil || !ok || ds[0] != ds[2] || ds[0].Remaining != 1 || ds[1].Remaining != 2 {
		t.Fatalf("TakeAll(fresh, other, fresh): %+v, %v, %v; want admitted, fresh counted twice", ds, ok, err)
	}
	if d := mustTake(t, l, "fresh", 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("TakeContext on fresh after TakeAll: %+v, want its last one", d)
	}
	if ds, ok, err := l.TakeAll(ctx, hitsOf(1, nil)); err != nil || !ok || len(ds) != 0 {
		t.Errorf("TakeAll of no keys: %v, %v, %v; want admitted", ds, ok, err)
	}
	if _, ok, err := l.TakeAll(ctx, hitsOf(1, []string{"a", ""})); !errors.Is(err, keyrate.ErrInvalidKey) || ok {
		t.Errorf("TakeAll with an empty key: %v, %v; want ErrInvalidKey", ok, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok, err := l.TakeAll(cancelled, hitsOf(1, []string{"a"})); !errors.Is(err, context.Canceled) || ok {
		t.Errorf("TakeAll with a done context: %v, %v; want context.Canceled", ok, err)
	}
}

// TakeAll of many keys is all or nothing as of few: at 1,000 keys (each
// checked, then written, in nested calls of the script's), and at 1,001
// and 12,000 (decided by the general code alone: Lua's calls nest to
// 20,000, two a key), a request of fresh keys is admitted, one that ends
// on a key at its limit is refused and records nothing, and one with a
// key that is no log fails with Redis's error and records nothing.
func TestTakeAllManyKeys(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newAllLimiter(t, client, clock, redislimit.WithTimeout(10*time.Second))
	ctx := context.Background()
	for _, n := range []int{1000, 1001, 12000} {
		keys := func(from string) []string {
			ks := make([]string, n)
			for i := range ks {
				ks[i] = fmt.Sprintf("%s-%d-%d", from, n, i)
			}
			return ks
		}
		first := keys("first")
		ds, ok, err := l.TakeAll(ctx, hitsOf(3, first))
		if err != nil || !ok || ds[n-1].Remaining != 0 {
			t.Fatalf("%d keys: TakeAll of fresh keys: %v, %v; want admitted, each at its limit", n, ok, err)
		}
		fresh := keys("fresh")
		ds, ok, err = l.TakeAll(ctx, hitsOf(1, append(fresh[:n-1], first[0])))
		if err != nil || ok || !ds[0].Allowed || ds[n-1].Allowed {
			t.Fatalf("%d keys: TakeAll ending on a full key: %v, %v; want refused by it alone", n, ok, err)
		}
		bad := fresh[n/2]
		if err := client.HSet(ctx, l.StoreKey(bad), "x", "y").Err(); err != nil {
			t.Fatal(err)
		}
		if _, ok, err = l.TakeAll(ctx, hitsOf(1, fresh)); err == nil || ok || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("%d keys: TakeAll with a key of another type: %v, %v; want Redis's WRONGTYPE", n, ok, err)
		}
		for _, k := range []string{fresh[0], fresh[n/2-1], fresh[n-2]} {
			if got, err := redislimit.EventsStored(ctx, client, l.StoreKey(k)); err != nil || got != 0 {
				t.Fatalf("%d keys: the refused and failed calls left %d events on %s (%v), want none", n, got, k, err)
			}
		}
	}
}

// Keys of any bytes are separate budgets, each under its own Redis key;
// a key over 128 bytes is stored under its digest.
func TestTakeAllKeysOfAnyBytes(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	l := newLimiter(t, client, 1, time.Hour)
	raw := sha256.Sum256([]byte("api key"))
	keys := []string{"a\x00b", "a\x00c", string(raw[:]), strings.Repeat("k", 129), strings.Repeat("k", 130), "{a}", "a}"}
	ds, ok, err := l.TakeAll(context.Background(), hitsOf(1, keys))
	if err != nil || !ok {
		t.Fatalf("TakeAll over %d distinct keys: %v, %v", len(keys), ok, err)
	}
	for i, key := range keys {
		if ds[i].Remaining != 0 {
			t.Errorf("key %d: %+v", i, ds[i])
		}
		if n, err := redislimit.EventsStored(context.Background(), client, l.StoreKey(key)); err != nil || n != 1 {
			t.Errorf("key %d holds %d events (%v), want 1", i, n, err)
		}
		if sk := l.StoreKey(key); len(key) > 128 && strings.Contains(sk, key) {
			t.Errorf("key %d of %d bytes stored as itself", i, len(key))
		}
	}
	if _, ok, _ := l.TakeAll(context.Background(), hitsOf(1, keys[:1])); ok {
		t.Error("a key at its limit was admitted again")
	}
}

// Several clients calling TakeAll at once over overlapping keys admit, per
// key, at most its limit, refuse a call only when one of its keys is full,
// and record nothing for the calls they refuse: each key's log holds
// exactly what the admitted calls took.
func TestTakeAllConcurrent(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := uniquePrefix()
	const limit = 15
	var limiters []*redislimit.Limiter
	for range 3 {
		l, err := redislimit.New(srv.Client(t), limit, time.Hour, redislimit.WithPrefix(prefix), redislimit.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		limiters = append(limiters, l)
	}
	// 20 calls of each set: more than the limit, so that every set meets
	// a full key.
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"a", "c"}, {"d"}}
	var mu sync.Mutex
	taken := map[string]int{}
	refused := make([]bool, len(sets))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 20 * len(sets) {
		l, set := limiters[i%len(limiters)], i%len(sets)
		wg.Go(func() {
			_, ok, err := l.TakeAll(context.Background(), hitsOf(1, sets[set]))
			if err != nil {
				failed.Add(1)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				refused[set] = true
				return
			}
			for _, k := range sets[set] {
				taken[k]++
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if taken[k] > limit {
			t.Errorf("key %s admitted %d, over its limit of %d", k, taken[k], limit)
		}
		n, err := redislimit.EventsStored(context.Background(), srv.Client(t), limiters[0].StoreKey(k))
		if err != nil || n != int64(taken[k]) {
			t.Errorf("key %s holds %d events (%v), want the %d admitted", k, n, err, taken[k])
		}
	}
	for i, set := range sets {
		full := false
		for _, k := range set {
			full = full || taken[k] == limit
		}
		if !refused[i] || !full {
			t.Errorf("set %q: refused %v, admitted %v; want refusals, and only once one of its keys was full", set, refused[i], taken)
		}
	}
}

// On a Cluster, keys of several hash tags cannot be decided in one script:
// TakeAll says so, and asks nothing; grouped by WithHashTagFunc, they are
// decided together, and TakeContext shares their budgets.
func TestTakeAllClusterGroups(t *testing.T) {
	client := redistest.StartClusterT(t).Client(t)
	ungrouped := newLimiter(t, client, 2, time.Hour)
	if _, ok, err := ungrouped.TakeAll(context.Background(), hitsOf(1, []string{"a", "b"})); !errors.Is(err, keyrate.ErrConfig) || ok {
		t.Fatalf("ungrouped keys on a Cluster: %v, %v; want an error wrapping ErrConfig", ok, err)
	}
	if _, ok, err := ungrouped.TakeAll(context.Background(), hitsOf(1, []string{"a", "a"})); err != nil || !ok {
		t.Fatalf("one key, twice, on a Cluster: %v, %v", ok, err)
	}
	domain := func(key string) string { d, _, _ := strings.Cut(key, "/"); return d }
	l := newLimiter(t, client, 2, time.Hour, redislimit.WithHashTagFunc(domain))
	for i := range 3 {
		_, ok, err := l.TakeAll(context.Background(), hitsOf(1, []string{"shop/user", "shop/path", "shop/user"}))
		if err != nil || ok != (i == 0) {
			t.Fatalf("call %d: %v, %v; want only the first admitted (user counts twice)", i, ok, err)
		}
	}
	if d := mustTake(t, l, "shop/path", 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("TakeContext on a grouped key: %+v, want the one TakeAll left", d)
	}
	if a, b := tagOf(l.StoreKey("shop/a")), tagOf(l.StoreKey("shop/b")); a != b || a == tagOf(ungrouped.StoreKey("shop/a")) {
		t.Errorf("grouped keys under tags %q and %q (ungrouped: %q), want one tag, the group's", a, b, tagOf(ungrouped.StoreKey("shop/a")))
	}
}

// tagOf returns the hash tag of a Redis key the Limiter wrote.
func tagOf(redisKey string) string {
	_, rest, _ := strings.Cut(redisKey, "{")
	tag, _, _ := strings.Cut(rest, "}")
	return tag
}

// A hash tag function that panics leaves the key its own tag; a nil one
// is refused.
func TestHashTagFunc(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	if _, err := redislimit.New(client, 1, time.Hour, redislimit.WithHashTagFunc(nil)); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("a nil hash tag function: %v, want ErrConfig", err)
	}
	plain := newLimiter(t, client, 1, time.Hour)
	panics := newLimiter(t, client, 1, time.Hour, redislimit.WithHashTagFunc(func(key string) string {
		if key == "boom" {
			panic("boom")
		}
		return ""
	}))
	for _, key := range []string{"boom", "calm"} {
		if got, want := tagOf(panics.StoreKey(key)), tagOf(plain.StoreKey(key)); got != want {
			t.Errorf("key %q under tag %q, want its own %q", key, got, want)
		}
	}
	if d := mustTake(t, panics, "boom", 1); !d.Allowed {
		t.Errorf("a key whose group panics: %+v", d)
	}
}

// A refusal the deny cache holds for any key refuses the call without a
// round trip; the other keys, not asked about, are described as not
// refused, with their limit and nothing more. Once the hold passes, Redis
// is asked again.
func TestTakeAllDenyCache(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	trips := &redistest.RoundTrips{}
	client.AddHook(trips)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newAllLimiter(t, client, clock, redislimit.WithDenyCache(100))
	ctx := context.Background()
	for range 3 {
		mustTake(t, l, "full", 1)
	}
	ds, ok, err := l.TakeAll(ctx, hitsOf(1, []string{"other", "full"}))
	if err != nil || ok || ds[1].Allowed {
		t.Fatalf("first refusal: %+v, %v, %v", ds, ok, err)
	}
	// full at a weight of 1 is in the cache: other, given twice, is not asked.
	before := trips.Load()
	clock.Advance(100 * time.Millisecond)
	ds, ok, err = l.TakeAll(ctx, hitsOf(1, []string{"other", "full", "other"}))
	if err != nil || ok || trips.Load() != before {
		t.Fatalf("refused again: %v, %v, %d round trips; want refused with none", ok, err, trips.Load()-before)
	}
	if ds[1].Allowed || ds[1].RetryAfter != 900*time.Millisecond || !ds[0].Allowed || len(ds[0].Policies()) != 0 || ds[0].Limit != 3 || ds[2] != ds[0] {
		t.Errorf("decisions from the cache: %+v; want full's refusal counted down, other not asked", ds)
	}
	clock.Advance(900 * time.Millisecond)
	if _, ok, err := l.TakeAll(ctx, hitsOf(1, []string{"other", "full"})); err != nil || !ok || trips.Load() == before {
		t.Errorf("after the refusal's hold: %v, %v; want Redis asked, and admitted", ok, err)
	}
}

// While Redis cannot answer, TakeAll fails at once after the first call,
// or, with a fallback, the fallback's TakeAll decides: all or nothing, at
// the share of each key's limit, every Decision marked.
func TestTakeAllOutage(t *testing.T) {
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprint("fallback=", withFallback), func(t *testing.T) {
			opts := []redislimit.Option{redislimit.WithTimeout(budget)}
			if withFallback {
				opts = append(opts, redislimit.WithLocalFallback(0.5))
			}
			l, err := redislimit.NewPolicies(deadClient(t), []keyrate.Policy{{Limit: 4, Window: time.Hour}},
				append(opts, redislimit.WithTiers(allTier, map[string][]keyrate.Policy{"pro": {{Limit: 10, Window: time.Hour}}}))...)
			if err != nil {
				t.Fatal(err)
			}
			var took []time.Duration
			admitted := 0
			for i := range 12 {
				start := time.Now()
				ds, ok, err := l.TakeAll(context.Background(), hitsOf(1, []string{"a", "pro-b"}))
				took = append(took, time.Since(start))
				if !withFallback {
					if err == nil || ok || !errors.Is(err, keyrate.ErrUnavailable) || (i > 0 && errors.Is(err, context.DeadlineExceeded)) {
						t.Fatalf("call %d: %v, %v; want ErrUnavailable, at once after the first", i, ok, err)
					}
					continue
				}
				if err != nil || !ds[0].Fallback || !ds[1].Fallback || ds[1].Limit != 5 {
					t.Fatalf("call %d: %+v, %v; want the fallback's decisions, pro-b at 10 x 0.5", i, ds, err)
				}
				if ok {
					admitted++
				}
			}
			if withFallback && admitted != 2 {
				t.Errorf("the fallback admitted %d calls, want 2: a's 4 at 0.5", admitted)
			}
			if p50 := median(took[3:]); p50 >= fastCall {
				t.Errorf("p50 after the first 3: %v, want under %v", p50, fastCall)
			}
		})
	}
}

// The production path: Redis's TIME decides, once for every key.
func TestTakeAllServerTime(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow} {
		l := newLimiter(t, client, 2, time.Hour, redislimit.WithAlgorithm(alg))
		for i := range 3 {
			ds, ok, err := l.TakeAll(context.Background(), hitsOf(1, []string{"x", "y"}))
			if err != nil || ok != (i < 2) {
				t.Fatalf("%v, call %d: %v, %v", alg, i, ok, err)
			}
			// Instants round up to a tick of the log, 1µs for an hour.
			if ok && (ds[0].Remaining != 1-i || ds[0].ResetAfter <= 0 || ds[0].ResetAfter > time.Hour+time.Microsecond) {
				t.Fatalf("%v, call %d: %+v", alg, i, ds[0])
			}
		}
	}
}

// Each key of an admitted TakeAll can be refunded on its own.
func TestTakeAllRefunds(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newAllLimiter(t, client, clock)
	ctx := context.Background()
	ds, ok, err := l.TakeAll(ctx, hitsOf(2, []string{"user", "org"}))
	if err != nil || !ok {
		t.Fatalf("TakeAll: %v, %v", ok, err)
	}
	for i, key := range []string{"user", "org"} {
		if err := l.Refund(ctx, key, &ds[i]); err != nil {
			t.Fatalf("refund of %s: %v", key, err)
		}
		if d := mustTake(t, l, key, 0); d.Remaining != 3 {
			t.Errorf("%s after its refund: %d remaining, want 3", key, d.Remaining)
		}
	}
}
