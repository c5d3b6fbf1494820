package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

// TestCalendarPolicyFields: a calendar policy's RateLimit-Policy member
// has w, its current period's length (28 days in February, 31 in March),
// and its RateLimit member t, the seconds until its period turns; beside a
// sliding policy's, unchanged.
func TestCalendarPolicyFields(t *testing.T) {
	start := time.Date(2027, 2, 27, 12, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l, err := keyrate.NewPolicies([]keyrate.Policy{
		{Name: "minute", Limit: 10, Window: time.Minute},
		{Name: "month", Limit: 3, Calendar: keyrate.Monthly(1, time.UTC)},
	}, keyrate.WithClock(clock), keyrate.WithJanitorInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := httplimit.New(l, httplimit.WithKeyFunc(func(*http.Request) (string, error) { return "acme", nil }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func() http.Header {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w.Header()
	}
	for _, c := range []struct {
		at                time.Time
		policy, rateLimit string
		retry             string
	}{
		{start, `"minute";q=10;w=60, "month";q=3;w=2419200`, `"minute";r=9;t=60, "month";r=2;t=129600`, ""},
		{start, `"minute";q=10;w=60, "month";q=3;w=2419200`, `"minute";r=8;t=60, "month";r=1;t=129600`, ""},
		{start.Add(time.Hour), `"minute";q=10;w=60, "month";q=3;w=2419200`, `"minute";r=9;t=60, "month";r=0;t=126000`, ""},
		{start.Add(time.Hour), `"minute";q=10;w=60, "month";q=3;w=2419200`, `"minute";r=9;t=60, "month";r=0;t=126000`, "126000"},
		{time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), `"minute";q=10;w=60, "month";q=3;w=2678400`, `"minute";r=9;t=60, "month";r=2;t=2678400`, ""},
	} {
		clock.Set(c.at)
		got := get()
		if p := got.Get("RateLimit-Policy"); p != c.policy {
			t.Errorf("at %v: RateLimit-Policy %s, want %s", c.at, p, c.policy)
		}
		if r := got.Get("RateLimit"); r != c.rateLimit {
			t.Errorf("at %v: RateLimit %s, want %s", c.at, r, c.rateLimit)
		}
		if r := got.Get("Retry-After"); r != c.retry {
			t.Errorf("at %v: Retry-After %q, want %q", c.at, r, c.retry)
		}
	}
}
