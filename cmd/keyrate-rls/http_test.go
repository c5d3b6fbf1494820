package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHTTP(t *testing.T) {
	h := newHarness(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	var ready atomic.Bool
	handler := newHTTPHandler(h.svc, ready.Load, prometheus.NewRegistry())
	serve := func(method, path, body string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		out, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(out)
	}

	if code, _ := serve("GET", "/healthcheck", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthcheck before ready: %d, want 503", code)
	}
	ready.Store(true)
	if code, body := serve("GET", "/healthcheck", ""); code != http.StatusOK || body != "OK\n" {
		t.Errorf("GET /healthcheck when ready: %d %q", code, body)
	}

	req := `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "sk-secret"}]}]}`
	for _, c := range []struct {
		method, body string
		code         int
		want         string
	}{
		{"POST", req, 200, `"overallCode":"OK"`},
		{"POST", req, 429, `"overallCode":"OVER_LIMIT"`},
		{"POST", req, 429, `"durationUntilReset":"60s"`},
		{"POST", `{"domain": "d"}`, 400, "the request has no descriptors"},
		{"POST", `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": sk-secret}]}]}`, 400, "not a RateLimitRequest"},
		{"POST", strings.Repeat(" ", maxJSONBody+1), 413, "over 1048576 bytes"},
		{"GET", "", 405, ""},
	} {
		code, body := serve(c.method, "/json", c.body)
		if code != c.code || !strings.Contains(strings.ReplaceAll(body, " ", ""), strings.ReplaceAll(c.want, " ", "")) {
			t.Errorf("%s /json %.40q: %d %s, want %d and %s", c.method, c.body, code, body, c.code, c.want)
		}
		if strings.Contains(body, "sk-secret") {
			t.Errorf("the answer quotes a descriptor value: %s", body)
		}
	}
	if code, _ := serve("GET", "/metrics", ""); code != http.StatusOK {
		t.Errorf("GET /metrics: %d", code)
	}
}

// The debug server's /debug/pprof/cmdline shows the command line without
// the password of a -redis or -redis-cluster URL.
func TestDebugCmdlineRedactsPasswords(t *testing.T) {
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	os.Args = []string{"keyrate-rls", "-redis", "redis://:s3cret@h:6379/0", "-redis-cluster=rediss://u:s3cret@a:1,redis://:s3cret@b:2", "-config", "r.yaml"}
	s := &servers{}
	rec := httptest.NewRecorder()
	s.debugHandler(prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/cmdline", nil))
	got := rec.Body.String()
	if strings.Contains(got, "s3cret") {
		t.Errorf("cmdline shows a password: %q", got)
	}
	want := "keyrate-rls\x00-redis\x00redis://:xxxxx@h:6379/0\x00-redis-cluster=rediss://u:xxxxx@a:1,redis://:xxxxx@b:2\x00-config\x00r.yaml"
	if got != want {
		t.Errorf("cmdline %q, want %q", got, want)
	}
}
