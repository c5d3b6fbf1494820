package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

var testRoutes = []Route{
	{Name: "status", Path: "/api/status", Policies: []keyrate.Policy{{Limit: 3, Window: time.Minute}}},
	{Name: "export", Method: http.MethodGet, Path: "/api/export", Policies: []keyrate.Policy{
		{Name: "burst", Limit: 2, Window: 10 * time.Second},
		{Name: "hourly", Limit: 5, Window: time.Hour},
	}},
}

func newHub(t *testing.T, cfg Config) *Hub {
	t.Helper()
	if cfg.Routes == nil {
		cfg.Routes = testRoutes
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Route{Name: "a", Path: "/a", Policies: []keyrate.Policy{{Limit: 1, Window: time.Second}}}
	with := func(f func(*Route)) []Route {
		r := good
		r.Policies = slices.Clone(good.Policies)
		f(&r)
		return []Route{r}
	}
	two := func(a, b string) func(*Route) {
		return func(r *Route) {
			r.Policies = []keyrate.Policy{{Name: a, Limit: 1, Window: time.Second}, {Name: b, Limit: 2, Window: time.Minute}}
		}
	}
	cases := map[string][]Route{
		"no routes":             nil,
		"no name":               with(func(r *Route) { r.Name = "" }),
		"duplicate name":        {good, good},
		"relative path":         with(func(r *Route) { r.Path = "a" }),
		"no policy":             with(func(r *Route) { r.Policies = nil }),
		"too many policies":     with(func(r *Route) { r.Policies = make([]keyrate.Policy, backend.MaxPolicies+1) }),
		"zero limit":            with(func(r *Route) { r.Policies[0].Limit = 0 }),
		"negative limit":        with(func(r *Route) { r.Policies[0].Limit = -3 }),
		"zero window":           with(func(r *Route) { r.Policies[0].Window = 0 }),
		"sub-ms window":         with(func(r *Route) { r.Policies[0].Window = time.Microsecond }),
		"negative window":       with(func(r *Route) { r.Policies[0].Window = -time.Second }),
		"unnamed of several":    with(two("a", "")),
		"duplicate policy name": with(two("a", "a")),
	}
	for name, routes := range cases {
		t.Run(name, func(t *testing.T) {
			h, err := New(Config{Routes: routes})
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, %v; want an error wrapping ErrConfig", h, err)
			}
		})
	}
}

func TestNewFillsDefaults(t *testing.T) {
	h := newHub(t, Config{})
	c := h.cfg
	if c.KeyHeader != "X-API-Key" || c.Buffer != 512 || c.History != 1000 ||
		c.MaxSubscribers != 32 || c.MaxSubscribersPerClient != 4 || c.ClientOf == nil ||
		c.KeepAlive != 10*time.Second || c.WriteTimeout != 10*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	if c.Routes[0].Method != http.MethodGet {
		t.Errorf("default method = %q, want GET", c.Routes[0].Method)
	}
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandlerServesPageFiles(t *testing.T) {
	h := newHub(t, Config{}).Handler()
	cases := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="/live/app.js" defer></script>`},
		{"/live/app.js", "text/javascript; charset=utf-8", "new EventSource('/live/events')"},
		{"/live/style.css", "text/css; charset=utf-8", "--ok:"},
		{"/live/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, c := range cases {
		resp := get(t, h, http.MethodGet, c.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d", c.path, resp.StatusCode)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != c.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.contentType)
		}
		if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", c.path)
		}
		if !bytes.Contains(body, []byte(c.contains)) {
			t.Errorf("GET %s: body lacks %q", c.path, c.contains)
		}
	}
}

func TestHandlerRejectsOtherPathsAndMethods(t *testing.T) {
	h := newHub(t, Config{}).Handler()
	for _, path := range []string{"/index.html", "/live/", "/live/page/app.js", "/live/../live/app.js.map", "/api/status"} {
		if resp := get(t, h, http.MethodGet, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, resp.StatusCode)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		resp := get(t, h, m, "/")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /: status %d, Allow %q", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	resp := get(t, h, http.MethodHead, "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Type") == "" {
		t.Errorf("HEAD /: status %d, %d body bytes, type %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}
}

// The page must work offline: every file it loads comes from this server,
// and nothing in it points anywhere else.
func TestPageLoadsNothingFromElsewhere(t *testing.T) {
	h := newHub(t, Config{}).Handler()
	for _, path := range []string{"/", "/live/app.js", "/live/style.css"} {
		body, _ := io.ReadAll(get(t, h, http.MethodGet, path).Body)
		text := strings.ReplaceAll(string(body), "http://www.w3.org/2000/svg", "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
	}
	index, _ := io.ReadAll(get(t, h, http.MethodGet, "/").Body)
	for _, attr := range []string{`src="`, `href="`} {
		rest := string(index)
		for {
			_, after, ok := strings.Cut(rest, attr)
			if !ok {
				break
			}
			ref, tail, _ := strings.Cut(after, `"`)
			rest = tail
			if resp := get(t, h, http.MethodGet, ref); resp.StatusCode != http.StatusOK {
				t.Errorf("index.html refers to %s, which is not served (status %d)", ref, resp.StatusCode)
			}
		}
	}
}

