package otellimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/otellimit"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// reader collects what the SDK holds, as an exporter would.
type reader struct {
	t  testing.TB
	mr *sdkmetric.ManualReader
}

func newMetrics(t testing.TB, opts ...otellimit.Option) (*otellimit.Metrics, *reader) {
	t.Helper()
	mr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(mr))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	m, err := otellimit.New(mp, opts...)
	require.NoError(t, err)
	return m, &reader{t, mr}
}

// collect returns every metric of otellimit's scope.
func (r *reader) collect() []metricdata.Metrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(r.t, r.mr.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == "github.com/keyrate/keyrate/otellimit" {
			return sm.Metrics
		}
	}
	return nil
}

// point is one data point: its attributes and its value (a counter's sum,
// a gauge's value, a histogram's count).
type point struct {
	attrs attribute.Set
	value float64
}

// points returns the data points of the metric named name.
func (r *reader) points(name string) []point {
	r.t.Helper()
	var ps []point
	for _, m := range r.collect() {
		if m.Name != name {
			continue
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				ps = append(ps, point{p.Attributes, float64(p.Value)})
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				ps = append(ps, point{p.Attributes, float64(p.Value)})
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				ps = append(ps, point{p.Attributes, float64(p.Count)})
			}
		default:
			r.t.Fatalf("%s: unexpected data %T", name, m.Data)
		}
	}
	return ps
}

// value returns the value of the one data point of name whose attributes
// are exactly want; it fails the test when there is none.
func (r *reader) value(name string, want map[string]string) float64 {
	r.t.Helper()
	for _, p := range r.points(name) {
		if hasExactly(p.attrs, want) {
			return p.value
		}
	}
	r.t.Fatalf("no data point %s%v", name, want)
	return 0
}

func hasExactly(s attribute.Set, want map[string]string) bool {
	if s.Len() != len(want) {
		return false
	}
	for k, v := range want {
		if got, ok := s.Value(attribute.Key(k)); !ok || got.AsString() != v {
			return false
		}
	}
	return true
}

func (r *reader) requests(route, result string) float64 {
	r.t.Helper()
	return r.value("keyrate.requests", map[string]string{"keyrate.route": route, "keyrate.result": result})
}

func (r *reader) backendErrors(route, kind string) float64 {
	r.t.Helper()
	return r.value("keyrate.backend.errors", map[string]string{"keyrate.route": route, "error.type": kind})
}

// decisions returns how many backend times were recorded for route.
func (r *reader) decisions(route string) float64 {
	r.t.Helper()
	return r.value("keyrate.backend.duration", map[string]string{"keyrate.route": route})
}

func (r *reader) source(route, source string) float64 {
	r.t.Helper()
	return r.value("keyrate.decisions", map[string]string{"keyrate.route": route, "keyrate.source": source})
}

func (r *reader) violations(route, policy string) float64 {
	r.t.Helper()
	return r.value("keyrate.policy.violations", map[string]string{"keyrate.route": route, "keyrate.policy": policy})
}

// limited returns a handler behind an httplimit Middleware on route
// "search" that m observes, and a count of the requests it served.
func limited(t *testing.T, m *otellimit.Metrics, b keyrate.Backend, opts ...httplimit.Option) (http.Handler, *int) {
	t.Helper()
	opts = append([]httplimit.Option{httplimit.WithRoute("search"), httplimit.WithObserver(m)}, opts...)
	mw, err := httplimit.New(b, opts...)
	require.NoError(t, err)
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
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// observeDecision and observeError tell m of a decision and of an error for
// route as a middleware does once it has asked the backend: with a key.
func observeDecision(m *otellimit.Metrics, route string, d keyrate.Decision, shadow bool, took time.Duration) {
	m.Observe(middleware.Event{Route: route, Key: "k", Decision: d, Shadow: shadow, Duration: took})
}

func observeError(m *otellimit.Metrics, route string, err error, took time.Duration) {
	m.Observe(middleware.Event{Route: route, Key: "k", Err: err, Duration: took})
}

type backendFunc func(ctx context.Context, key string, n int) (keyrate.Decision, error)

func (f backendFunc) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}

func fail(err error) keyrate.Backend {
	return backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{}, err
	})
}

// histogram returns the data point of keyrate.backend.duration for route.
func histogram(t *testing.T, r *reader, route string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	for _, m := range r.collect() {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "keyrate.backend.duration" {
			for _, p := range h.DataPoints {
				if hasExactly(p.Attributes, map[string]string{"keyrate.route": route}) {
					return p
				}
			}
		}
	}
	t.Fatalf("no keyrate.backend.duration for route %q", route)
	return metricdata.HistogramDataPoint[float64]{}
}

// data returns the data of the metric named name, nil when there is none.
func data(r *reader, name string) metricdata.Aggregation {
	for _, m := range r.collect() {
		if m.Name == name {
			return m.Data
		}
	}
	return nil
}
