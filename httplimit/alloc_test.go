package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

// An admitted request through the in-process limiter, with a route and the
// default identity, costs at most three allocations (its key, the
// RateLimit value, and the header-map slices of its fields) and still gets
// every field; a fourth, the context that carries the client's identity,
// when the limiter has tiers whose function reads it.
func TestAdmitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, tc := range []struct {
		name string
		opts []keyrate.Option
		max  float64
	}{
		{"no tiers", nil, 3},
		{"tiers", []keyrate.Option{keyrate.WithTiers(func(string) string { return "" }, nil)}, 4},
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
// once, in New. The backend is not the in-process limiter, so it may read
// the client's identity, and gets the context that carries it: the fourth
// allocation.
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
	if allocs > 4 {
		t.Errorf("%.1f allocations per admitted request under two policies, want at most 4", allocs)
	}
	if p, r := w.h.Get("RateLimit-Policy"), w.h.Get("RateLimit"); p != `"second";q=10;w=1, "day";q=1000;w=86400` ||
		r != `"second";r=9;t=1, "day";r=999;t=86400` {
		t.Fatalf("fields RateLimit-Policy %q, RateLimit %q", p, r)
	}
}