func TestConfigDescribesRoutes(t *testing.T) {
	before := time.Now()
	resp := get(t, newHub(t, Config{KeyHeader: "X-Client"}).Handler(), http.MethodGet, ConfigPath)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got configJSON
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := []routeJSON{
		{Name: "status", Method: "GET", Path: "/api/status", Policies: []policyJSON{{Limit: 3, WindowMs: 60000}}},
		{Name: "export", Method: "GET", Path: "/api/export", Policies: []policyJSON{
			{Name: "burst", Limit: 2, WindowMs: 10000},
			{Name: "hourly", Limit: 5, WindowMs: 3600000},
		}},
	}
	if got.KeyHeader != "X-Client" || fmt.Sprint(got.Routes) != fmt.Sprint(want) {
		t.Errorf("config = %+v, want key header X-Client and routes %+v", got, want)
	}
	if now := time.UnixMilli(int64(got.Now)); now.Before(before.Truncate(time.Millisecond)) || now.After(time.Now()) {
		t.Errorf("config now = %v, want between %v and now", now, before)
	}
}

// KeyPath answers with ShowKey of the header value, read from the header
// only, and the value itself by default.
func TestKeyPathShowsTheRecordedKey(t *testing.T) {
	show := newHub(t, Config{KeyHeader: "X-Client", ShowKey: func(v string) string { return "client#" + strconv.Itoa(len(v)) }}).Handler()
	keyOf := func(h http.Handler, hdr, value string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, KeyPath, nil)
		if hdr != "" {
			r.Header.Set(hdr, value)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			return rec.Code, ""
		}
		var got keyJSON
		if err := json.NewDecoder(rec.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: Cache-Control %q, want no-store", KeyPath, rec.Header().Get("Cache-Control"))
		}
		return rec.Code, got.Key
	}
	if code, key := keyOf(show, "X-Client", "secret"); code != 200 || key != "client#6" {
		t.Errorf("with ShowKey: %d %q, want 200 client#6", code, key)
	}
	if code, _ := keyOf(show, "X-API-Key", "secret"); code != http.StatusBadRequest {
		t.Errorf("without the key header: %d, want 400", code)
	}
	if code, key := keyOf(newHub(t, Config{}).Handler(), "X-API-Key", "alice"); code != 200 || key != "alice" {
		t.Errorf("by default: %d %q, want 200 alice", code, key)
	}
}

// sse is one Server-Sent Event as a browser would parse it.
type sse struct {
	id, event, data string
	retry           int
}

