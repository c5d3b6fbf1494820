package httplimit_test

import (
	"github.com/keyrate/keyrate/middleware"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// An admitted request through the in-process limiter, with a route and the
// default identity, costs at most two allocations (its key, and one for
// its fields: the header-map slices and the bytes of their values) and
// still gets every field; a third, the context that carries the client's
// identity, when the limiter has tiers whose function reads it.
func TestAdmitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, tc := range []struct {
		name string
		opts []keyrate.Option
		max  float64
	}{
		{"no tiers", nil, 2},
		{"tiers", []keyrate.Option{keyrate.WithTiers(func(string) string { return "" }, nil)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := keyrate.New(1<<20, time.Hour, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			m, err := httplimit.New(l, httplimit.WithRoute("search"))
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(bare)
			rs := requests(64)
			w := &discard{h: make(http.Header)}
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				clear(w.h)
				h.ServeHTTP(w, rs[i%len(rs)])
				i++
			})
			if allocs > tc.max {
				t.Errorf("%.1f allocations per admitted request, want at most %v", allocs, tc.max)
			}
			if p, r := w.h.Get("RateLimit-Policy"), w.h.Get("RateLimit"); p != `"search";q=1048576;w=3600` || r == "" {
				t.Fatalf("fields RateLimit-Policy %q, RateLimit %q", p, r)
			}
		})
	}
}

// Under two policies, an admitted request costs as much: both policies'
// members go in the one RateLimit value, and RateLimit-Policy was written
// once, in New. The backend says it reads no identity, so it gets no
// context that carries one.
func TestAdmitAllocationsTwoPolicies(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	b := combined{
		policies: []keyrate.Policy{perSecond, perDay},
		parts: []keyrate.PolicyDecision{
			{Policy: perSecond, Allowed: true, Remaining: 9, RefillAfter: time.Second, ResetAfter: time.Second},
			{Policy: perDay, Allowed: true, Remaining: 999, RefillAfter: 24 * time.Hour, ResetAfter: 24 * time.Hour},
		},
	}
	m, err := httplimit.New(b, httplimit.WithRoute("search"))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(bare)
	rs := requests(64)
	w := &discard{h: make(http.Header)}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, rs[i%len(rs)])
		i++
	})
	t.Logf("%.1f allocations per admitted request under two policies", allocs)
	if allocs > 2 {
		t.Errorf("%.1f allocations per admitted request under two policies, want at most 2", allocs)
	}
	if p, r := w.h.Get("RateLimit-Policy"), w.h.Get("RateLimit"); p != `"second";q=10;w=1, "day";q=1000;w=86400` ||
		r != `"second";r=9;t=1, "day";r=999;t=86400` {
		t.Fatalf("fields RateLimit-Policy %q, RateLimit %q", p, r)
	}
}

// With every field set, the older fields' numbers (each over 99, which
// strconv would allocate) are written into the same allocation as the
// RateLimit fields: still two in all.
func TestAdmitAllocationsEveryField(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	l, err := keyrate.New(1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := httplimit.New(l, httplimit.WithRoute("search"),
		httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.LegacyHeaders|httplimit.XHeaders))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(bare)
	rs := requests(64)
	w := &discard{h: make(http.Header)}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, rs[i%len(rs)])
		i++
	})
	if allocs > 2 {
		t.Errorf("%.1f allocations per admitted request with every field, want at most 2", allocs)
	}
	if got := w.h.Get("RateLimit-Limit") + " " + w.h.Get("X-RateLimit-Limit") + " " + w.h.Get("RateLimit-Reset"); got != "1048576 1048576 3600" {
		t.Fatalf("RateLimit-Limit, X-RateLimit-Limit, RateLimit-Reset: %q", got)
	}
}

// A refused request, answered by the default handler (Retry-After, the
// quota-exceeded problem body and its two fields), costs its key and one
// allocation for all of its fields and its body: two.
func TestRefusalAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := keyrate.New(1, time.Hour, keyrate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := httplimit.New(l, httplimit.WithRoute("search"))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(bare)
	rs := requests(64)
	w := &recorded{discard: discard{h: make(http.Header)}}
	for _, r := range rs {
		h.ServeHTTP(w, r) // spends each client's budget
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		w.body = w.body[:0]
		h.ServeHTTP(w, rs[i%len(rs)])
		i++
	})
	if allocs > 2 {
		t.Errorf("%.1f allocations per refused request, want at most 2", allocs)
	}
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded",` +
		`"status":429,"detail":"Rate limit exceeded; retry in 3600 seconds.","violated-policies":["search"]}` + "\n"
	if w.code != http.StatusTooManyRequests || string(w.body) != want {
		t.Fatalf("status %d, body %s", w.code, w.body)
	}
	if got := w.h.Get("Retry-After") + " " + w.h.Get("Content-Type") + " " + w.h.Get("X-Content-Type-Options"); got != "3600 application/problem+json nosniff" {
		t.Fatalf("Retry-After, Content-Type, X-Content-Type-Options: %q", got)
	}
	if p, r := w.h.Get("RateLimit-Policy"), w.h.Get("RateLimit"); p != `"search";q=1;w=3600` || r != `"search";r=0;t=3600` {
		t.Fatalf("fields RateLimit-Policy %q, RateLimit %q", p, r)
	}
}

