package httplimit_test

import (
	"errors"
	"github.com/keyrate/keyrate/middleware"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

// TestReportWeightSettles reserves what a request asks for (max_tokens) and
// settles what it used: the budget is charged the tokens used, whether the
// handler reports before its response's status (the RateLimit field then
// says what the request left) or only after it (the field says what was
// reserved; the budget is settled when the handler returns).
func TestReportWeightSettles(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := keyrate.New(1000, time.Minute, keyrate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mw, err := httplimit.New(l, httplimit.WithRoute("generate"), httplimit.WithWeight(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("max_tokens"))
		return n
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used, _ := strconv.Atoi(r.URL.Query().Get("used"))
		late := r.URL.Query().Has("late")
		if !late {
			if err := middleware.ReportWeight(r.Context(), used); err != nil {
				t.Errorf("middleware.ReportWeight(%d): %v", used, err)
			}
		}
		w.Write([]byte("tokens"))
		if late {
			if err := middleware.ReportWeight(r.Context(), used); err != nil {
				t.Errorf("middleware.ReportWeight(%d): %v", used, err)
			}
		}
	}))
	remaining := func() int { return l.Peek("generate\x00192.0.2.1").Remaining + 1 }
	for _, c := range []struct {
		query string
		field string // the RateLimit field sent
		left  int    // what the budget holds after
	}{
		{"max_tokens=400&used=120", `"generate";r=880;t=60`, 880},
		{"max_tokens=400&used=400", `"generate";r=480;t=60`, 480},
		{"max_tokens=300&used=0", `"generate";r=480;t=60`, 480},
		{"max_tokens=300&used=50&late", `"generate";r=180;t=60`, 430},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/generate?"+c.query, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", c.query, rec.Code)
		}
		if got := rec.Header().Get("RateLimit"); got != c.field {
			t.Errorf("%s: RateLimit %s, want %s", c.query, got, c.field)
		}
		if got := remaining(); got != c.left {
			t.Errorf("%s: %d left, want %d", c.query, got, c.left)
		}
	}
}

// TestReportWeightErrors checks what middleware.ReportWeight refuses: a cost
// above the reservation or below 0, and a request with no reservation to
// settle.
func TestReportWeightErrors(t *testing.T) {
	l, err := keyrate.New(100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var errs []error
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		errs = append(errs, middleware.ReportWeight(r.Context(), 11), middleware.ReportWeight(r.Context(), -1), middleware.ReportWeight(r.Context(), 10))
	})
	weighted, err := httplimit.New(l, httplimit.WithWeight(func(*http.Request) int { return 10 }))
	if err != nil {
		t.Fatal(err)
	}
	weighted.Handler(handler).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if !errors.Is(errs[0], keyrate.ErrExceedsLimit) || !errors.Is(errs[1], keyrate.ErrExceedsLimit) || errs[2] != nil {
		t.Errorf("weighted: %v", errs)
	}
	if got := l.Peek("192.0.2.1").Remaining + 1; got != 90 {
		t.Errorf("the refused reports changed the settle: %d left, want 90", got)
	}
	errs = nil
	plain, err := httplimit.New(l, httplimit.WithRoute("plain"))
	if err != nil {
		t.Fatal(err)
	}
	plain.Handler(handler).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if !errors.Is(errs[2], keyrate.ErrNothingToRefund) {
		t.Errorf("no cost function: %v", errs[2])
	}
}

// TestRefundBeforeHeaders gives a refunded login its events back before
// the response's status goes out: the RateLimit field it carries says
// what the budget holds after it, not one less.
func TestRefundBeforeHeaders(t *testing.T) {
	l, err := keyrate.New(3, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mw, err := httplimit.New(l, httplimit.WithRoute("login"), httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.LegacyHeaders),
		httplimit.WithRefund(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	for _, c := range []struct{ password, field, remaining string }{
		{"right", `"login";r=3;t=900`, "3"},
		{"wrong", `"login";r=2;t=900`, "2"},
		{"right", `"login";r=2;t=900`, "2"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/login?password="+c.password, nil))
		if got := rec.Header().Get("RateLimit"); got != c.field {
			t.Errorf("%s: RateLimit %s, want %s", c.password, got, c.field)
		}
		if got := rec.Header().Get("RateLimit-Remaining"); got != c.remaining {
			t.Errorf("%s: RateLimit-Remaining %s, want %s", c.password, got, c.remaining)
		}
	}
}
