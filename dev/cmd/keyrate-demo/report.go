package main

import (
	"net/http"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
	"github.com/keyrate/keyrate/middleware"
)

// reportTime is how long a report takes: long enough to see two of a
// client's reports run while a third waits for one of them.
const reportTime = 2 * time.Second

// reportRoute is the README's in-flight example (httplimit.WithConcurrency),
// served: a slow endpoint held to 2 requests in flight per client beside
// 20 a minute. A third, while two run, waits up to a second for one of
// them to end, then gets 429 with Retry-After: 1.
var reportRoute = route{
	Name: "report", Method: http.MethodGet, Path: "/api/report",
	Policies: limit(20, time.Minute), InFlight: 2, InFlightWait: time.Second, Burst: 3,
	Note:  "Each report takes 2 s. Two of a client run at once; a third waits up to 1 s for one of them to end, then gets 429.",
	serve: serveReport,
}

// serveReport stands for a slow report: it answers after reportTime, or
// not at all once the client has gone.
func serveReport(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	t := time.NewTimer(reportTime)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	writeJSON(w, map[string]any{"report": "ok", "took": time.Since(began).Round(time.Millisecond).String()})
}

// slotBudgets returns the budgets of a request on a route of one rate
// budget and slots in flight, for the page: the rate budget as the
// decision leaves it, then the slots. A request refused for want of a
// slot had no rate decision (keyrate.Decision.Window is 0): the slots
// alone, all taken.
func slotBudgets(e middleware.Event, slots *countedSlots) []live.Budget {
	d := e.Decision
	if d.Window == 0 {
		return []live.Budget{{Name: "in flight", Unit: "requests", Limit: d.Limit, Remaining: 0, Allowed: false}}
	}
	limit, running := slots.held(e.Key)
	return []live.Budget{rateBudget(d), {Name: "in flight", Unit: "requests", Limit: limit, Remaining: max(limit-running, 0), Allowed: true}}
}

// rateBudget is d as the page's row of a requests budget.
func rateBudget(d keyrate.Decision) live.Budget {
	return live.Budget{Name: "requests", Unit: "requests", Limit: d.Limit, Remaining: max(d.Remaining, 0), Allowed: d.Allowed,
		WindowMs: float64(d.Window.Milliseconds()), ResetAfterMs: float64(d.ResetAfter.Microseconds()) / 1000}
}