// recorded is discard that keeps the status and the body.
type recorded struct {
	discard
	code int
	body []byte
}

func (w *recorded) WriteHeader(code int) { w.code = code }

func (w *recorded) Write(b []byte) (int, error) {
	w.body = append(w.body, b...)
	return len(b), nil
}

// A route that may give events back settles through a writer of its own,
// which holds its copy of the Event, the bytes of the fields it rewrites
// and, under WithWeight, the reservation, in one allocation: WithRefund adds
// it to the key and the fields' block; WithWeight also the context that
// carries the reservation, the request that carries that context, and,
// for a refund of what the handler reports it did not use, the context
// that outlives the request's. The RateLimit field says what the request
// left.
func TestSettledAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	reporting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := middleware.ReportWeight(r.Context(), 3); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusOK)
	})
	for _, tc := range []struct {
		name string
		opt  httplimit.Option
		next http.Handler
		max  float64
		left string
	}{
		{"refund", httplimit.WithRefund(func(status int) bool { return status >= 500 }), bare, 3, `"search";r=1048575;t=3600`},
		{"cost", httplimit.WithWeight(func(*http.Request) int { return 10 }), reporting, 6, `"search";r=1048573;t=3600`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			l, err := keyrate.New(1<<20, time.Hour, keyrate.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			m, err := httplimit.New(l, httplimit.WithRoute("search"), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(tc.next)
			rs := requests(64)
			w := &discard{h: make(http.Header)}
			allocs := testing.AllocsPerRun(63, func() {
				clear(w.h)
				h.ServeHTTP(w, rs[0])
			})
			if allocs > tc.max {
				t.Errorf("%.1f allocations per request, want at most %v", allocs, tc.max)
			}
			clear(w.h)
			h.ServeHTTP(w, rs[1]) // a fresh client: its first request
			if got := w.h.Get("RateLimit"); got != tc.left {
				t.Fatalf("RateLimit %q, want %q", got, tc.left)
			}
		})
	}
}

// The room for a response's fields is counted in New from the policies and
// the options, so that none outgrows its one allocation: under every
// configuration here an admitted request and a refused one each cost their
// key and that block.
func TestAllocationsByConfiguration(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	start := time.Date(2027, 2, 27, 12, 0, 0, 0, time.UTC)
	long := strings.Repeat("r", 200)
	for _, tc := range []struct {
		name     string
		policies func(limit int) []keyrate.Policy
		opts     []httplimit.Option
	}{
		{"default", nil, nil},
		{"proposal 166", nil, []httplimit.Option{httplimit.WithFieldRevision(ratelimitfield.Proposal166)}},
		{"quota unit", nil, []httplimit.Option{httplimit.WithQuotaUnit("requests")}},
		{"long route", nil, []httplimit.Option{httplimit.WithRoute(long)}},
		{"every field", nil, []httplimit.Option{httplimit.WithHeaders(httplimit.DraftHeaders | httplimit.LegacyHeaders | httplimit.XHeaders)}},
		{"two policies", func(limit int) []keyrate.Policy {
			return []keyrate.Policy{{Name: "burst", Limit: limit, Window: time.Second}, {Name: "daily-quota", Limit: limit, Window: 24 * time.Hour}}
		}, nil},
		{"calendar", func(limit int) []keyrate.Policy {
			return []keyrate.Policy{{Name: "minute", Limit: limit, Window: time.Minute}, {Name: "month", Limit: limit, Calendar: keyrate.Monthly(1, time.UTC)}}
		}, []httplimit.Option{httplimit.WithFieldRevision(ratelimitfield.Proposal166), httplimit.WithQuotaUnit("requests")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handler := func(limit int) http.Handler {
				clock := keyrate.NewManualClock(start)
				var l *keyrate.Limiter
				var err error
				if tc.policies == nil {
					l, err = keyrate.New(limit, time.Hour, keyrate.WithClock(clock))
				} else {
					l, err = keyrate.NewPolicies(tc.policies(limit), keyrate.WithClock(clock))
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				m, err := httplimit.New(l, append([]httplimit.Option{httplimit.WithRoute("search")}, tc.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				return m.Handler(bare)
			}
			rs := requests(64)
			w := &recorded{discard: discard{h: make(http.Header)}}
			measure := func(h http.Handler) float64 {
				i := 0
				return testing.AllocsPerRun(1000, func() {
					clear(w.h)
					w.body = w.body[:0]
					h.ServeHTTP(w, rs[i%len(rs)])
					i++
				})
			}
			if allocs := measure(handler(1 << 20)); allocs > 2 {
				t.Errorf("%.1f allocations per admitted request, want at most 2", allocs)
			}
			refusing := handler(1)
			for _, r := range rs {
				refusing.ServeHTTP(w, r)
			}
			if allocs := measure(refusing); allocs > 2 {
				t.Errorf("%.1f allocations per refused request, want at most 2", allocs)
			}
			if w.code != http.StatusTooManyRequests || w.h.Get("RateLimit") == "" {
				t.Fatalf("status %d, RateLimit %q", w.code, w.h.Get("RateLimit"))
			}
		})
	}
}
