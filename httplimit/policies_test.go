package httplimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

var (
	perSecond = keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	perDay    = keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
)

// Every policy of a Decision is listed in both fields, with its own r and t:
// t is when the policy's quota comes back when it had room, when the
// request would fit it when it refused. Retry-After is the Decision's
// RetryAfter, the 429 names every refusing policy, and the single-policy
// fields describe the binding one.
func TestEveryPolicyInTheFields(t *testing.T) {
	type part = keyrate.PolicyDecision
	s := time.Second
	cases := []struct {
		name      string
		route     string
		policies  []keyrate.Policy // the backend's own
		parts     []part           // the decision's
		code      int
		policy    string // RateLimit-Policy
		rateLimit string
		retry     string
		violated  []string
		legacy    [3]string // RateLimit-Limit, -Remaining, -Reset: the binding policy
	}{
		{name: "admitted: the binding one has the least remaining",
			parts: []part{
				{Policy: perSecond, Allowed: true, Remaining: 9, RefillAfter: s, ResetAfter: s},
				{Policy: perDay, Allowed: true, Remaining: 990, RefillAfter: 51840 * s, ResetAfter: 86000 * s},
			},
			code: 200, policy: `"second";q=10;w=1, "day";q=1000;w=86400`, rateLimit: `"second";r=9;t=1, "day";r=990;t=51840`,
			legacy: [3]string{"10", "9", "1"}},
		{name: "refused by the short one",
			parts: []part{
				{Policy: perSecond, Remaining: 0, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond, ResetAfter: 900 * time.Millisecond},
				{Policy: perDay, Allowed: true, Remaining: 990, RefillAfter: 51840 * s, ResetAfter: 86000 * s},
			},
			code: 429, policy: `"second";q=10;w=1, "day";q=1000;w=86400`, rateLimit: `"second";r=0;t=1, "day";r=990;t=51840`,
			retry: "1", violated: []string{"second"}, legacy: [3]string{"10", "0", "1"}},
		{name: "refused by the long one: its t is when the request fits, not the refill",
			parts: []part{
				{Policy: perSecond, Allowed: true, Remaining: 4, RefillAfter: 200 * time.Millisecond, ResetAfter: 900 * time.Millisecond},
				{Policy: perDay, Remaining: 1, RetryAfter: 5*time.Hour + time.Millisecond, RefillAfter: time.Hour, ResetAfter: 86000 * s},
			},
			code: 429, policy: `"second";q=10;w=1, "day";q=1000;w=86400`, rateLimit: `"second";r=4;t=1, "day";r=1;t=18001`,
			retry: "18001", violated: []string{"day"}, legacy: [3]string{"1000", "1", "18001"}},
		{name: "refused by both: Retry-After is the longer wait",
			route: "api",
			parts: []part{
				{Policy: perSecond, Remaining: 0, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond, ResetAfter: 900 * time.Millisecond},
				{Policy: perDay, Remaining: 0, RetryAfter: 2 * time.Hour, RefillAfter: time.Hour, ResetAfter: 86000 * s},
			},
			code: 429, policy: `"second";q=10;w=1, "day";q=1000;w=86400`, rateLimit: `"second";r=0;t=1, "day";r=0;t=7200`,
			retry: "7200", violated: []string{"second", "day"}, legacy: [3]string{"1000", "0", "7200"}},
		{name: "can never fit the short one: 413, no Retry-After, t the refill",
			parts: []part{
				{Policy: perSecond, Remaining: 3, RefillAfter: 400 * time.Millisecond, ResetAfter: 900 * time.Millisecond},
				{Policy: perDay, Allowed: true, Remaining: 990, RefillAfter: 51840 * s, ResetAfter: 86000 * s},
			},
			code: 413, policy: `"second";q=10;w=1, "day";q=1000;w=86400`, rateLimit: `"second";r=3;t=1, "day";r=990;t=51840`,
			legacy: [3]string{"10", "3", "1"}},
		{name: "a window that is not whole seconds has no w",
			policies: []keyrate.Policy{{Name: "burst", Limit: 10, Window: 500 * time.Millisecond}, {Name: "slow", Limit: 100, Window: 90 * time.Minute}},
			parts: []part{
				{Policy: keyrate.Policy{Name: "burst", Limit: 10, Window: 500 * time.Millisecond}, Allowed: true, Remaining: 9, RefillAfter: 500 * time.Millisecond, ResetAfter: 500 * time.Millisecond},
				{Policy: keyrate.Policy{Name: "slow", Limit: 100, Window: 90 * time.Minute}, Allowed: true, Remaining: 99, RefillAfter: 90 * time.Minute, ResetAfter: 90 * time.Minute},
			},
			code: 200, policy: `"burst";q=10, "slow";q=100;w=5400`, rateLimit: `"burst";r=9;t=1, "slow";r=99;t=5400`,
			legacy: [3]string{"10", "9", "1"}},
		{name: "one unnamed policy, no route: default",
			policies: []keyrate.Policy{{Limit: 3, Window: time.Minute}},
			parts:    []part{{Policy: keyrate.Policy{Limit: 3, Window: time.Minute}, Remaining: 0, RetryAfter: 20 * s, RefillAfter: 20 * s, ResetAfter: 50 * s}},
			code:     429, policy: `"default";q=3;w=60`, rateLimit: `"default";r=0;t=20`,
			retry: "20", violated: []string{"default"}, legacy: [3]string{"3", "0", "20"}},
		{name: "one unnamed policy under a route: the route's name",
			route:    "search",
			policies: []keyrate.Policy{{Limit: 3, Window: time.Minute}},
			parts:    []part{{Policy: keyrate.Policy{Limit: 3, Window: time.Minute}, Allowed: true, Remaining: 2, RefillAfter: time.Minute, ResetAfter: time.Minute}},
			code:     200, policy: `"search";q=3;w=60`, rateLimit: `"search";r=2;t=60`,
			legacy: [3]string{"3", "2", "60"}},
		{name: "a named policy and an unnamed one under a route",
			route:    "search",
			policies: []keyrate.Policy{{Limit: 3, Window: time.Second}, {Name: "hour", Limit: 50, Window: time.Hour}},
			parts: []part{
				{Policy: keyrate.Policy{Limit: 3, Window: time.Second}, Allowed: true, Remaining: 2, RefillAfter: s, ResetAfter: s},
				{Policy: keyrate.Policy{Name: "hour", Limit: 50, Window: time.Hour}, Allowed: true, Remaining: 40, RefillAfter: 1800 * s, ResetAfter: time.Hour},
			},
			code: 200, policy: `"search";q=3;w=1, "hour";q=50;w=3600`, rateLimit: `"search";r=2;t=1, "hour";r=40;t=1800`,
			legacy: [3]string{"3", "2", "1"}},
		{name: "a tier's policies, not the backend's default ones",
			parts: []part{
				{Policy: keyrate.Policy{Name: "pro-second", Limit: 100, Window: time.Second}, Allowed: true, Remaining: 99, RefillAfter: s, ResetAfter: s},
			},
			code: 200, policy: `"pro-second";q=100;w=1`, rateLimit: `"pro-second";r=99;t=1`,
			legacy: [3]string{"100", "99", "1"}},
		{name: "nothing held in a policy: no t for it",
			parts: []part{
				{Policy: perSecond, Allowed: true, Remaining: 10},
				{Policy: perDay, Allowed: true, Remaining: 995, RefillAfter: 3600 * s, ResetAfter: 7200 * s},
			},
			code: 200, policy: `"second";q=10;w=1, "day";q=1000;w=86400`, rateLimit: `"second";r=10, "day";r=995;t=3600`,
			legacy: [3]string{"10", "10", "0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policies := c.policies
			if policies == nil {
				policies = []keyrate.Policy{perSecond, perDay}
			}
			h := newHandler(t, combined{policies: policies, parts: c.parts}, httplimit.WithRoute(c.route),
				httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.LegacyHeaders))
			rec := get(h, "/")
			hd := rec.Header()
			if rec.Code != c.code || hd.Get("RateLimit-Policy") != c.policy || hd.Get("RateLimit") != c.rateLimit || hd.Get("Retry-After") != c.retry {
				t.Fatalf("got %d\nRateLimit-Policy: %s\nRateLimit: %s\nRetry-After: %q\nwant %d\n%s\n%s\n%q", rec.Code,
					hd.Get("RateLimit-Policy"), hd.Get("RateLimit"), hd.Get("Retry-After"), c.code, c.policy, c.rateLimit, c.retry)
			}
			// One line per field: the middleware's members are one list.
			if len(hd.Values("RateLimit-Policy")) != 1 || len(hd.Values("RateLimit")) != 1 {
				t.Errorf("fields over several lines: %q %q", hd.Values("RateLimit-Policy"), hd.Values("RateLimit"))
			}
			if got := [3]string{hd.Get("RateLimit-Limit"), hd.Get("RateLimit-Remaining"), hd.Get("RateLimit-Reset")}; got != c.legacy {
				t.Errorf("RateLimit-Limit, -Remaining, -Reset = %q, want the binding policy's %q", got, c.legacy)
			}
			if rec.Code == 200 {
				return
			}
			if p := decodeProblem(t, rec); !slices.Equal(p.Violated, c.violated) {
				t.Errorf("violated-policies %q, want %q", p.Violated, c.violated)
			}
		})
	}
}

