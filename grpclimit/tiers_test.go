package grpclimit_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
)

// readmeTier is the README's tier function, word for word.
func readmeTier(key string) string {
	if strings.HasPrefix(key, "pro-") {
		return "pro"
	}
	return "" // the default tier: NewPolicies' own policies
}

// The README's tier example behind grpclimit, identifying clients by an API
// key in the metadata: a pro key, short or long enough to be limited under
// its digest, gets the pro policies; any other key the free ones.
func TestTierSeesMetadataValue(t *testing.T) {
	free := []keyrate.Policy{{Name: "second", Limit: 10, Window: time.Second}, {Name: "day", Limit: 1000, Window: 24 * time.Hour}}
	pro := []keyrate.Policy{{Name: "second", Limit: 100, Window: time.Second}, {Name: "day", Limit: 100_000, Window: 24 * time.Hour}}
	l, err := keyrate.NewPolicies(free, keyrate.WithTiers(readmeTier, map[string][]keyrate.Policy{"pro": pro}),
		keyrate.WithClock(keyrate.NewManualClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c := serve(t, mustNew(t, l, grpclimit.WithMetadataKey("x-api-key"))).client(t, "127.0.0.1")
	for name, key := range map[string]string{
		"6 bytes":   "pro-42",
		"200 bytes": "pro-" + strings.Repeat("k", 196),
		"free key":  "free-42",
	} {
		res := callCheck(t, c, "x-api-key", key)
		want := `"second";r=99;t=1, "day";r=99999;t=86400`
		if !strings.HasPrefix(key, "pro-") {
			want = `"second";r=9;t=1, "day";r=999;t=86400`
		}
		if got := first(res.header, "ratelimit"); res.code != codes.OK || got != want {
			t.Errorf("%s: %v, ratelimit %q; want OK and %q", name, res.code, got, want)
		}
	}
}

// Without a metadata key, the tier function sees the peer's address alone.
func TestTierSeesPeerAddress(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	tier := func(key string) string {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, key)
		return ""
	}
	l, err := keyrate.New(5, time.Minute, keyrate.WithTiers(tier, nil), keyrate.WithClock(keyrate.NewManualClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	callCheck(t, serve(t, mustNew(t, l)).client(t, "127.0.0.1"))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "127.0.0.1" {
		t.Errorf("the tier function saw %q, want the address 127.0.0.1 once", seen)
	}
}
