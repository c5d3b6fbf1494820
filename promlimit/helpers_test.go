package promlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/promlimit"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newMetrics(t testing.TB, opts ...promlimit.Option) (*promlimit.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := promlimit.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// value returns the value of the series of name whose labels include want:
// a counter's or gauge's value, a histogram's sample count. It fails the
// test when there is no such series.
func value(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	for _, m := range series(t, reg, name) {
		if hasLabels(m, want) {
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, want)
	return 0
}

func series(t *testing.T, reg prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// limited returns a handler behind an httplimit Middleware on route "search"
// that m observes, and a count of the requests it served.
func limited(t *testing.T, m *promlimit.Metrics, b keyrate.Backend, opts ...httplimit.Option) (http.Handler, *int) {
	t.Helper()
	opts = append([]httplimit.Option{httplimit.WithRoute("search"), httplimit.WithObserver(m)}, opts...)
	mw, err := httplimit.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	served := new(int)
	return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { *served++ })), served
}

func get(h http.Handler, from string) int {
	r := httptest.NewRequest("GET", "/search", nil)
	r.RemoteAddr = from + ":40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func manualLimiter(t *testing.T, limit int, window time.Duration) *keyrate.Limiter {
	t.Helper()
	l, err := keyrate.New(limit, window, keyrate.WithClock(keyrate.NewManualClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// observeDecision and observeError tell m of a decision and of an error for
// route as a middleware does once it has asked the backend: with a key.
func observeDecision(m *promlimit.Metrics, route string, d keyrate.Decision, shadow bool, took time.Duration) {
	m.Observe(middleware.Event{Route: route, Key: "k", Decision: d, Shadow: shadow, Duration: took})
}

func observeError(m *promlimit.Metrics, route string, err error, took time.Duration) {
	m.Observe(middleware.Event{Route: route, Key: "k", Err: err, Duration: took})
}

type backendFunc func(ctx context.Context, key string, n int) (keyrate.Decision, error)

func (f backendFunc) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}