// parseSSE splits a stream into events, following the framing rules of the
// EventSource specification for the fields the hub uses.
func parseSSE(t *testing.T, stream string) []sse {
	t.Helper()
	var out []sse
	var cur sse
	lines := strings.SplitAfter(stream, "\n")
	if last := len(lines) - 1; lines[last] == "" {
		lines = lines[:last]
	}
	for _, line := range lines {
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("stream ends inside a line: %q", line)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			out = append(out, cur)
			cur = sse{}
			continue
		}
		field, value, _ := strings.Cut(line, ": ")
		switch field {
		case "id":
			cur.id = value
		case "event":
			cur.event = value
		case "data":
			if cur.data != "" {
				t.Fatalf("event with two data lines: %q", stream)
			}
			cur.data = value
		case "retry":
			cur.retry, _ = strconv.Atoi(value)
		default:
			t.Fatalf("unknown field in line %q", line)
		}
	}
	return out
}

func decoded(t *testing.T, e sse) event {
	t.Helper()
	var ev event
	if e.event != "decision" {
		t.Fatalf("event type %q, want decision (%+v)", e.event, e)
	}
	if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
		t.Fatalf("data %q: %v", e.data, err)
	}
	if e.id != strconv.FormatUint(ev.Seq, 10) {
		t.Fatalf("id %q does not match seq %d", e.id, ev.Seq)
	}
	return ev
}

// readEvents reads n events from a live stream.
func readEvents(t *testing.T, r *bufio.Reader, n int) []sse {
	t.Helper()
	var b strings.Builder
	for got := 0; got < n; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream after %d events: %v (%q)", got, err, b.String())
		}
		b.WriteString(line)
		if line == "\n" {
			got++
		}
	}
	return parseSSE(t, b.String())
}

func TestStreamOverRealConnection(t *testing.T) {
	hub := newHub(t, Config{})
	srv := httptest.NewServer(hub.Handler())
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+EventsPath, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	r := bufio.NewReader(resp.Body)
	hello := readEvents(t, r, 1)[0]
	if hello.event != "hello" || hello.retry != 2000 || !strings.Contains(hello.data, `"now":`) {
		t.Fatalf("first event %+v, want hello with retry 2000 and the server time", hello)
	}

	at := time.Date(2026, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	key := "alice \"quoted\"\nnew line </script>"
	status := keyrate.Policy{Limit: 3, Window: time.Minute}
	burst := keyrate.Policy{Name: "burst", Limit: 2, Window: 10 * time.Second}
	hourly := keyrate.Policy{Name: "hourly", Limit: 5, Window: time.Hour}
	hub.Record("status", key, backend.Combine(keyrate.PolicyDecision{Policy: status,
		RetryAfter: 1500 * time.Millisecond, RefillAfter: 1500 * time.Millisecond, ResetAfter: 59 * time.Second}), at)
	// Refused by hourly alone: burst had room, and says so.
	hub.Record("export", "bob", backend.Combine(
		keyrate.PolicyDecision{Policy: burst, Allowed: true, Remaining: 1, RefillAfter: 4 * time.Second, ResetAfter: 4 * time.Second},
		keyrate.PolicyDecision{Policy: hourly, Remaining: 0, RetryAfter: 20 * time.Minute, RefillAfter: 20 * time.Minute, ResetAfter: 59 * time.Minute},
	), at.Add(time.Millisecond))

	evs := readEvents(t, r, 2)
	first, second := decoded(t, evs[0]), decoded(t, evs[1])
	want1 := event{Seq: 1, At: float64(at.UnixMicro()) / 1e3, Route: "status", Key: key, Limit: 3, Weight: 1, RetryAfterMs: 1500, ResetAfterMs: 59000,
		Policies: []policyEvent{{Limit: 3, WindowMs: 60000, RetryAfterMs: 1500, RefillAfterMs: 1500, ResetAfterMs: 59000}}}
	want2 := event{Seq: 2, At: float64(at.UnixMicro())/1e3 + 1, Route: "export", Key: "bob", Policy: "hourly", Limit: 5, Weight: 1, RetryAfterMs: 1_200_000, ResetAfterMs: 3_540_000,
		Policies: []policyEvent{
			{Name: "burst", Limit: 2, WindowMs: 10000, Allowed: true, Remaining: 1, RefillAfterMs: 4000, ResetAfterMs: 4000},
			{Name: "hourly", Limit: 5, WindowMs: 3_600_000, RetryAfterMs: 1_200_000, RefillAfterMs: 1_200_000, ResetAfterMs: 3_540_000},
		}}
	if !reflect.DeepEqual(first, want1) {
		t.Errorf("first decision %+v, want %+v", first, want1)
	}
	if !reflect.DeepEqual(second, want2) {
		t.Errorf("second decision %+v, want %+v", second, want2)
	}
	if hub.Subscribers() != 1 {
		t.Errorf("Subscribers = %d, want 1", hub.Subscribers())
	}
}

// stream drives serveEvents without a network inside a synctest bubble:
// each Write blocks until the test takes it, so a stalled browser is a
// writer nobody reads.
type stream struct {
	header http.Header
	code   int // the status written, if any
	writes chan []byte
	done   chan struct{}
	cancel context.CancelFunc
}

func (s *stream) Header() http.Header  { return s.header }
func (s *stream) WriteHeader(code int) { s.code = code }
func (s *stream) Flush()               {}
func (s *stream) Write(b []byte) (int, error) {
	s.writes <- bytes.Clone(b)
	return len(b), nil
}

func open(h *Hub, lastID string) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{header: http.Header{}, writes: make(chan []byte), done: make(chan struct{}), cancel: cancel}
	req := httptest.NewRequest(http.MethodGet, EventsPath, nil).WithContext(ctx)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	go func() {
		defer close(s.done)
		h.Handler().ServeHTTP(s, req)
	}()
	return s
}

