package promlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// A request whose client has gone before it was decided is counted as
// client_gone: not as an error, not as a backend error, and its time is
// not taken for the backend's.
func TestHTTPClientGone(t *testing.T) {
	m, reg := newMetrics(t)
	h, served := limited(t, m, manualLimiter(t, 5, time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/search", nil).WithContext(ctx))
	if got := requests(t, reg, "search", "client_gone"); got != 1 {
		t.Errorf("client_gone %v, want 1", got)
	}
	if got := requests(t, reg, "search", "error"); got != 0 {
		t.Errorf("error %v, want 0", got)
	}
	for _, kind := range []string{"timeout", "unavailable", "invalid"} {
		if got := backendErrors(t, reg, "search", kind); got != 0 {
			t.Errorf("backend errors of kind %s: %v, want 0", kind, got)
		}
	}
	if got := decisions(t, reg, "search"); got != 0 {
		t.Errorf("%v backend times observed, want 0", got)
	}
	if *served != 0 {
		t.Errorf("%d requests served, want 0", *served)
	}
}

// Observe counts a gone client the same way whatever the middleware.
func TestObserveClientGone(t *testing.T) {
	m, reg := newMetrics(t)
	const route = "/pkg.S/M"
	observeError(m, route, goneError(t), 5*time.Millisecond)
	if g, e := requests(t, reg, route, "client_gone"), requests(t, reg, route, "error"); g != 1 || e != 0 {
		t.Errorf("client_gone %v, error %v; want 1 and 0", g, e)
	}
	if got := backendErrors(t, reg, route, "timeout"); got != 0 {
		t.Errorf("timeouts %v, want 0", got)
	}
}

// goneError returns the error httplimit reports to OnError for a request
// whose deadline passed before it was decided.
func goneError(t *testing.T) error {
	t.Helper()
	var err error
	mw, e := httplimit.New(manualLimiter(t, 5, time.Minute), httplimit.WithOnError(func(ev middleware.Event) { err = ev.Err }))
	if e != nil {
		t.Fatal(e)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	mw.Handler(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("OnError got %v, want an error matching context.DeadlineExceeded", err)
	}
	return err
}
