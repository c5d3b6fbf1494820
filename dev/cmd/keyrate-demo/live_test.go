package main

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The demo serves the page and its stream beside the API, and every
// decision the API makes reaches the stream keyed as the limiter keys it.
func TestLiveViewIsWired(t *testing.T) {
	srv, client := startLiveDemo(t)

	resp, err := client.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "/live/app.js") {
		t.Fatalf("GET /: %d %q", resp.StatusCode, page)
	}
	if resp, err := client.Get(srv.URL + "/nope"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("GET /nope: %v %v, want 404", resp, err)
	}

	resp, err = client.Get(srv.URL + "/live/config")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		KeyHeader string
		Routes    []struct {
			Name, Method, Path string
			Policies, Quotas   []struct {
				Name     string
				Limit    int
				WindowMs float64
				Calendar string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cfg.KeyHeader != keyHeader || len(cfg.Routes) != len(routes) {
		t.Fatalf("config %+v", cfg)
	}
	for i, rt := range routes {
		got := cfg.Routes[i]
		if got.Name != rt.Name || got.Method != rt.Method || got.Path != rt.Path || len(got.Policies)+len(got.Quotas) != len(rt.Policies) {
			t.Errorf("route %d: page has %+v, demo has %+v", i, got, rt)
			continue
		}
		all := append(got.Policies, got.Quotas...) // the sliding policies come first in every route
		for j, p := range rt.Policies {
			window := p.Window
			if p.Calendar != (keyrate.Calendar{}) {
				start, end := backend.Period(p.Calendar, time.Now())
				window = end.Sub(start)
			}
			if g := all[j]; g.Name != p.Name || g.Limit != p.Limit || g.WindowMs != float64(window.Milliseconds()) || g.Calendar != calendarName(p) {
				t.Errorf("route %s, policy %d: page has %+v, demo has %+v", rt.Name, j, g, p)
			}
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/live/events", nil)
	stream, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	lines := bufio.NewScanner(stream.Body)

	req, _ = http.NewRequest("GET", srv.URL+"/api/status", nil)
	req.Header.Set(keyHeader, "alice")
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/status: %v %v", resp, err)
	}
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok || !strings.Contains(data, `"route"`) {
			continue
		}
		var ev struct {
			Route, Key       string
			Allowed          bool
			Limit, Remaining int
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Route != "status" || ev.Key != "x-api-key=2bd806c9" || !ev.Allowed || ev.Limit != 3 || ev.Remaining != 2 {
			t.Errorf("streamed decision %+v, want alice's first of 3 on status", ev)
		}
		return
	}
	t.Fatalf("stream ended without the decision: %v", lines.Err())
}

// An open page must not hold up shutdown: run closes the event streams
// before waiting for connections to finish.
func TestShutdownWithPageOpen(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "127.0.0.1:0", config{}, w)
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	if !lines.Scan() {
		t.Fatal("no output")
	}
	base, ok := strings.CutPrefix(lines.Text(), "keyrate-demo listening on ")
	if !ok {
		t.Fatalf("first line %q", lines.Text())
	}
	go io.Copy(io.Discard, r)

	resp, err := http.Get(base + "/live/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %v", resp.Header)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v (an open event stream held up shutdown)", err)
	}
}

// Behind a trusted proxy the page's event streams are capped per client as
// X-Forwarded-For names it, not per proxy: a client's 5th stream gets 503
// while another client behind the same proxy still gets one.
func TestEventStreamsPerClientBehindProxy(t *testing.T) {
	hub, err := newLive(config{TrustedProxies: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	srv := httptest.NewServer(hub.Handler())
	t.Cleanup(srv.Close)
	stream := func(client string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/live/events", nil)
		req.Header.Set("X-Forwarded-For", client)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() }) // open until the test ends
		return resp
	}
	for i := range 4 {
		if resp := stream("203.0.113.1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of 203.0.113.1: %d", i+1, resp.StatusCode)
		}
	}
	if resp := stream("203.0.113.1"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("5th stream of 203.0.113.1: %d, want 503", resp.StatusCode)
	}
	if resp := stream("203.0.113.2"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a stream of 203.0.113.2 behind the same proxy: %d, want 200", resp.StatusCode)
	}
}

// startLiveDemo serves the demo's API with its live page and stream, as
// main does, on a test server closed when t ends, and returns a client of
// it that gives up after 30 s.
func startLiveDemo(t *testing.T) (*httptest.Server, *http.Client) {
	t.Helper()
	hub, err := newLive(config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	api, closeLimiters, err := newServer(config{OnDecision: recordTo(hub)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLimiters)
	srv := httptest.NewServer(withLive(api, hub))
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second
	return srv, client
}

// liveEvent is what a test reads of a decision or refund event of the
// live page's stream.
type liveEvent struct {
	name                            string // "decision" or "refund"
	Route, Receipt, Rest            string
	Allowed                         bool
	Limit, Remaining, Weight, Given int
}

// liveEvents reads the stream's decision and refund events until it has
// n of them or the stream ends, and returns those it read.
func liveEvents(t *testing.T, lines *bufio.Scanner, n int) []liveEvent {
	t.Helper()
	var events []liveEvent
	name := ""
	for len(events) < n && lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "event: "); ok {
			name = v
			continue
		}
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok || (name != "decision" && name != "refund") {
			continue
		}
		e := liveEvent{name: name}
		require.NoError(t, json.Unmarshal([]byte(data), &e))
		events = append(events, e)
	}
	return events
}

// calendarName is what the page is told of p's calendar: "" for a sliding
// policy.
func calendarName(p keyrate.Policy) string {
	if p.Calendar == (keyrate.Calendar{}) {
		return ""
	}
	return p.Calendar.String()
}
