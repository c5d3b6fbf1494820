package main

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
)

// /api/report is the README's in-flight example: of three reports of one
// client sent at once, two run (2 s each) and the third waits a second for
// a slot, then gets 429 with Retry-After: 1 and the fields the README
// shows; once the two have ended, a slot is free again. The page gets the
// rate budget and the slots with each decision.
func TestReportInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, seen := newTestServer(t, config{})
		began := time.Now()
		var wg sync.WaitGroup
		recs := make([]*httptest.ResponseRecorder, 3)
		took := make([]time.Duration, 3)
		for i := range recs {
			wg.Go(func() {
				recs[i] = do(h, "/api/report", "X-API-Key", "alice")
				took[i] = time.Since(began)
			})
		}
		wg.Wait()
		var served, refused int
		for i, rec := range recs {
			switch rec.Code {
			case 200:
				served++
				if took[i] != reportTime || !strings.Contains(rec.Body.String(), `"report":"ok"`) {
					t.Errorf("a served report took %v: %s", took[i], rec.Body)
				}
			case 429:
				refused++
				h := rec.Header()
				if took[i] != time.Second || h.Get("Retry-After") != "1" ||
					strings.Join(h.Values("RateLimit-Policy"), ", ") != `"report-inflight";q=2;qu="concurrent-requests", "report";q=20;w=60` {
					t.Errorf("the refusal came after %v with %v, want after 1s with Retry-After: 1 and the README's RateLimit-Policy", took[i], h)
				}
			default:
				t.Errorf("report %d: %d %s", i, rec.Code, rec.Body)
			}
		}
		if served != 2 || refused != 1 {
			t.Fatalf("%d served and %d refused, want 2 and 1", served, refused)
		}
		if rec := do(h, "/api/report", "X-API-Key", "alice"); rec.Code != 200 {
			t.Fatalf("a report after the two ended: %d, want 200", rec.Code)
		}

		if len(*seen) != 4 {
			t.Fatalf("%d decisions published, want 4", len(*seen))
		}
		var slotsOnly []live.Budget
		for _, d := range (*seen)[:3] {
			if !d.Decision.Allowed {
				slotsOnly = d.Budgets
			}
		}
		want := []live.Budget{{Name: "in flight", Unit: "requests", Limit: 2, Remaining: 0}}
		if len(slotsOnly) != 1 || slotsOnly[0] != want[0] {
			t.Errorf("the refusal's budgets %+v, want %+v", slotsOnly, want)
		}
		last := (*seen)[3].Budgets
		want = []live.Budget{
			{Name: "requests", Unit: "requests", Limit: 20, Remaining: 17, Allowed: true, WindowMs: 60_000, ResetAfterMs: 60_000},
			{Name: "in flight", Unit: "requests", Limit: 2, Remaining: 1, Allowed: true},
		}
		if len(last) != 2 || last[0] != want[0] || last[1] != want[1] {
			t.Errorf("the last report's budgets %+v, want %+v", last, want)
		}
	})
}