// A store outage under FailOpen: the request is served with the backend's
// policies, every one of them, and no RateLimit, which only a decision can
// fill.
func TestFailOpenAdvertisesEveryPolicy(t *testing.T) {
	down := unavailable{perSecond, perDay}
	for _, route := range []string{"", "search"} {
		rec := get(newHandler(t, down, httplimit.WithRoute(route)), "/")
		want := `"second";q=10;w=1, "day";q=1000;w=86400` // named policies keep their names under a route
		if rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != want || rec.Header().Get("RateLimit") != "" {
			t.Errorf("route %q: %d RateLimit-Policy %q RateLimit %q, want 200 %q and no RateLimit", route, rec.Code,
				rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), want)
		}
	}
}

// A per-route budget inside a global one, both with a per-second and a
// per-day policy, named apart: all four members stay apart, and each
// middleware adds its own line.
func TestNestedMiddlewaresWithPolicies(t *testing.T) {
	clock := keyrate.NewManualClock(t0)
	global := newModel(clock, perSecond, perDay)
	search := newModel(clock, keyrate.Policy{Name: "search-second", Limit: 2, Window: time.Second}, keyrate.Policy{Name: "search-day", Limit: 100, Window: 24 * time.Hour})
	outer, err := httplimit.New(global)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := httplimit.New(search, httplimit.WithRoute("search"))
	if err != nil {
		t.Fatal(err)
	}
	h := outer.Handler(inner.Handler(okHandler))
	wantPolicy := []string{`"second";q=10;w=1, "day";q=1000;w=86400`, `"search-second";q=2;w=1, "search-day";q=100;w=86400`}
	steps := []struct {
		advance   time.Duration
		code      int
		rateLimit []string
		retry     string
		violated  []string
	}{
		{0, 200, []string{`"second";r=9;t=1, "day";r=999;t=86400`, `"search-second";r=1;t=1, "search-day";r=99;t=86400`}, "", nil},
		{0, 200, []string{`"second";r=8;t=1, "day";r=998;t=86400`, `"search-second";r=0;t=1, "search-day";r=98;t=86400`}, "", nil},
		// The global budget admits and records it; the route's refuses it,
		// recording nothing against either of its policies.
		{0, 429, []string{`"second";r=7;t=1, "day";r=997;t=86400`, `"search-second";r=0;t=1, "search-day";r=98;t=86400`}, "1", []string{"search-second"}},
		{time.Second, 200, []string{`"second";r=9;t=1, "day";r=996;t=86399`, `"search-second";r=1;t=1, "search-day";r=97;t=86399`}, "", nil},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		rec := get(h, "/api/search")
		hd := rec.Header()
		if rec.Code != s.code || !slices.Equal(hd.Values("RateLimit-Policy"), wantPolicy) || !slices.Equal(hd.Values("RateLimit"), s.rateLimit) || hd.Get("Retry-After") != s.retry {
			t.Fatalf("request %d: %d\nRateLimit-Policy: %q\nRateLimit: %q\nRetry-After: %q\nwant %d\n%q\n%q\n%q", i+1, rec.Code,
				hd.Values("RateLimit-Policy"), hd.Values("RateLimit"), hd.Get("Retry-After"), s.code, wantPolicy, s.rateLimit, s.retry)
		}
		if s.code == 429 {
			if p := decodeProblem(t, rec); !slices.Equal(p.Violated, s.violated) {
				t.Errorf("request %d: violated-policies %q, want %q", i+1, p.Violated, s.violated)
			}
		}
	}
}

