package otellimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// discard is a ResponseWriter that keeps nothing but its header map, cleared
// between requests, so that allocations counted are the middleware's own.
type discard struct{ h http.Header }

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
func (w *discard) WriteHeader(int)             {}

// BenchmarkHTTP measures what the metrics add to a request: the same
// in-process Limiter behind httplimit, without and with the Metrics (on
// the SDK's MeterProvider) as its Observer, over 1024 client addresses.
// The difference is the Observer's cost: reading the clock twice, a route
// lookup, three counter adds and a histogram record.
//
//   - plain, plain-refused: httplimit alone, admitting, refusing.
//   - metrics, metrics-refused: with the Metrics as its Observer.
//   - observe: Observe alone, route lookup included (promlimit's and
//     otellimit's side by side: dev/benchmarks' BenchmarkObservers).
func BenchmarkHTTP(b *testing.B) {
	rs := make([]*http.Request, 1024)
	for i := range rs {
		rs[i] = httptest.NewRequest("GET", "/search", nil)
		rs[i].RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", i/256, i%256)
	}
	run := func(b *testing.B, limit int, window time.Duration, withMetrics bool) {
		// A window short enough that logs stay small whatever b.N is, and a
		// limit high enough that nothing is refused (or 1 an hour, to refuse).
		l, _ := keyrate.New(limit, window)
		defer l.Close()
		opts := []httplimit.Option{httplimit.WithRoute("search")}
		if withMetrics {
			m, _ := newMetrics(b)
			opts = append(opts, httplimit.WithObserver(m))
		}
		mw, err := httplimit.New(l, opts...)
		if err != nil {
			b.Fatal(err)
		}
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		w := &discard{h: make(http.Header)}
		for _, r := range rs { // the first request of each client is not the one measured
			h.ServeHTTP(w, r)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			clear(w.h)
			h.ServeHTTP(w, rs[i%len(rs)])
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, 1<<20, time.Millisecond, false) })
	b.Run("metrics", func(b *testing.B) { run(b, 1<<20, time.Millisecond, true) })
	b.Run("plain-refused", func(b *testing.B) { run(b, 1, time.Hour, false) })
	b.Run("metrics-refused", func(b *testing.B) { run(b, 1, time.Hour, true) })
	b.Run("observe", func(b *testing.B) {
		m, _ := newMetrics(b)
		ev := middleware.Event{Route: "/pkg.Service/Method", Key: "k", Decision: keyrate.Decision{Allowed: true}, Duration: 300 * time.Nanosecond}
		b.ReportAllocs()
		for range b.N {
			m.Observe(ev)
		}
	})
}
