package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

// from sends a request from addr (host:port), with an API key unless key
// is "".
func from(h http.Handler, addr, path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = addr
	if key != "" {
		r.Header.Set(keyHeader, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestNewIdentitiesPerAddress mints 100 API keys from one address: the
// first newIdentityLimit get in, the rest are refused, unstored, while
// another address still brings a new key in and the keys already known
// are decided as usual.
func TestNewIdentitiesPerAddress(t *testing.T) {
	const minter, other = "198.51.100.7:40000", "203.0.113.9:40000"
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, seen := newTestServer(t, config{Clock: clock})

	for i := range 100 {
		rec := from(h, minter, "/api/status", fmt.Sprint("minted-", i))
		if i < newIdentityLimit {
			if rec.Code != 200 {
				t.Fatalf("key %d, within the budget: %d", i, rec.Code)
			}
			continue
		}
		if rec.Code != 429 || rec.Header().Get("Retry-After") != "60" {
			t.Fatalf("key %d, past the budget: %d, Retry-After %q; want 429 and 60", i, rec.Code, rec.Header().Get("Retry-After"))
		}
		var p struct{ Type, Detail string }
		if err := json.NewDecoder(rec.Body).Decode(&p); err != nil || p.Type != "about:blank" ||
			!strings.Contains(p.Detail, "Too many new identities from this address") {
			t.Fatalf("key %d: problem %+v, %v", i, p, err)
		}
		if strings.Contains(rec.Body.String(), "minted-") {
			t.Fatalf("the refusal quotes the key: %s", rec.Body)
		}
	}
	if len(*seen) != newIdentityLimit {
		t.Errorf("the route decided %d requests, want the %d within the budget", len(*seen), newIdentityLimit)
	}

	if rec := from(h, other, "/api/status", "newcomer"); rec.Code != 200 {
		t.Errorf("another address's new key: %d, want 200", rec.Code)
	}
	if rec := from(h, minter, "/api/status", "minted-0"); rec.Code != 200 || rec.Header().Get("RateLimit") != `"status";r=1;t=60` {
		t.Errorf("a key the route knows, from the minter: %d %q; want 200, its second request", rec.Code, rec.Header().Get("RateLimit"))
	}
	if rec := from(h, minter, "/api/status", ""); rec.Code != 200 {
		t.Errorf("the minter by its address alone: %d, want 200", rec.Code)
	}
	if rec := from(h, minter, "/api/search", "minted-0"); rec.Code != 429 {
		t.Errorf("minted-0 is new to search, and the budget is shared by the routes: %d, want 429", rec.Code)
	}

	clock.Advance(newIdentityWindow)
	if rec := from(h, minter, "/api/status", "minted-99"); rec.Code != 200 {
		t.Errorf("a window later the minter may bring a new key again: %d", rec.Code)
	}
}

// TestUnseen reads Peeks under /api/export's two policies: a key is unseen
// only while neither window holds an event of it.
func TestUnseen(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var export route
	for _, rt := range routes {
		if rt.Name == "export" {
			export = rt
		}
	}
	l, err := keyrate.NewPolicies(export.Policies, keyrate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !unseen(l.Peek("k")) {
		t.Fatal("a key never seen")
	}
	l.AllowN("k", 2)
	if unseen(l.Peek("k")) {
		t.Fatal("a key at its burst limit")
	}
	clock.Advance(20 * time.Second)
	if unseen(l.Peek("k")) {
		t.Fatal("a key whose events left the burst window but not the hourly one")
	}
	clock.Advance(time.Hour)
	if !unseen(l.Peek("k")) {
		t.Fatal("a key whose events left every window")
	}
}

// TestNewIdentityChargedOnce sends the first requests of one new key
// together, and checks the address paid for one new identity: it may bring
// newIdentityLimit-1 more.
func TestNewIdentityChargedOnce(t *testing.T) {
	const addr = "198.51.100.7:40000"
	h, _ := newTestServer(t, config{})
	var wg sync.WaitGroup
	codes := make(chan int, 30)
	for range 30 {
		wg.Go(func() { codes <- from(h, addr, "/api/burst", "together").Code })
	}
	wg.Wait()
	close(codes)
	admitted := 0
	for c := range codes {
		if c == 200 {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("%d of the key's requests admitted, want the route's limit of 10", admitted)
	}
	for i := range newIdentityLimit {
		want := 200
		if i == newIdentityLimit-1 {
			want = 429
		}
		if rec := from(h, addr, "/api/burst", fmt.Sprint("later-", i)); rec.Code != want {
			t.Fatalf("new key %d after the first: %d, want %d", i+1, rec.Code, want)
		}
	}
}

// TestChargeOncePerKey pins what the test above can only hope to see: a
// key found unseen twice, before the route decided it, is charged once.
func TestChargeOncePerKey(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	n, err := store{clock: clock}.newIdentities(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.budget.Close()
	defer n.charged.Close()
	for range 3 {
		if d := n.charge("a", "a\x00status\x00x-api-key=k"); !d.Allowed {
			t.Fatal("a key charged already is admitted again")
		}
	}
	if d := n.budget.Peek("a"); d.Remaining != newIdentityLimit-2 {
		t.Errorf("budget left after one key: %d, want %d (and one for the Peek)", d.Remaining+1, newIdentityLimit-1)
	}
	clock.Advance(newIdentityWindow)
	n.charge("a", "a\x00status\x00x-api-key=k")
	if d := n.budget.Peek("a"); d.Remaining != newIdentityLimit-2 {
		t.Errorf("a window later the key is charged again, in a fresh budget: %d left", d.Remaining+1)
	}
}