// drain returns everything written until the handler blocks for more input.
func (s *stream) drain() string {
	var b strings.Builder
	for {
		synctest.Wait()
		select {
		case w := <-s.writes:
			b.Write(w)
		default:
			return b.String()
		}
	}
}

func types(evs []sse) string {
	var out []string
	for _, e := range evs {
		if e.event == "decision" {
			out = append(out, "d"+e.id)
		} else {
			out = append(out, e.event)
		}
	}
	return strings.Join(out, " ")
}

func record(h *Hub, n int) {
	for range n {
		h.Record("status", "k", keyrate.Decision{Allowed: true, Limit: 3}, time.Now())
	}
}

func TestSlowSubscriberIsDroppedNotWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{Buffer: 4})
		s := open(h, "")
		synctest.Wait() // the handler is now stuck writing hello: nobody reads

		record(h, 10) // must return at once though the subscriber reads nothing
		if got := h.Dropped(); got != 6 {
			t.Fatalf("Dropped = %d, want 6 (10 events, 4 buffered)", got)
		}

		evs := parseSSE(t, s.drain())
		if got := types(evs); got != "hello d1 d2 d3 d4 dropped" {
			t.Fatalf("stream = %s, want hello, the 4 buffered decisions, then a dropped notice", got)
		}
		var notice struct{ Dropped int }
		if err := json.Unmarshal([]byte(evs[5].data), &notice); err != nil || notice.Dropped != 6 {
			t.Errorf("dropped notice %q: want dropped 6 (%v)", evs[5].data, err)
		}

		record(h, 1) // the subscriber caught up and keeps receiving
		if got := types(parseSSE(t, s.drain())); got != "d11" {
			t.Errorf("after catching up: %s, want d11", got)
		}
		s.cancel()
		<-s.done
	})
}

func TestOneSlowSubscriberDoesNotStarveAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{Buffer: 2, History: -1})
		slow, fast := open(h, ""), open(h, "")
		fast.drain()
		synctest.Wait()
		var got []string
		for range 5 {
			record(h, 1)
			got = append(got, types(parseSSE(t, fast.drain())))
		}
		if strings.Join(got, ",") != "d1,d2,d3,d4,d5" {
			t.Errorf("fast subscriber saw %v, want every decision", got)
		}
		if h.Dropped() != 3 {
			t.Errorf("Dropped = %d, want 3 (the slow one buffers 2 of 5)", h.Dropped())
		}
		slow.cancel()
		fast.cancel()
		slow.drain()
		<-slow.done
		<-fast.done
	})
}

func TestKeepAliveTickCarriesServerTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{KeepAlive: 5 * time.Second})
		s := open(h, "")
		hello := parseSSE(t, s.drain())
		if types(hello) != "hello" {
			t.Fatalf("first: %s", types(hello))
		}
		start := time.Now()
		time.Sleep(4 * time.Second)
		if got := s.drain(); got != "" {
			t.Fatalf("wrote %q before the keep-alive interval", got)
		}
		time.Sleep(time.Second)
		evs := parseSSE(t, s.drain())
		want := fmt.Sprintf(`{"now":%.3f,"dropped":0}`, float64(start.Add(5*time.Second).UnixMicro())/1e3)
		if types(evs) != "tick" || evs[0].data != want {
			t.Errorf("after 5s: %+v, want one tick with data %s", evs, want)
		}
		s.cancel()
		<-s.done
	})
}

func TestHistoryReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{History: 3})
		record(h, 5)
		for _, c := range []struct{ lastID, want string }{
			{"", "hello d3 d4 d5"},   // new page: the last 3
			{"3", "hello d4 d5"},     // reconnect: what it missed
			{"5", "hello"},           // reconnect, nothing missed
			{"99", "hello d3 d4 d5"}, // an id from before a restart
			{"junk", "hello d3 d4 d5"},
		} {
			s := open(h, c.lastID)
			if got := types(parseSSE(t, s.drain())); got != c.want {
				t.Errorf("Last-Event-ID %q: %s, want %s", c.lastID, got, c.want)
			}
			s.cancel()
			<-s.done
		}
	})
}

func TestNoHistoryAndNoSubscribersRecordsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{History: -1})
		record(h, 3)
		s := open(h, "")
		if got := types(parseSSE(t, s.drain())); got != "hello" {
			t.Errorf("got %s, want hello only", got)
		}
		record(h, 1)
		if got := types(parseSSE(t, s.drain())); got != "d1" {
			t.Errorf("got %s, want d1: ids count only published events", got)
		}
		s.cancel()
		<-s.done
	})
}

func TestDisconnectUnsubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{})
		s := open(h, "")
		s.drain()
		if h.Subscribers() != 1 {
			t.Fatalf("Subscribers = %d, want 1", h.Subscribers())
		}
		s.cancel()
		<-s.done
		if h.Subscribers() != 0 {
			t.Errorf("after disconnect: Subscribers = %d, want 0", h.Subscribers())
		}
	})
}

func TestCloseEndsStreamsAndRefusesNewOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{})
		s := open(h, "")
		s.drain()
		h.Close()
		h.Close() // idempotent
		<-s.done
		record(h, 1) // ignored after Close
		resp := get(t, h.Handler(), http.MethodGet, EventsPath)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("after Close: status %d, want 503", resp.StatusCode)
		}
	})
}

// At MaxSubscribers, a new stream takes the place of the oldest, which
// ends; one that ends leaves its place free.
func TestMaxSubscribers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{MaxSubscribers: 1})
		first := open(h, "")
		first.drain()
		second := open(h, "")
		if got := types(parseSSE(t, second.drain())); got != "hello" {
			t.Errorf("second stream got %q, want hello: in the first's place", got)
		}
		<-first.done // ended
		if n := h.Subscribers(); n != 1 {
			t.Errorf("%d streams open, want 1", n)
		}
		second.cancel()
		<-second.done
		if n := h.Subscribers(); n != 0 {
			t.Errorf("%d streams open after the last left, want 0", n)
		}
	})
}

