package backendtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
)

// NewTieredBackend returns a fresh backend whose keys are under policies
// unless tier names another of tiers for them, deciding at clock's
// instants: keyrate.WithTiers, or a store's equivalent. It should register
// its own cleanup with t.Cleanup.
type NewTieredBackend func(t *testing.T, policies []keyrate.Policy, tier func(key string) string, tiers map[string][]keyrate.Policy, clock *keyrate.ManualClock) keyrate.Backend

// The README's plans: every client gets free, a client whose key starts
// with "pro-" gets pro.
var (
	free = []keyrate.Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "day", Limit: 1000, Window: 24 * time.Hour},
	}
	pro = []keyrate.Policy{
		{Name: "second", Limit: 100, Window: time.Second},
		{Name: "day", Limit: 100_000, Window: 24 * time.Hour},
	}
)

// readmeTier is the README's tier function, word for word.
func readmeTier(key string) string {
	if strings.HasPrefix(key, "pro-") {
		return "pro"
	}
	return "" // the default tier: NewPolicies' own policies
}

// RunTiers runs the tier scenarios against the backends newBackend makes,
// each as a subtest: a tier function sees the client's identity as the
// client sent it, never the key the middleware composes around it.
func RunTiers(t *testing.T, newBackend NewTieredBackend) {
	t.Run("ContextIdentity", func(t *testing.T) { testTierSeesContextIdentity(t, newBackend) })
	t.Run("BehindHTTP", func(t *testing.T) { testTiersBehindHTTP(t, newBackend) })
	t.Run("DefaultIdentity", func(t *testing.T) { testTierSeesAddress(t, newBackend) })
}

// proKeys are API keys of the pro plan: a short one, and one long enough
// that the middleware limits it under its digest.
var proKeys = map[string]string{
	"6 bytes":   "pro-42",
	"200 bytes": "pro-" + strings.Repeat("k", 196),
}

// testTiersBehindHTTP puts the README's tier example behind httplimit, as
// the README's routes set it up (a route, an API key header): a pro key,
// short or long, gets the pro policies; any other key the free ones.
func testTiersBehindHTTP(t *testing.T, newBackend NewTieredBackend) {
	clock := keyrate.NewManualClock(start)
	b := newBackend(t, free, readmeTier, map[string][]keyrate.Policy{"pro": pro}, clock)
	m, err := httplimit.New(b, httplimit.WithRoute("search"), httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	keys := map[string]string{"free key": "free-42"}
	for name, key := range proKeys {
		keys[name] = key
	}
	for name, key := range keys {
		r := httptest.NewRequest("GET", "/search", nil)
		r.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		want := `"second";r=99;t=1, "day";r=99999;t=86400`
		if !strings.HasPrefix(key, "pro-") {
			want = `"second";r=9;t=1, "day";r=999;t=86400`
		}
		if got := rec.Header().Get("RateLimit"); rec.Code != 200 || got != want {
			t.Errorf("%s: %d, RateLimit %q; want 200 and %q", name, rec.Code, got, want)
		}
	}
}

// testTierSeesAddress checks that behind httplimit's default identity, the
// client's address, the tier function sees the address alone, whatever the
// route.
func testTierSeesAddress(t *testing.T, newBackend NewTieredBackend) {
	var mu sync.Mutex
	var seen []string
	tier := func(key string) string {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, key)
		return ""
	}
	b := newBackend(t, free, tier, map[string][]keyrate.Policy{"pro": pro}, keyrate.NewManualClock(start))
	m, err := httplimit.New(b, httplimit.WithRoute("search"))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/search", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(httptest.NewRecorder(), r)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the tier function was not called")
	}
	for _, key := range seen {
		if key != "192.0.2.1" {
			t.Errorf("the tier function saw %q, want the address 192.0.2.1", key)
		}
	}
}

// testTierSeesContextIdentity checks that TakeContext decides the tier by
// the identity its context carries, as grpclimit and httplimit hand it
// over, and by the key without one; the budget is the key's either way.
func testTierSeesContextIdentity(t *testing.T, newBackend NewTieredBackend) {
	b := newBackend(t, free, readmeTier, map[string][]keyrate.Policy{"pro": pro}, keyrate.NewManualClock(start))
	for name, id := range proKeys {
		key := "/pkg.S/M\x00x-api-key=" + id // as grpclimit composes it, save for the digest
		d, err := b.TakeContext(backend.ContextWithIdentity(context.Background(), id), key, 1)
		if err != nil || d.Limit != 100 || d.Remaining != 99 {
			t.Errorf("%s: %+v, %v; want the pro limit of 100, 99 left", name, d, err)
		}
		d, err = b.TakeContext(context.Background(), key, 1)
		if err != nil || d.Limit != 10 || d.Remaining != 8 {
			t.Errorf("%s without the identity: %+v, %v; want the free limit of 10 over the key's 2 events, 8 left", name, d, err)
		}
	}
}
