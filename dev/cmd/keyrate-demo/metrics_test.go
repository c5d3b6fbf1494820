package main

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// scrape reads h's /metrics into series name (with its labels) -> value.
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	rec := do(h, metricsPath)
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("GET %s: %d %v", metricsPath, rec.Code, rec.Header())
	}
	series := map[string]float64{}
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		series[line[:i]] = v
	}
	return series
}

func wantSeries(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present: %v), want %v", name, g, ok, v)
		}
	}
}

// /metrics counts every route's decisions and, for in-process limiters,
// the keys each tracks, while the demo's own subscribers (the log and the
// page) still see every decision.
func TestMetrics(t *testing.T) {
	h, seen := newTestServer(t, config{})
	for range 4 {
		do(h, "/api/status")
	}
	do(h, "/api/status", "X-API-Key", "alice")
	do(h, "/api/burst")

	got := scrape(t, h)
	wantSeries(t, got, map[string]float64{
		`keyrate_requests_total{result="allowed",route="status"}`:         4,
		`keyrate_requests_total{result="limited",route="status"}`:         1,
		`keyrate_requests_total{result="allowed",route="burst"}`:          1,
		`keyrate_requests_total{result="error",route="status"}`:           0,
		`keyrate_policy_violations_total{policy="",route="status"}`:       1,
		`keyrate_backend_duration_seconds_count{route="status"}`:          5,
		`keyrate_backend_errors_total{kind="unavailable",route="status"}`: 0,
		`keyrate_keys{route="status"}`:                                    2,
		`keyrate_keys{route="burst"}`:                                     1,
		`keyrate_keys{route="search"}`:                                    0,
	})
	if len(*seen) != 6 {
		t.Errorf("the demo's subscribers saw %d decisions, want 6", len(*seen))
	}
	if rec := do(h, metricsPath); strings.Contains(rec.Body.String(), "alice") {
		t.Errorf("/metrics names a client:\n%s", rec.Body)
	}
}

// With a Redis that cannot be reached, every request is served (the
// middleware fails open), logged as an error, and counted as one; a Redis
// limiter tracks no keys in the process, so there is no keyrate_keys.
func TestMetricsOfAnUnreachableRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	h, seen := newTestServer(t, config{Redis: client})

	if rec := do(h, "/api/status"); rec.Code != 200 {
		t.Fatalf("with Redis unreachable: %d, want 200 (fail open)", rec.Code)
	}
	got := scrape(t, h)
	// Redis refuses the connection: the store is unavailable, not slow,
	// although go-redis retries the dial until the time budget runs out.
	wantSeries(t, got, map[string]float64{
		`keyrate_requests_total{result="error",route="status"}`:           1,
		`keyrate_requests_total{result="allowed",route="status"}`:         0,
		`keyrate_backend_errors_total{kind="invalid",route="status"}`:     0,
		`keyrate_backend_errors_total{kind="unavailable",route="status"}`: 1,
		`keyrate_backend_errors_total{kind="timeout",route="status"}`:     0,
	})
	for name := range got {
		if strings.HasPrefix(name, "keyrate_keys") {
			t.Errorf("series %s for a Redis limiter", name)
		}
	}
	if len(*seen) != 1 || (*seen)[0].Err == nil {
		t.Errorf("decisions seen: %+v, want one with the error", *seen)
	}
}