// 32 addresses holding one stream each, however many there are (IPv4
// ones, or IPv6 /64s of one /52), fill the hub, yet a newcomer gets a
// stream: in the place of the oldest, whose page reconnects and takes the
// place of the next oldest in turn. No set of addresses holds a place
// for longer than it takes 32 newer streams to open.
func TestManyClientsCannotFillTheHub(t *testing.T) {
	for name, addr := range map[string]func(i int) string{
		"IPv4":               func(i int) string { return fmt.Sprintf("192.0.2.%d:1000", i+1) },
		"IPv6 /64s of a /52": func(i int) string { return fmt.Sprintf("[2001:db8:0:%x::1]:1000", i) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHub(t, Config{KeepAlive: time.Hour})
				hello := func(s *stream) bool { return types(parseSSE(t, s.drain())) == "hello" }
				held := make([]*stream, 32)
				for i := range held {
					if held[i] = openFrom(h, addr(i)); !hello(held[i]) {
						t.Fatalf("stream of client %d refused", i+1)
					}
				}
				newcomer := openFrom(h, "203.0.113.9:1000")
				if !hello(newcomer) {
					t.Fatal("a newcomer was refused while 32 clients held a stream each")
				}
				ended := func() []int {
					var out []int
					for i, s := range held {
						select {
						case <-s.done:
							out = append(out, i)
						default:
						}
					}
					return out
				}
				if got := ended(); !slices.Equal(got, []int{0}) || h.Subscribers() != 32 {
					t.Fatalf("streams ended %v, %d open; want the oldest (0) ended, 32 open", got, h.Subscribers())
				}
				again := openFrom(h, addr(0)) // its page reconnects
				if !hello(again) {
					t.Fatal("the page whose stream gave way could not reconnect")
				}
				if got := ended(); !slices.Equal(got, []int{0, 1}) {
					t.Errorf("streams ended %v, want 0 and then 1, the next oldest", got)
				}
				for _, s := range append(held[2:], newcomer, again) {
					s.cancel()
					<-s.done
				}
			})
		})
	}
}

// Per-client fairness still holds when the hub is full: the oldest
// stream of the client holding the most gives way, before older streams
// of clients holding fewer.
func TestFullHubTakesFromTheClientHoldingTheMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{MaxSubscribers: 4, KeepAlive: time.Hour})
		var open []*stream
		for _, a := range []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1", "192.0.2.3:2"} {
			s := openFrom(h, a)
			s.drain()
			open = append(open, s)
		}
		newcomer := openFrom(h, "198.51.100.1:1")
		newcomer.drain()
		select {
		case <-open[2].done:
		default:
			t.Fatal("192.0.2.3's oldest stream did not give way to the newcomer")
		}
		for i, s := range open {
			select {
			case <-s.done:
				if i != 2 {
					t.Errorf("stream %d ended, want only 192.0.2.3's oldest (2)", i)
				}
			default:
				s.cancel()
				<-s.done
			}
		}
		newcomer.cancel()
		<-newcomer.done
	})
}

// Many goroutines record while a subscriber reads: every event arrives once,
// in id order, with nothing dropped when the buffer is large enough.
func TestConcurrentRecord(t *testing.T) {
	const writers, each = 8, 50
	hub := newHub(t, Config{Buffer: writers * each, History: -1})
	srv := httptest.NewServer(hub.Handler())
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + EventsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvents(t, r, 1) // hello: subscribed

	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				hub.Record("search", fmt.Sprint("k", w), keyrate.Decision{Allowed: i%2 == 0, Limit: 20}, time.Now())
			}
		})
	}
	wg.Wait()
	var evs []sse
	for len(evs) < writers*each {
		for _, e := range readEvents(t, r, 1) {
			if e.event == "decision" {
				evs = append(evs, e)
			}
		}
	}
	for i, e := range evs {
		if ev := decoded(t, e); ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	if hub.Dropped() != 0 {
		t.Errorf("Dropped = %d, want 0", hub.Dropped())
	}
}

// openFrom is open for a request from the client address remote.
func openFrom(h *Hub, remote string) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{header: http.Header{}, writes: make(chan []byte), done: make(chan struct{}), cancel: cancel}
	req := httptest.NewRequest(http.MethodGet, EventsPath, nil).WithContext(ctx)
	req.RemoteAddr = remote
	go func() {
		defer close(s.done)
		h.Handler().ServeHTTP(s, req)
	}()
	return s
}

