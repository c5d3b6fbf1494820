package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

// login posts body to /api/login with the given Content-Type.
func login(h http.Handler, contentType, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/login", strings.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

const (
	form      = "application/x-www-form-urlencoded"
	jsonType  = "application/json"
	right     = "password=" + demoPassword
	wrong     = "password=guess"
	rightJSON = `{"password": "` + demoPassword + `"}`
)

// Only failed attempts count: however many logins succeed, the 6th failure
// within 15 minutes is refused, and so is the right password then, until
// the first failure has left the window. Each success is published as given
// back, with the receipt of its own decision.
func TestLoginCountsOnlyFailures(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, seen := newTestServer(t, config{Clock: clock})
	for i := range 10 {
		if rec := login(h, form, right); rec.Code != 200 {
			t.Fatalf("right password, attempt %d: %d %s", i+1, rec.Code, rec.Body)
		}
	}
	for i, c := range []struct {
		contentType, body string
		code              int
	}{
		{form, wrong, 401},
		{jsonType, `{"password": "guess"}`, 401},
		{jsonType, rightJSON, 200},
		{jsonType, `{"password":`, 400}, // a body that cannot be read is a failure too
		{form, "user=alice", 400},
		{form, right, 200},
		{form, wrong, 401}, // the 5th failure
	} {
		rec := login(h, c.contentType, c.body)
		if rec.Code != c.code {
			t.Fatalf("attempt %d (%s %q): %d %s, want %d", i+1, c.contentType, c.body, rec.Code, rec.Body, c.code)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != `"login";q=5;w=900` {
			t.Fatalf("attempt %d: RateLimit-Policy %q", i+1, got)
		}
	}
	clock.Advance(15*time.Minute - time.Second)
	for _, body := range []string{wrong, right} {
		if rec := login(h, form, body); rec.Code != 429 || rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("%q after 5 failures within 15 minutes: %d %v, want 429 with Retry-After 1", body, rec.Code, rec.Header())
		}
	}
	clock.Advance(2 * time.Second)
	if rec := login(h, form, wrong); rec.Code != 401 {
		t.Fatalf("a failure once the first 5 have left the window: %d, want 401", rec.Code)
	}

	// 12 successes, 6 failures counted, 2 refusals: each success is
	// followed by its refund, and the budget then has what it had before.
	var decisions, refunds int
	for i, d := range *seen {
		if d.Route != "login" || d.Key != "192.0.2.1" {
			t.Fatalf("published %+v, want the login of httptest's client", d)
		}
		if d.Refund == nil {
			decisions++
			continue
		}
		refunds++
		prev := (*seen)[i-1]
		if prev.Refund != nil || !prev.Decision.Allowed || *d.Refund != prev.Decision.Receipt || d.Refund.N() != 1 {
			t.Fatalf("refund %d gives back %+v, after %+v: want the receipt of the admitted decision before it", refunds, d.Refund, prev)
		}
		if d.Decision.Remaining != prev.Decision.Remaining+1 {
			t.Errorf("refund %d: %d remaining after it, want the %d before the attempt", refunds, d.Decision.Remaining, prev.Decision.Remaining+1)
		}
	}
	if decisions != 20 || refunds != 12 {
		t.Errorf("published %d decisions and %d refunds, want 20 and 12", decisions, refunds)
	}
}

// The page's stream reports a successful login's refund after its
// decision, with the same receipt, and none for a failure; the page's
// configuration says the route gives requests back and what to send.
func TestLoginOnThePage(t *testing.T) {
	srv, client := startLiveDemo(t)

	resp, err := client.Get(srv.URL + "/live/config")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Routes []struct {
			Name, Method, Path, Note string
			Refunds                  bool
			Form                     map[string]string
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range cfg.Routes {
		if r.Name != "login" {
			continue
		}
		found = true
		if r.Method != "POST" || r.Path != "/api/login" || !r.Refunds || r.Form["password"] == "" || !strings.Contains(r.Note, `"`+demoPassword+`"`) {
			t.Errorf("the page's login route: %+v", r)
		}
	}
	if !found {
		t.Fatal("the page has no login route")
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

	for _, body := range []string{right, wrong, wrong} {
		resp, err := client.Post(srv.URL+"/api/login", form, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	events := liveEvents(t, lines, 4)
	if len(events) < 4 {
		t.Fatalf("stream ended after %+v: %v", events, lines.Err())
	}
	want := []struct {
		name      string
		remaining int
	}{{"decision", 4}, {"refund", 5}, {"decision", 4}, {"decision", 3}}
	for i, w := range want {
		e := events[i]
		if e.name != w.name || e.Route != "login" || e.Receipt == "" || e.Remaining != w.remaining || e.Limit != 5 {
			t.Errorf("event %d: %+v, want a %s on login with a receipt and %d remaining", i, e, w.name, w.remaining)
		}
	}
	if events[1].Receipt != events[0].Receipt || events[2].Receipt == events[0].Receipt {
		t.Errorf("receipts %q, %q, %q: want the refund's to be its decision's, and the next decision's another", events[0].Receipt, events[1].Receipt, events[2].Receipt)
	}
}
