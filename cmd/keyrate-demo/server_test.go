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

	if len(*seen) != 7 {
		t.Fatalf("%d decisions published, want 7", len(*seen))
	}
	alice := (*seen)[5]
	if alice.Route != "status" || alice.Key != "X-Api-Key:alice" || !alice.Decision.Allowed || alice.At.IsZero() {
		t.Fatalf("decision %+v", alice)
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
