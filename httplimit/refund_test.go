package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// TestRefundCountsOnlyFailures is the login endpoint: 3 failed attempts
// per 15 minutes, successes refunded. Any number of successes leave the
// budget whole; the fourth failure is refused, and so is everything after
// it until the first failure leaves the window.
func TestRefundCountsOnlyFailures(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := keyrate.New(3, 15*time.Minute, keyrate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mw, err := httplimit.New(l, httplimit.WithRoute("login"),
		httplimit.WithRefund(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("password") {
		case "right":
			// Writes no header: the status is 200.
		case "later":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	login := func(password string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/login?password="+password, nil))
		return rec.Code
	}
	for i := range 10 {
		if got := login("right"); got != http.StatusOK {
			t.Fatalf("success %d: %d", i, got)
		}
		if got := login("later"); got != http.StatusNoContent {
			t.Fatalf("success %d: %d", i, got)
		}
	}
	for i := range 3 {
		if got := login("wrong"); got != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401: successes should have been refunded", i, got)
		}
	}
	if got := login("right"); got != http.StatusTooManyRequests {
		t.Fatalf("after 3 failures: %d, want 429", got)
	}
	clock.Advance(15 * time.Minute)
	if got := login("right"); got != http.StatusOK {
		t.Fatalf("after the window: %d", got)
	}
}

// refundFails is a backend whose refunds fail, as a store that went away.
type refundFails struct{ *keyrate.Limiter }

func (refundFails) RefundN(context.Context, string, *keyrate.Decision, int) error {
	return errors.New("store unavailable")
}

// TestRefundErrors checks that a backend that cannot refund is refused at
// New, and that a refund that fails is reported and leaves the request
// counted.
func TestRefundErrors(t *testing.T) {
	l, err := keyrate.New(2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	only := backend.Func(l.TakeContext)
	if _, err := httplimit.New(only,
		httplimit.WithRefund(func(int) bool { return true })); !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("a backend without Refund: %v, want ErrConfig", err)
	}

	var reported []error
	mw, err := httplimit.New(refundFails{l}, httplimit.WithRefund(func(int) bool { return true }),
		httplimit.WithOnError(func(e middleware.Event) { reported = append(reported, e.Err) }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	if len(reported) != 2 || !errors.Is(reported[0], middleware.ErrRefundFailed) {
		t.Fatalf("reported %v, want two errors wrapping ErrRefundFailed", reported)
	}
	if d := l.Peek("192.0.2.1"); d.Allowed {
		t.Fatalf("the failed refunds left room: %+v", d)
	}
}