// refused reports whether the handler of s answered 503 with Retry-After
// and returned; a stream it serves instead is ended.
func refused(s *stream) bool {
	s.drain()
	select {
	case <-s.done:
		return s.code == http.StatusServiceUnavailable && s.header.Get("Retry-After") != ""
	default:
		s.cancel()
		<-s.done
		return false
	}
}

// One client may hold MaxSubscribersPerClient streams (4 by default): its
// next one gets 503 while another client still gets a stream, an IPv6
// client is its /64, and a stream that ends frees its client's slot.
func TestMaxSubscribersPerClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{})
		var open []*stream
		hello := func(s *stream) bool { return types(parseSSE(t, s.drain())) == "hello" }
		for i := range 4 {
			s := openFrom(h, "192.0.2.1:"+strconv.Itoa(1000+i))
			if !hello(s) {
				t.Fatalf("stream %d of one client refused", i+1)
			}
			open = append(open, s)
		}
		if busy := openFrom(h, "192.0.2.1:2000"); !refused(busy) {
			t.Errorf("the 5th stream of one client: status %d, headers %v; want 503 with Retry-After", busy.code, busy.header)
		}
		other := openFrom(h, "198.51.100.7:1000")
		if !hello(other) {
			t.Error("another client was refused while the first held 4 streams")
		}
		for i := range 4 {
			s := openFrom(h, fmt.Sprintf("[2001:db8:1:2::%x]:1000", i+1))
			if !hello(s) {
				t.Fatalf("IPv6 stream %d refused", i+1)
			}
			open = append(open, s)
		}
		if same64 := openFrom(h, "[2001:db8:1:2:ffff::1]:1000"); !refused(same64) {
			t.Error("a 5th stream from the same IPv6 /64 was served")
		}
		open[0].cancel()
		<-open[0].done
		again := openFrom(h, "192.0.2.1:3000")
		if !hello(again) {
			t.Error("after one of its streams ended, the client was still refused")
		}
		for _, s := range append(open[1:], other, again) {
			s.cancel()
			<-s.done
		}
		if n := h.Subscribers(); n != 0 {
			t.Errorf("%d subscribers after every stream ended", n)
		}
	})
}

// ClientOf names the client, as behind a proxy that says who it is.
func TestClientOf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{MaxSubscribersPerClient: 1, ClientOf: func(r *http.Request) string { return r.Header.Get("X-Client") }})
		from := func(client string) *stream {
			ctx, cancel := context.WithCancel(context.Background())
			s := &stream{header: http.Header{}, writes: make(chan []byte), done: make(chan struct{}), cancel: cancel}
			req := httptest.NewRequest(http.MethodGet, EventsPath, nil).WithContext(ctx)
			req.Header.Set("X-Client", client)
			go func() {
				defer close(s.done)
				h.Handler().ServeHTTP(s, req)
			}()
			return s
		}
		a, b := from("a"), from("b") // one socket address, two clients
		for _, s := range []*stream{a, b} {
			if got := types(parseSSE(t, s.drain())); got != "hello" {
				t.Fatalf("first stream of a client: %s", got)
			}
		}
		if a2 := from("a"); !refused(a2) {
			t.Error("client a's second stream was served, over its cap of 1")
		}
		a.cancel()
		b.cancel()
		<-a.done
		<-b.done
	})
}

