package redislimit_test

import (
	"context"
	"errors"
	"math"
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
)

// newPolicies returns a Limiter of several policies on client with a
// prefix of its own.
func newPolicies(t *testing.T, client redis.UniversalClient, policies []keyrate.Policy, opts ...redislimit.Option) *redislimit.Limiter {
	t.Helper()
	opts = append([]redislimit.Option{redislimit.WithPrefix(uniquePrefix())}, opts...)
	l, err := redislimit.NewPolicies(client, policies, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// room is a policy's part when it had room for the request; noRoom, when
// it had not. The trace fills in the policy.
func room(remaining int, refill, reset time.Duration) keyrate.PolicyDecision {
	return keyrate.PolicyDecision{Allowed: true, Remaining: remaining, RefillAfter: refill, ResetAfter: reset}
}

func noRoom(remaining int, retry, refill, reset time.Duration) keyrate.PolicyDecision {
	return keyrate.PolicyDecision{Remaining: remaining, RetryAfter: retry, RefillAfter: refill, ResetAfter: reset}
}

// policyRow is one row of a multi-policy trace: at offset from the start,
// Take(key, n), repeated times (once when 0), must be decided by the
// policy named bind with each policy's part as given, in the policies'
// order. A row without parts only has to be admitted.
type policyRow struct {
	at     time.Duration
	n      int
	repeat int
	bind   string
	parts  []keyrate.PolicyDecision
}

func runPolicyRows(t *testing.T, l *redislimit.Limiter, clock *keyrate.ManualClock, start time.Time, policies []keyrate.Policy, rows []policyRow) {
	t.Helper()
	for i, r := range rows {
		clock.Set(start.Add(r.at))
		for j := range r.parts {
			r.parts[j].Policy = policies[j]
		}
		for range max(r.repeat, 1) {
			got := mustTake(t, l, "client", r.n)
			if r.parts == nil {
				if !got.Allowed {
					t.Fatalf("row %d: at +%v Take(%d) refused: %+v", i, r.at, r.n, got)
				}
				continue
			}
			if want := backend.Combine(r.parts...); got != want || got.Policy != r.bind {
				t.Fatalf("row %d: at +%v Take(%d), binding %q\n got %+v\nwant %+v", i, r.at, r.n, r.bind, got, want)
			}
		}
	}
}

// tenPerSecondThousandPerDay is the trace of the case every API asks for:
// 10 per second and 1,000 per day for one client. Each decision names the
// binding policy and every policy's numbers; refusals by the day, made
// while the second had room, record nothing, so that the day's first free
// instant admits a full second's worth.
func tenPerSecondThousandPerDay(t *testing.T, client redis.UniversalClient) {
	const ms, s, day = time.Millisecond, time.Second, 24 * time.Hour
	policies := []keyrate.Policy{{Name: "second", Limit: 10, Window: s}, {Name: "day", Limit: 1000, Window: day}}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newPolicies(t, client, policies, redislimit.WithClock(clock))

	rows := []policyRow{
		// Admitted: the policy with the least Remaining binds.
		{at: 0, n: 10, bind: "second", parts: ps(room(0, s, s), room(990, day, day))},
		// The second refuses; the day had room, and keeps it.
		{at: 500 * ms, n: 1, bind: "second", parts: ps(noRoom(0, 500*ms, 500*ms, 500*ms), room(990, day-500*ms, day-500*ms))},
		// The ten of 0s have left the second's window (0s, 1s].
		{at: s, n: 1, bind: "second", parts: ps(room(9, s, s), room(989, day-s, day))},
	}
	// Ten a second from 2s to 99s, then 9 at 100s: the day is full.
	for sec := 2; sec < 100; sec++ {
		rows = append(rows, policyRow{at: time.Duration(sec) * s, n: 10})
	}
	rows = append(rows, []policyRow{
		{at: 100 * s, n: 9, bind: "day", parts: ps(room(1, s, s), room(0, day-100*s, day))},
		// The day refuses, the second alone had room.
		{at: 100500 * ms, n: 1, bind: "day", parts: ps(room(1, 500*ms, 500*ms), noRoom(0, day-100500*ms, day-100500*ms, day-500*ms))},
		// Both refuse: the longest wait binds, and is exact for both.
		{at: 100500 * ms, n: 2, bind: "day", parts: ps(noRoom(1, 500*ms, 500*ms, 500*ms), noRoom(0, day-100500*ms, day-100500*ms, day-500*ms))},
		// 11 can never fit the second: it binds with RetryAfter 0; the day
		// still says when 11 would fit it (the 10 of 0s and the 1 of 1s).
		{at: 100500 * ms, n: 11, bind: "second", parts: ps(noRoom(1, 0, 500*ms, 500*ms), noRoom(0, day-99500*ms, day-100500*ms, day-500*ms))},
		// Hammering half a second before the day frees: refused by the day
		// twenty times, while the second, empty, had room each time.
		{at: day - 500*ms, n: 1, repeat: 20, bind: "day", parts: ps(room(10, 0, 0), noRoom(0, 500*ms, 500*ms, 100500*ms))},
		// The ten of 0s leave the day: a full second's worth fits, so none
		// of those refusals was recorded in the second. Ties go to the
		// policy given first.
		{at: day, n: 10, bind: "second", parts: ps(room(0, s, s), room(0, s, day))},
		{at: day + 500*ms, n: 1, bind: "second", parts: ps(noRoom(0, 500*ms, 500*ms, 500*ms), noRoom(0, 500*ms, 500*ms, day-500*ms))},
		{at: day + s, n: 1, bind: "day", parts: ps(room(9, s, s), room(0, s, day))},
	}...)
	runPolicyRows(t, l, clock, start, policies, rows)
}

func ps(p ...keyrate.PolicyDecision) []keyrate.PolicyDecision { return p }

func TestTenPerSecondThousandPerDay(t *testing.T) {
	tenPerSecondThousandPerDay(t, redistest.Shared(t).Client(t))
}

// TestLongRefusalLeavesShortUntouched fills the day of 10 per second and
// 1,000 per day, then has it refuse 50 requests while the second has room:
// Redis holds exactly the admitted events before and after, and the
// second's part stays whole on every refusal.
func TestLongRefusalLeavesShortUntouched(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newPolicies(t, client, []keyrate.Policy{{Name: "second", Limit: 10, Window: time.Second}, {Name: "day", Limit: 1000, Window: 24 * time.Hour}},
		redislimit.WithClock(clock))
	for range 100 {
		if d := mustTake(t, l, "k", 10); !d.Allowed {
			t.Fatalf("filling the day at +%v: %+v", clock.Now().Sub(start), d)
		}
		clock.Advance(time.Second)
	}
	stored := func() int64 {
		t.Helper()
		g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k"))
		if err != nil || g.Held() != 10*int64(len(g.Entries)) {
			t.Fatalf("log %+v, %v; want entries of weight 10", g, err)
		}
		return int64(len(g.Entries))
	}
	if n := stored(); n != 100 {
		t.Fatalf("%d events stored after 100 admissions", n)
	}
	for i := range 50 {
		d := mustTake(t, l, "k", 1)
		second := d.Policies()[0]
		if d.Allowed || d.Policy != "day" || !second.Allowed || second.Remaining != 10 || second.RefillAfter != 0 {
			t.Fatalf("refusal %d by the day: %+v, second's part %+v; want the second whole", i, d, second)
		}
	}
	if n := stored(); n != 100 {
		t.Fatalf("%d events stored after 50 refusals, want the 100 admitted", n)
	}
}

// TestPoliciesConcurrent fires 50 calls for one key at one instant under
// 3 per second and 5 per minute, on two clients (two replicas), one with
// a deny cache: exactly 3 are admitted; a second later exactly 2 (the
// minute's rest); a second after that none. Every algorithm agrees here
// (a second on, GCRA's minute bucket holds 2 tokens, its second's a
// little over 2).
func TestPoliciesConcurrent(t *testing.T) {
	testPoliciesConcurrent(t, func(t *testing.T) redis.UniversalClient { return redistest.Shared(t).Client(t) })
}

func testPoliciesConcurrent(t *testing.T, newClient func(t *testing.T) redis.UniversalClient) {
	policies := []keyrate.Policy{{Name: "second", Limit: 3, Window: time.Second}, {Name: "minute", Limit: 5, Window: time.Minute}}
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) // a whole minute
			prefix := uniquePrefix()
			var replicas []*redislimit.Limiter
			for i := range 2 {
				opts := []redislimit.Option{redislimit.WithPrefix(prefix), redislimit.WithAlgorithm(alg),
					redislimit.WithClock(clock), redislimit.WithTimeout(5 * time.Second)}
				if i == 1 {
					opts = append(opts, redislimit.WithDenyCache(10))
				}
				l, err := redislimit.NewPolicies(newClient(t), policies, opts...)
				if err != nil {
					t.Fatal(err)
				}
				replicas = append(replicas, l)
			}
			for _, want := range []int64{3, 2, 0} {
				var admitted, failed atomic.Int64
				var wg sync.WaitGroup
				ready := make(chan struct{})
				for i := range 50 {
					l := replicas[i%2]
					wg.Go(func() {
						<-ready
						d, err := l.TakeContext(context.Background(), "hot", 1)
						switch {
						case err != nil:
							failed.Add(1)
						case d.Allowed:
							admitted.Add(1)
						}
					})
				}
				close(ready)
				wg.Wait()
				if failed.Load() != 0 || admitted.Load() != want {
					t.Fatalf("50 concurrent calls at %v: admitted %d with %d errors, want exactly %d",
						clock.Now().Format(time.TimeOnly), admitted.Load(), failed.Load(), want)
				}
				clock.Advance(time.Second)
			}
		})
	}
}

