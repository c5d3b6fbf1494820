package otellimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// A request whose client has gone before it was decided counts as
// client_gone: not as an error, not as a backend error, and its time is
// not taken for the backend's.
func TestHTTPClientGone(t *testing.T) {
	m, r := newMetrics(t)
	h, served := limited(t, m, manualLimiter(t, 5, time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/search", nil).WithContext(ctx))
	assert.Equal(t, 1.0, r.requests("search", "client_gone"))
	assert.Zero(t, r.requests("search", "error"))
	for _, kind := range []string{"timeout", "unavailable", "invalid"} {
		assert.Zero(t, r.backendErrors("search", kind), kind)
	}
	assert.Empty(t, r.points("keyrate.backend.duration"))
	assert.Zero(t, *served)
}

// Observe counts a gone client the same way whatever the middleware: the
// error httplimit reports for a request whose deadline passed.
func TestObserveClientGone(t *testing.T) {
	var err error
	mw, e := httplimit.New(manualLimiter(t, 5, time.Minute), httplimit.WithOnError(func(ev middleware.Event) { err = ev.Err }))
	require.NoError(t, e)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	mw.Handler(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	m, r := newMetrics(t)
	const route = "/pkg.S/M"
	observeError(m, route, err, 5*time.Millisecond)
	assert.Equal(t, 1.0, r.requests(route, "client_gone"))
	assert.Zero(t, r.requests(route, "error"))
	assert.Zero(t, r.backendErrors(route, "timeout"))
}
