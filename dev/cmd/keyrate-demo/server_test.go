package main

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

func newTestServer(t *testing.T, cfg config) (http.Handler, *[]decision) {
	t.Helper()
	var mu sync.Mutex
	var seen []decision
	cfg.OnDecision = func(d decision) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d)
	}
	if cfg.Clock == nil {
		cfg.Clock = keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	h, closeLimiters, err := newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLimiters)
	return h, &seen
}

func do(h http.Handler, path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestRoutesAndBudgets(t *testing.T) {
	h, seen := newTestServer(t, config{})
	for i := range 3 {
		if rec := do(h, "/api/status"); rec.Code != 200 {
			t.Fatalf("status request %d: %d", i, rec.Code)
		}
	}
	rec := do(h, "/api/status")
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "60" || rec.Header().Get("RateLimit") != `"status";r=0;t=60` {
		t.Fatalf("fourth status request: %d %v", rec.Code, rec.Header())
	}
	if rec := do(h, "/api/search?q=x"); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != `"search";q=20;w=60` {
		t.Fatalf("search has its own budget: %d %v", rec.Code, rec.Header())
	}
	if rec := do(h, "/api/status", "X-API-Key", "alice"); rec.Code != 200 {
		t.Fatalf("an API key has its own budget: %d", rec.Code)
	}
	if rec := do(h, "/"); rec.Code != 404 {
		t.Fatalf("/ is left free: %d", rec.Code)
	}
	if rec := do(h, "/api/status", "X-Forwarded-For", "203.0.113.7"); rec.Code != 429 {
		t.Fatalf("X-Forwarded-For must be ignored without trusted proxies: %d", rec.Code)
	}
	for i := range 10 {
		if rec := do(h, "/api/burst"); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != `"burst";q=10;w=10` {
			t.Fatalf("burst request %d has its own budget of 10 per 10 s: %d %v", i, rec.Code, rec.Header())
		}
	}
	if rec := do(h, "/api/burst"); rec.Code != 429 || rec.Header().Get("Retry-After") != "10" {
		t.Fatalf("eleventh burst request: %d %v", rec.Code, rec.Header())
	}

	if len(*seen) != 18 {
		t.Fatalf("%d decisions published, want 18", len(*seen))
	}
	alice := (*seen)[5]
	// alice's fingerprint: printf alice | sha256sum | cut -c1-8
	if alice.Route != "status" || alice.Key != "x-api-key=2bd806c9" || !alice.Decision.Allowed || alice.At.IsZero() {
		t.Fatalf("decision %+v", alice)
	}
}

// The classic boundary burst on /api/burst: 10 requests at 00:00:09 and 10
// at 00:00:11. A fixed window of 10 s would admit all 20; the demo admits
// the first 10, refuses the rest until 10 s after the first burst, and then
// has the whole budget back.
func TestBurstRouteAtTheBoundary(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 9, 0, time.UTC))
	h, seen := newTestServer(t, config{Clock: clock})
	codes := func(n int) map[int]int {
		got := map[int]int{}
		for range n {
			got[do(h, "/api/burst").Code]++
		}
		return got
	}
	if got := codes(10); got[200] != 10 {
		t.Fatalf("at :09: %v, want 10 x 200", got)
	}
	clock.Advance(2 * time.Second)
	if got := codes(10); got[429] != 10 {
		t.Fatalf("at :11: %v, want 10 x 429", got)
	}
	if rec := do(h, "/api/burst"); rec.Header().Get("Retry-After") != "8" {
		t.Fatalf("at :11 Retry-After %q, want 8 (the :09 burst leaves the window at :19)", rec.Header().Get("Retry-After"))
	}
	clock.Advance(8*time.Second - time.Millisecond)
	if rec := do(h, "/api/burst"); rec.Code != 429 {
		t.Fatalf("a millisecond before :19: %d, want 429", rec.Code)
	}
	clock.Advance(time.Millisecond)
	if got := codes(10); got[200] != 10 {
		t.Fatalf("at :19: %v, want 10 x 200", got)
	}
	if len(*seen) != 32 {
		t.Fatalf("%d decisions published, want 32", len(*seen))
	}
	for _, d := range *seen {
		if d.Route != "burst" || d.Decision.Limit != 10 {
			t.Fatalf("decision %+v, want route burst with limit 10", d)
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	h, _ := newTestServer(t, config{TrustedProxies: 1})
	for range 3 {
		do(h, "/api/status", "X-Forwarded-For", "203.0.113.7")
	}
	if rec := do(h, "/api/status", "X-Forwarded-For", "203.0.113.7"); rec.Code != 429 {
		t.Fatalf("same forwarded client: %d, want 429", rec.Code)
	}
	if rec := do(h, "/api/status", "X-Forwarded-For", "203.0.113.7, 203.0.113.8"); rec.Code != 200 {
		t.Fatalf("another forwarded client: %d, want 200", rec.Code)
	}
	if _, _, err := newServer(config{TrustedProxies: -1}); err == nil {
		t.Fatal("negative trusted proxies accepted")
	}
}
