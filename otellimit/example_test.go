package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/otellimit"
)

// A route limited to two requests a minute per client, observed through
// the SDK. Three requests from one client: two allowed, one limited. A
// program would give the provider an exporter's reader (OTLP, say); the
// ManualReader collects here what it would export.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	metrics, _ := otellimit.New(provider)

	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	_ = metrics.TrackKeys("search", l)
	search, _ := httplimit.New(l, httplimit.WithRoute("search"), httplimit.WithObserver(metrics))
	h := search.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "results")
	}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/search", nil))
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]: // the counters: their series above 0
			for _, p := range data.DataPoints {
				if p.Value > 0 {
					fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
				}
			}
		case metricdata.Gauge[int64]:
			for _, p := range data.DataPoints {
				fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
			}
		case metricdata.Histogram[float64]:
			for _, p := range data.DataPoints {
				fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), "count", p.Count)
			}
		}
	}
	// Unordered output:
	// keyrate.requests keyrate.result=allowed,keyrate.route=search 2
	// keyrate.requests keyrate.result=limited,keyrate.route=search 1
	// keyrate.decisions keyrate.route=search,keyrate.source=store 3
	// keyrate.backend.duration keyrate.route=search count 3
	// keyrate.policy.violations keyrate.policy=,keyrate.route=search 1
	// keyrate.keys keyrate.route=search 1
}