// A refund is streamed as an event of its own, after its decision, with
// the receipt the decision carried and the key's budget after it; a page
// opened later gets both from the history. A refusal carries no receipt.
func TestRefundFollowsItsDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{})
		s := open(h, "")
		at := time.Now()
		status := keyrate.Policy{Limit: 3, Window: time.Minute}
		admitted := backend.Combine(keyrate.PolicyDecision{Policy: status, Allowed: true, Remaining: 2})
		admitted.Receipt = backend.NewReceipt(at, 1, 7)
		h.Record("status", "k", admitted, at)
		h.RecordRefund("status", "k", admitted.Receipt, backend.Combine(keyrate.PolicyDecision{Policy: status, Allowed: true, Remaining: 3}), at.Add(time.Millisecond))
		h.Record("status", "k", backend.Combine(keyrate.PolicyDecision{Policy: status, RetryAfter: time.Second}), at.Add(2*time.Millisecond))

		evs := parseSSE(t, s.drain())
		if got := types(evs); got != "hello d1 refund d3" {
			t.Fatalf("stream %s, want hello d1 refund d3", got)
		}
		var refund event
		if err := json.Unmarshal([]byte(evs[2].data), &refund); err != nil {
			t.Fatal(err)
		}
		decision, refused := decoded(t, evs[1]), decoded(t, evs[3])
		if decision.Receipt == "" || refund.Receipt != decision.Receipt || evs[2].id != "2" {
			t.Errorf("decision's receipt %q, refund's %q (id %s): want the same, and the refund's own id", decision.Receipt, refund.Receipt, evs[2].id)
		}
		if refund.Route != "status" || refund.Key != "k" || refund.Remaining != 3 || refund.Limit != 3 {
			t.Errorf("refund %+v, want status's key k with 3 of 3 remaining", refund)
		}
		if refused.Receipt != "" {
			t.Errorf("a refusal carries receipt %q, want none", refused.Receipt)
		}
		s.cancel()
		<-s.done

		later := open(h, "")
		if got := types(parseSSE(t, later.drain())); got != "hello d1 refund d3" {
			t.Errorf("a page opened later gets %s, want hello d1 refund d3", got)
		}
		later.cancel()
		<-later.done
	})
}

// The configuration tells the page what a route's form sends, what to say
// of it, and that it gives requests back.
func TestConfigDescribesFormsAndRefunds(t *testing.T) {
	login := Route{Name: "login", Method: http.MethodPost, Path: "/api/login", Policies: []keyrate.Policy{{Limit: 5, Window: 15 * time.Minute}},
		Refunds: true, Form: map[string]string{"password": "guess"}, Note: "Only failures count."}
	resp := get(t, newHub(t, Config{Routes: []Route{login}}).Handler(), http.MethodGet, ConfigPath)
	var got configJSON
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := routeJSON{Name: "login", Method: "POST", Path: "/api/login", Policies: []policyJSON{{Limit: 5, WindowMs: 900_000}},
		Refunds: true, Form: map[string]string{"password": "guess"}, Note: "Only failures count."}
	if len(got.Routes) != 1 || !reflect.DeepEqual(got.Routes[0], want) {
		t.Errorf("routes %+v, want %+v", got.Routes, want)
	}
}

// 8 clients holding 4 streams each fill the 32 places, yet a 9th client
// gets a stream: in the place of the oldest of a client holding the most,
// which ends. No stream outlives MaxStreamAge either, so no client holds
// a place for good.
func TestStreamsCannotBeHeldForGood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{KeepAlive: time.Hour}) // no tick to read while time passes
		hello := func(s *stream) bool { return types(parseSSE(t, s.drain())) == "hello" }
		var open []*stream
		for c := range 8 {
			for i := range 4 {
				s := openFrom(h, fmt.Sprintf("192.0.2.%d:%d", c+1, 1000+i))
				if !hello(s) {
					t.Fatalf("stream %d of client %d refused", i+1, c+1)
				}
				open = append(open, s)
			}
		}
		newcomer := openFrom(h, "198.51.100.1:1000")
		if !hello(newcomer) {
			t.Fatal("a 9th client was refused while 8 held every place")
		}
		ended := 0
		for _, s := range open {
			select {
			case <-s.done:
				ended++
			default:
			}
		}
		if ended != 1 || h.Subscribers() != 32 {
			t.Errorf("%d streams ended, %d open; want 1 ended in the newcomer's place, 32 open", ended, h.Subscribers())
		}
		// Holding 1 against others' 4, the newcomer gets another place.
		if !hello(openFrom(h, "198.51.100.1:1001")) {
			t.Error("the newcomer's second stream, holding 1 against others' 4, was refused")
		}
		time.Sleep(10*time.Minute + time.Second)
		synctest.Wait()
		if n := h.Subscribers(); n != 0 {
			t.Errorf("%d streams open after MaxStreamAge", n)
		}
	})
}
