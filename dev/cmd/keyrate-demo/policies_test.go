package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

const exportPolicy = `"export-burst";q=2;w=10, "export-hourly";q=5;w=3600`

// /api/export is under two policies at once, 2 per 10 s and 5 per hour: a
// request must fit both, is counted against both, and a refusal names the
// policy that refused it. The trace, on a manual clock: two bursts the
// short policy cuts at 2, then the hourly one refusing while the short one
// has room.
func TestExportUnderTwoPolicies(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, seen := newTestServer(t, config{Clock: clock})
	type want struct {
		code              int
		rateLimit, retry  string
		refusedBy         string // the violated policies a 429's body names
		allowedByPolicies []bool
	}
	check := func(step string, w want) {
		t.Helper()
		rec := do(h, "/api/export", "X-API-Key", "alice")
		if rec.Code != w.code || rec.Header().Get("RateLimit-Policy") != exportPolicy ||
			rec.Header().Get("RateLimit") != w.rateLimit || rec.Header().Get("Retry-After") != w.retry {
			t.Errorf("%s: %d %v, want %d with RateLimit %q and Retry-After %q", step, rec.Code, rec.Header(), w.code, w.rateLimit, w.retry)
		}
		if w.refusedBy != "" && !strings.Contains(rec.Body.String(), w.refusedBy) {
			t.Errorf("%s: body %s does not name %s", step, rec.Body, w.refusedBy)
		}
		d := (*seen)[len(*seen)-1].Decision
		parts := d.Policies()
		if len(parts) != 2 || parts[0].Name != "export-burst" || parts[1].Name != "export-hourly" {
			t.Fatalf("%s: decision's policies %+v", step, parts)
		}
		for i, p := range parts {
			if p.Allowed != w.allowedByPolicies[i] {
				t.Errorf("%s: %s allowed = %v, want %v", step, p.Name, p.Allowed, w.allowedByPolicies[i])
			}
		}
	}
	both := []bool{true, true}
	check("t=0 #1", want{200, `"export-burst";r=1;t=10, "export-hourly";r=4;t=3600`, "", "", both})
	check("t=0 #2", want{200, `"export-burst";r=0;t=10, "export-hourly";r=3;t=3600`, "", "", both})
	check("t=0 #3", want{429, `"export-burst";r=0;t=10, "export-hourly";r=3;t=3600`, "10", "export-burst", []bool{false, true}})
	clock.Advance(10 * time.Second)
	check("t=10s #1", want{200, `"export-burst";r=1;t=10, "export-hourly";r=2;t=3590`, "", "", both})
	check("t=10s #2", want{200, `"export-burst";r=0;t=10, "export-hourly";r=1;t=3590`, "", "", both})
	check("t=10s #3", want{429, `"export-burst";r=0;t=10, "export-hourly";r=1;t=3590`, "10", "export-burst", []bool{false, true}})
	clock.Advance(10 * time.Second)
	check("t=20s #1", want{200, `"export-burst";r=1;t=10, "export-hourly";r=0;t=3580`, "", "", both})
	// The short policy has room; the hourly one, full, refuses until the
	// first request leaves its window, at t=3600s.
	check("t=20s #2", want{429, `"export-burst";r=1;t=10, "export-hourly";r=0;t=3580`, "3580", "export-hourly", []bool{true, false}})
	clock.Advance(3580*time.Second - time.Millisecond)
	check("a millisecond before 3600s", want{429, `"export-burst";r=2, "export-hourly";r=0;t=1`, "1", "export-hourly", []bool{true, false}})
}

// An API key starting with "pro-" gets /api/status at 10 per 60 s instead
// of 3; the other routes are the same for every client.
func TestProTier(t *testing.T) {
	for _, tc := range []struct {
		key   string
		limit int
	}{{"pro-alice", 10}, {"alice", 3}, {"", 3}} {
		h, _ := newTestServer(t, config{})
		hdr := []string{"X-API-Key", tc.key}
		if tc.key == "" {
			hdr = nil
		}
		policy := fmt.Sprintf(`"status";q=%d;w=60`, tc.limit)
		for i := range tc.limit {
			if rec := do(h, "/api/status", hdr...); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != policy {
				t.Fatalf("key %q, request %d: %d %v, want 200 under %s", tc.key, i+1, rec.Code, rec.Header(), policy)
			}
		}
		if rec := do(h, "/api/status", hdr...); rec.Code != 429 {
			t.Errorf("key %q, request %d: %d, want 429", tc.key, tc.limit+1, rec.Code)
		}
		if rec := do(h, "/api/burst", hdr...); rec.Header().Get("RateLimit-Policy") != `"burst";q=10;w=10` {
			t.Errorf("key %q on /api/burst: %v, want the route's one policy", tc.key, rec.Header())
		}
	}
}

func TestTierOf(t *testing.T) {
	for key, want := range map[string]string{
		"pro-alice":                     proTier,
		"pro-":                          proTier,
		"alice":                         "",
		"Pro-alice":                     "",
		"203.0.113.7":                   "",
		"status\x00x-api-key=pro-alice": "", // a key, not an identity as sent
	} {
		if got := tierOf(key); got != want {
			t.Errorf("tierOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// The log names the binding policy of a route under several, so that a
// refusal says which one refused.
func TestDecisionLogNamesThePolicy(t *testing.T) {
	var out strings.Builder
	log := decisionLogger(&out)
	at := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	burst := keyrate.Policy{Name: "export-burst", Limit: 2, Window: 10 * time.Second}
	hourly := keyrate.Policy{Name: "export-hourly", Limit: 5, Window: time.Hour}
	log(decision{At: at, Route: "export", Key: "x-api-key=2bd806c9", Decision: backend.Combine(
		keyrate.PolicyDecision{Policy: burst, Allowed: true, Remaining: 1},
		keyrate.PolicyDecision{Policy: hourly, RetryAfter: 58 * time.Minute},
	)})
	log(decision{At: at, Route: "status", Key: "127.0.0.1", Decision: backend.Combine(
		keyrate.PolicyDecision{Policy: keyrate.Policy{Limit: 3, Window: time.Minute}, Allowed: true, Remaining: 2},
	)})
	want := `12:00:00.000 export  "x-api-key=2bd806c9"   refused  remaining=0 retry-after=58m0s policy=export-hourly
12:00:00.000 status  "127.0.0.1"            allowed  remaining=2
`
	if out.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", out.String(), want)
	}
}
