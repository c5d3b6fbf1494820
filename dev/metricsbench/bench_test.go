package metricsbench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/otellimit"
	"github.com/keyrate/keyrate/promlimit"
)

// observers returns each Observer under test, named, made anew for b:
// promlimit's on a registry of its own, otellimit's on an SDK
// MeterProvider with a ManualReader (the SDK keeps the same aggregates
// whatever reader exports them; none collects during the run).
func observers(b *testing.B) map[string]middleware.Observer {
	b.Helper()
	pm, err := promlimit.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { mp.Shutdown(context.Background()) })
	om, err := otellimit.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]middleware.Observer{"promlimit": pm, "otellimit": om}
}

var (
	perSecond = keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	perDay    = keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
)

// BenchmarkObserve is one Observe call, as a middleware makes it once per
// request: the route's series looked up, the result, the source and any
// violations counted, the backend's time recorded. The events are those of
// a gRPC method under two policies: admitted, refused by both, and a store
// that failed; and admitted-bare, a decision that reports no policies (a
// backend.Func's), the route lookup and the counts alone.
func BenchmarkObserve(b *testing.B) {
	refused := backend.Combine(
		keyrate.PolicyDecision{Policy: perSecond, RetryAfter: time.Second},
		keyrate.PolicyDecision{Policy: perDay, RetryAfter: time.Hour})
	admitted := backend.Combine(
		keyrate.PolicyDecision{Policy: perSecond, Allowed: true, Remaining: 9},
		keyrate.PolicyDecision{Policy: perDay, Allowed: true, Remaining: 999})
	events := []struct {
		name string
		ev   middleware.Event
	}{
		{"admitted", middleware.Event{Route: "/pkg.Service/Method", Key: "k", Decision: admitted, Duration: 300 * time.Nanosecond}},
		{"refused", middleware.Event{Route: "/pkg.Service/Method", Key: "k", Decision: refused, Duration: 300 * time.Nanosecond}},
		{"admitted-bare", middleware.Event{Route: "/pkg.Service/Method", Key: "k", Decision: keyrate.Decision{Allowed: true}, Duration: 300 * time.Nanosecond}},
		{"store-down", middleware.Event{Route: "/pkg.Service/Method", Key: "k", Err: fmt.Errorf("take: %w", keyrate.ErrUnavailable), Duration: time.Millisecond}},
	}
	for _, e := range events {
		for _, name := range []string{"promlimit", "otellimit"} {
			b.Run(e.name+"/"+name, func(b *testing.B) {
				o := observers(b)[name]
				o.Observe(e.ev) // the route's series are made here, not measured
				b.ReportAllocs()
				for b.Loop() {
					o.Observe(e.ev)
				}
			})
		}
	}
}

// discard is a ResponseWriter that keeps nothing but its header map,
// cleared between requests.
type discard struct{ h http.Header }

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
func (w *discard) WriteHeader(int)             {}

// BenchmarkHTTP is a request through httplimit over an in-process Limiter,
// 1024 client addresses in turn, with no Observer and with each: what the
// metrics add to a request is the difference. admitted never refuses (a
// limit of 2^20 per millisecond); refused always does (1 an hour, spent).
func BenchmarkHTTP(b *testing.B) {
	rs := make([]*http.Request, 1024)
	for i := range rs {
		rs[i] = httptest.NewRequest("GET", "/search", nil)
		rs[i].RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", i/256, i%256)
	}
	for _, load := range []struct {
		name   string
		limit  int
		window time.Duration
	}{{"admitted", 1 << 20, time.Millisecond}, {"refused", 1, time.Hour}} {
		for _, name := range []string{"none", "promlimit", "otellimit"} {
			b.Run(load.name+"/"+name, func(b *testing.B) {
				l, err := keyrate.New(load.limit, load.window)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				opts := []httplimit.Option{httplimit.WithRoute("search")}
				if name != "none" {
					opts = append(opts, httplimit.WithObserver(observers(b)[name]))
				}
				mw, err := httplimit.New(l, opts...)
				if err != nil {
					b.Fatal(err)
				}
				h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
				w := &discard{h: make(http.Header)}
				for _, r := range rs { // each client's first request is not measured
					h.ServeHTTP(w, r)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					clear(w.h)
					h.ServeHTTP(w, rs[i%len(rs)])
					i++
				}
			})
		}
	}
}