// Through the model of two policies, 3 a second and 5 a minute: the short
// one refuses first, then the long one while the short one has room, and
// each refusal's Retry-After is exactly when the request fits.
func TestRefusedByEitherPolicy(t *testing.T) {
	clock := keyrate.NewManualClock(t0)
	b := newModel(clock, keyrate.Policy{Name: "s", Limit: 3, Window: time.Second}, keyrate.Policy{Name: "m", Limit: 5, Window: time.Minute})
	h := newHandler(t, b)
	steps := []struct {
		advance   time.Duration
		code      int
		rateLimit string
		retry     string
		violated  string
	}{
		{0, 200, `"s";r=2;t=1, "m";r=4;t=60`, "", ""},
		{0, 200, `"s";r=1;t=1, "m";r=3;t=60`, "", ""},
		{0, 200, `"s";r=0;t=1, "m";r=2;t=60`, "", ""},
		{0, 429, `"s";r=0;t=1, "m";r=2;t=60`, "1", "s"},
		{time.Second, 200, `"s";r=2;t=1, "m";r=1;t=59`, "", ""},
		{0, 200, `"s";r=1;t=1, "m";r=0;t=59`, "", ""},
		// The short policy has room and says so; the long one refuses.
		{0, 429, `"s";r=1;t=1, "m";r=0;t=59`, "59", "m"},
		// 59s on, the three requests at 0s have left the minute.
		{59 * time.Second, 200, `"s";r=2;t=1, "m";r=2;t=1`, "", ""},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		rec := get(h, "/")
		hd := rec.Header()
		if rec.Code != s.code || hd.Get("RateLimit") != s.rateLimit || hd.Get("Retry-After") != s.retry {
			t.Fatalf("request %d: %d RateLimit %q Retry-After %q; want %d %q %q", i+1, rec.Code, hd.Get("RateLimit"), hd.Get("Retry-After"), s.code, s.rateLimit, s.retry)
		}
		if s.code == 429 {
			if p := decodeProblem(t, rec); len(p.Violated) != 1 || p.Violated[0] != s.violated {
				t.Errorf("request %d: violated-policies %q, want [%q]", i+1, p.Violated, s.violated)
			}
		}
	}
}

// unavailable is a store that is down, and lists its policies.
type unavailable []keyrate.Policy

func (b unavailable) TakeContext(context.Context, string, int) (keyrate.Decision, error) {
	return keyrate.Decision{}, errors.New("store unavailable")
}
func (b unavailable) Policies() []keyrate.Policy { return b }
func (unavailable) Tiered() bool                 { return false }

func (b unavailable) TimeBudget() time.Duration { return 0 }