// TestTiers walks keys of three kinds through a limiter with tiers: free
// keys under the default tier, pro keys under two policies of their own,
// and keys whose tier function panics or names no tier, which get the
// default tier, never no limit. SetTier then raises the pro tier, changes
// the default and adds a tier, each taking effect at the next decision
// and counting the events already recorded.
func TestTiers(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	free := []keyrate.Policy{{Name: "minute", Limit: 3, Window: time.Minute}}
	pro := []keyrate.Policy{{Name: "minute", Limit: 10, Window: time.Minute}, {Name: "day", Limit: 100, Window: 24 * time.Hour}}
	tierOf := func(key string) string {
		switch {
		case strings.HasPrefix(key, "pro-"):
			return "pro"
		case strings.HasPrefix(key, "panic-"):
			panic("tier lookup failed")
		case strings.HasPrefix(key, "gold-"):
			return "gold"
		}
		return ""
	}
	l, err := redislimit.NewPolicies(client, free, redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock),
		redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{"pro": pro}), redislimit.WithDenyCache(100))
	if err != nil {
		t.Fatal(err)
	}
	// admits takes one event at a time for key until refused, and checks
	// that exactly want were admitted and the refusal names the policy.
	admits := func(key string, want int, policy string, limit int) {
		t.Helper()
		for i := range want + 1 {
			d := mustTake(t, l, key, 1)
			if d.Allowed != (i < want) {
				t.Fatalf("%s, request %d: %+v; want %d admitted", key, i, d, want)
			}
			if !d.Allowed && (d.Policy != policy || d.Limit != limit) {
				t.Fatalf("%s: refused by %q of %d, want %q of %d: %+v", key, d.Policy, d.Limit, policy, limit, d)
			}
		}
	}
	admits("free-1", 3, "minute", 3)
	admits("pro-1", 10, "minute", 10)
	if d := mustTake(t, l, "pro-1", 1); len(d.Policies()) != 2 || d.Policies()[1].Name != "day" || d.Policies()[1].Remaining != 90 {
		t.Fatalf("pro key's parts: %+v, want the minute and the day with 90 left", d.Policies())
	}
	admits("panic-1", 3, "minute", 3) // the default tier, and no crash
	admits("gold-1", 3, "minute", 3)  // a tier the map lacks: the default

	// The pro tier's minute goes to 20: pro-1 keeps its 10 events and gets
	// 10 more; its refusal, cached under the old tier, is not used.
	if err := l.SetTier("pro", []keyrate.Policy{{Name: "minute", Limit: 20, Window: time.Minute}, pro[1]}); err != nil {
		t.Fatal(err)
	}
	admits("pro-1", 10, "minute", 20)
	// The default tier goes to 5: free keys, panicking ones and unknown
	// tiers alike get 2 more.
	if err := l.SetTier("", []keyrate.Policy{{Name: "minute", Limit: 5, Window: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if l.Limit() != 5 || l.Window() != time.Minute || len(l.Policies()) != 1 || l.Policies()[0].Limit != 5 {
		t.Fatalf("after SetTier(\"\"): Limit %d, Window %v, Policies %v", l.Limit(), l.Window(), l.Policies())
	}
	admits("free-1", 2, "minute", 5)
	admits("panic-1", 2, "minute", 5)
	admits("gold-1", 2, "minute", 5)
	// A new tier: gold keys now count their 5 events against 6 per hour.
	if err := l.SetTier("gold", []keyrate.Policy{{Name: "hour", Limit: 6, Window: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	admits("gold-1", 1, "hour", 6)
	// A minute on, the minutes are empty, but gold's hour is not.
	clock.Advance(time.Minute)
	admits("free-1", 5, "minute", 5)
	admits("gold-1", 0, "hour", 6)
}

// TestSetTierConcurrent flips a tier between two sets of policies while
// callers decide its keys, with the deny cache on: every Decision lists
// one set or the other whole, never a mix, and no key ever gets more than
// the larger set allows.
func TestSetTierConcurrent(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	a := []keyrate.Policy{{Name: "minute", Limit: 4, Window: time.Minute}}
	b := []keyrate.Policy{{Name: "minute", Limit: 6, Window: time.Minute}, {Name: "hour", Limit: 8, Window: time.Hour}}
	l := newPolicies(t, client, a, redislimit.WithDenyCache(100), redislimit.WithTimeout(5*time.Second),
		redislimit.WithTiers(func(string) string { return "" }, nil))
	const keys, callers, calls = 4, 8, 40
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			next := a
			if i%2 == 0 {
				next = b
			}
			if err := l.SetTier("", next); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var callersDone sync.WaitGroup
	for c := range callers {
		callersDone.Go(func() {
			for i := range calls {
				k := (c + i) % keys
				d, err := l.TakeContext(context.Background(), "k"+string(rune('a'+k)), 1)
				if err != nil {
					t.Error(err)
					return
				}
				got := d.Policies()
				isA := len(got) == 1 && got[0].Policy == a[0]
				isB := len(got) == 2 && got[0].Policy == b[0] && got[1].Policy == b[1]
				if !isA && !isB {
					t.Errorf("a Decision under a mix of tiers: %+v", got)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	callersDone.Wait()
	close(stop)
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n > 6 || n < 4 {
			t.Errorf("key %d: %d admitted in one instant's minute, want 4 to 6", k, n)
		}
	}
}

// TestTierWithLongerWindow moves a full key from 5 per second to 5 per
// hour without admitting anything: the refusal under the hour keeps the
// key in Redis for the hour (it would have expired 1.5s after the last
// admission), so its events go on counting against the new policy.
func TestTierWithLongerWindow(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 5, time.Second, redislimit.WithClock(clock))
	if d := mustTake(t, l, "k", 5); !d.Allowed {
		t.Fatal(d)
	}
	key := l.StoreKey("k")
	if ttl := client.PTTL(ctx, key).Val(); ttl > 1500*time.Millisecond {
		t.Fatalf("PTTL after the admission under 5 per second: %v", ttl)
	}
	if err := l.SetTier("", []keyrate.Policy{{Limit: 5, Window: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(500 * time.Millisecond)
	want := single(5, time.Hour, keyrate.Decision{RetryAfter: time.Hour - 500*time.Millisecond,
		RefillAfter: time.Hour - 500*time.Millisecond, ResetAfter: time.Hour - 500*time.Millisecond})
	if d := mustTake(t, l, "k", 1); d != want {
		t.Fatalf("under 5 per hour: %+v\nwant %+v", d, want)
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl < time.Hour {
		t.Fatalf("PTTL after the refusal under 5 per hour: %v, want the key kept for the hour", ttl)
	}
	// The rewritten newest entry reads back as before: the events leave
	// the hour on time.
	clock.Advance(time.Hour)
	if d := mustTake(t, l, "k", 5); !d.Allowed {
		t.Fatalf("an hour after the events: %+v", d)
	}
}

// TestPoliciesRoundTrips: four policies are one script run, one round
// trip, per decision.
func TestPoliciesRoundTrips(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	var rt redistest.RoundTrips
	client.AddHook(&rt)
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		l := newPolicies(t, client, []keyrate.Policy{
			{Name: "a", Limit: 2, Window: time.Second}, {Name: "b", Limit: 5, Window: time.Minute},
			{Name: "c", Limit: 50, Window: time.Hour}, {Name: "d", Limit: 500, Window: 24 * time.Hour},
		}, redislimit.WithAlgorithm(alg))
		mustTake(t, l, "warm", 0)
		before := rt.Load()
		for i := range 20 {
			mustTake(t, l, "k", 1+i%2)
		}
		if got := rt.Load() - before; got != 20 {
			t.Fatalf("%v: 20 decisions under four policies took %d round trips, want 20", alg, got)
		}
	}
}

// TestPoliciesErrors checks every invalid set of policies, tier and
// SetTier call: an error wrapping keyrate.ErrConfig that names the field.
func TestPoliciesErrors(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	sec := keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	day := keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
	with := func(p keyrate.Policy, f func(*keyrate.Policy)) keyrate.Policy { f(&p); return p }
	five := []keyrate.Policy{sec, day, with(day, func(p *keyrate.Policy) { p.Name = "c" }), with(day, func(p *keyrate.Policy) { p.Name = "d" }), with(day, func(p *keyrate.Policy) { p.Name = "e" })}
	tierOf := func(string) string { return "" }
	cases := []struct {
		name     string
		policies []keyrate.Policy
		opts     []redislimit.Option
		field    string // what the message must name
	}{
		{"none", nil, nil, "policies is empty"},
		{"too many", five, nil, "policies has 5 policies"},
		{"zero limit", []keyrate.Policy{sec, with(day, func(p *keyrate.Policy) { p.Limit = 0 })}, nil, "policies[1].Limit"},
		{"huge limit", []keyrate.Policy{with(sec, func(p *keyrate.Policy) { p.Limit = math.MaxInt32 + 1 })}, nil, "policies[0].Limit"},
		{"zero window", []keyrate.Policy{sec, with(day, func(p *keyrate.Policy) { p.Window = 0 })}, nil, "policies[1].Window"},
		{"negative window", []keyrate.Policy{with(sec, func(p *keyrate.Policy) { p.Window = -time.Second })}, nil, "policies[0].Window"},
		{"sub-millisecond window", []keyrate.Policy{with(sec, func(p *keyrate.Policy) { p.Window = 999 * time.Microsecond })}, nil, "policies[0].Window"},
		{"fractional microseconds", []keyrate.Policy{with(sec, func(p *keyrate.Policy) { p.Window += time.Nanosecond })}, nil, "policies[0].Window"},
		{"unnamed among several", []keyrate.Policy{sec, with(day, func(p *keyrate.Policy) { p.Name = "" })}, nil, "policies[1].Name"},
		{"duplicate names", []keyrate.Policy{sec, with(day, func(p *keyrate.Policy) { p.Name = "second" })}, nil, `policies[1].Name "second" repeats policies[0].Name`},
		{"nil tier function", []keyrate.Policy{sec}, []redislimit.Option{redislimit.WithTiers(nil, nil)}, "tier function is nil"},
		{"tier named empty", []keyrate.Policy{sec}, []redislimit.Option{redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{"": {sec}})}, `tiers[""]`},
		{"empty tier", []keyrate.Policy{sec}, []redislimit.Option{redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{"pro": nil})}, `tiers["pro"] is empty`},
		{"bad tier window", []keyrate.Policy{sec}, []redislimit.Option{redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{
			"pro": {sec, with(day, func(p *keyrate.Policy) { p.Window = time.Microsecond })}})}, `tiers["pro"][1].Window`},
		{"duplicate tier names", []keyrate.Policy{sec}, []redislimit.Option{redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{
			"pro": {sec, sec}})}, `tiers["pro"][1].Name "second" repeats tiers["pro"][0].Name`},
	}
	for _, c := range cases {
		l, err := redislimit.NewPolicies(client, c.policies, c.opts...)
		if !errors.Is(err, keyrate.ErrConfig) || l != nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: NewPolicies = %v, %v; want nil and an error wrapping keyrate.ErrConfig naming %s", c.name, l, err, c.field)
		}
	}
	if _, err := redislimit.NewPolicies(nil, []keyrate.Policy{sec}); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("nil client: %v", err)
	}
	// New names its own arguments.
	if _, err := redislimit.New(client, 0, time.Second); err == nil || !strings.Contains(err.Error(), "limit is 0") {
		t.Errorf("New(limit 0): %v, want it to name the limit", err)
	}

	l, err := redislimit.NewPolicies(client, []keyrate.Policy{sec, day})
	if err != nil || l.Limit() != 10 || l.Window() != time.Second || len(l.Policies()) != 2 || l.Policies()[1] != day {
		t.Fatalf("NewPolicies(second, day) = %v, %v; Limit and Window are the first policy's, Policies both", l, err)
	}
	l.Policies()[0].Limit = 1 // a copy
	if l.Limit() != 10 {
		t.Fatal("Policies returned the limiter's own slice")
	}
	if err := l.SetTier("pro", []keyrate.Policy{sec}); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("SetTier of a named tier without WithTiers: %v", err)
	}
	if err := l.SetTier("", []keyrate.Policy{sec, sec}); !errors.Is(err, keyrate.ErrConfig) || !strings.Contains(err.Error(), "policies[1].Name") {
		t.Errorf("SetTier with duplicate names: %v", err)
	}
	if err := l.SetTier("", nil); !errors.Is(err, keyrate.ErrConfig) || l.Limit() != 10 {
		t.Errorf("SetTier with no policies: %v, and Limit %d after it", err, l.Limit())
	}
	tiered, err := redislimit.NewPolicies(client, []keyrate.Policy{sec}, redislimit.WithTiers(tierOf, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := tiered.SetTier("pro", []keyrate.Policy{{Name: "x", Limit: 0, Window: time.Second}}); !errors.Is(err, keyrate.ErrConfig) || !strings.Contains(err.Error(), `tiers["pro"][0].Limit`) {
		t.Errorf("SetTier with a zero limit: %v", err)
	}
}
