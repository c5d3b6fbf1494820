package promlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/promlimit"
)

// A route limited to two requests a minute per client, its metrics served
// on /metrics. Three requests from one client: two allowed, one limited.
func Example() {
	reg := prometheus.NewRegistry()
	metrics, _ := promlimit.New(reg)

	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	_ = metrics.TrackKeys("search", l)
	search, _ := httplimit.New(l, httplimit.WithRoute("search"), httplimit.WithObserver(metrics))

	mux := http.NewServeMux()
	mux.Handle("GET /search", search.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "results")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 3 {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/search", nil))
	}
	scrape := httptest.NewRecorder()
	mux.ServeHTTP(scrape, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(scrape.Body.String(), "\n") {
		if strings.HasPrefix(line, "keyrate_requests_total") || strings.HasPrefix(line, "keyrate_keys") ||
			strings.HasPrefix(line, "keyrate_decisions_total") ||
			strings.HasPrefix(line, "keyrate_backend_duration_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// keyrate_backend_duration_seconds_count{route="search"} 3
	// keyrate_decisions_total{route="search",source="fallback"} 0
	// keyrate_decisions_total{route="search",source="store"} 3
	// keyrate_keys{route="search"} 1
	// keyrate_requests_total{result="allowed",route="search"} 2
	// keyrate_requests_total{result="client_gone",route="search"} 0
	// keyrate_requests_total{result="error",route="search"} 0
	// keyrate_requests_total{result="limited",route="search"} 1
	// keyrate_requests_total{result="shadow_limited",route="search"} 0
}
