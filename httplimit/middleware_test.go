package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})

// newLimiter returns a limiter on a manual clock, closed with the test.
func newLimiter(t *testing.T, limit int, window time.Duration, opts ...keyrate.Option) (*keyrate.Limiter, *keyrate.ManualClock) {
	t.Helper()
	clock := keyrate.NewManualClock(t0)
	l, err := keyrate.New(limit, window, append(opts, keyrate.WithClock(clock))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clock
}

func newHandler(t *testing.T, b keyrate.Backend, opts ...httplimit.Option) http.Handler {
	t.Helper()
	m, err := httplimit.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Handler(okHandler)
}

func get(h http.Handler, path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

const (
	quotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	reducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

func decodeProblem(t *testing.T, rec *httptest.ResponseRecorder) problem {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	blank := p.Type == "about:blank" && p.Title == http.StatusText(rec.Code) && p.Violated == nil
	exceeded := p.Type == quotaExceeded && p.Title == "Quota Exceeded" && rec.Code == 429 && len(p.Violated) > 0
	reduced := p.Type == reducedCapacity && p.Title == "Temporary Reduced Capacity" && rec.Code == 503 && p.Violated == nil
	if !blank && !exceeded && !reduced || p.Status != rec.Code || p.Detail == "" {
		t.Fatalf("problem body %+v does not describe status %d", p, rec.Code)
	}
	return p
}

// Three 200s, then 429s, with every field of every header set, at fixed
// instants of a manual clock.
func TestHeadersThroughRefusal(t *testing.T) {
	l, clock := newLimiter(t, 3, time.Minute)
	h := newHandler(t, l, httplimit.WithRoute("status"),
		httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.LegacyHeaders|httplimit.XHeaders))

	steps := []struct {
		advance time.Duration
		code    int
		r, t    string
		retry   string
	}{
		// t: when the oldest event in the window leaves it.
		{0, 200, "2", "60", ""},
		{10 * time.Second, 200, "1", "50", ""},
		{10 * time.Second, 200, "0", "40", ""},
		{10*time.Second + 300*time.Millisecond, 429, "0", "30", "30"}, // first event leaves at 60s: 29.7s, rounded up
		{29*time.Second + 700*time.Millisecond, 200, "0", "10", ""},   // at 60s the first event has left; the one at 10s is next
		{0, 429, "0", "10", "10"},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		before := time.Now().Unix()
		rec := get(h, "/api/status")
		after := time.Now().Unix()
		hd := rec.Header()
		if rec.Code != s.code {
			t.Fatalf("step %d: status %d, want %d", i, rec.Code, s.code)
		}
		want := map[string]string{
			"RateLimit-Policy":      `"status";q=3;w=60`,
			"RateLimit":             `"status";r=` + s.r + ";t=" + s.t,
			"RateLimit-Limit":       "3",
			"RateLimit-Remaining":   s.r,
			"RateLimit-Reset":       s.t,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": s.r,
			"Retry-After":           s.retry,
		}
		for k, v := range want {
			if got := hd.Get(k); got != v {
				t.Errorf("step %d: %s = %q, want %q", i, k, got, v)
			}
			if n := len(hd.Values(k)); v != "" && n != 1 {
				t.Errorf("step %d: %s sent %d times", i, k, n)
			}
		}
		sec, _ := strconv.ParseInt(s.t, 10, 64)
		if x, _ := strconv.ParseInt(hd.Get("X-RateLimit-Reset"), 10, 64); x < before+sec || x > after+sec {
			t.Errorf("step %d: X-RateLimit-Reset = %d, want Unix time %d..%d", i, x, before+sec, after+sec)
		}
		if s.code == 429 {
			p := decodeProblem(t, rec)
			if !strings.Contains(p.Detail, s.retry+" seconds") {
				t.Errorf("step %d: detail %q does not give the wait", i, p.Detail)
			}
			if p.Type != quotaExceeded || len(p.Violated) != 1 || p.Violated[0] != "status" {
				t.Errorf("step %d: problem %+v, want quota-exceeded naming the policy", i, p)
			}
		} else if rec.Body.String() != "ok" {
			t.Errorf("step %d: body %q, want the handler's", i, rec.Body)
		}
	}
}

// The first refusal after a burst: Retry-After equals RateLimit's t, also
// with the system clock, where the wait is a hair under the window.
func TestFirstRefusalRetryAfterEqualsT(t *testing.T) {
	l, err := keyrate.New(3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := newHandler(t, l)
	for i := range 3 {
		if rec := get(h, "/"); rec.Code != 200 {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	rec := get(h, "/")
	if rec.Code != 429 {
		t.Fatalf("fourth request: %d, want 429", rec.Code)
	}
	retry := rec.Header().Get("Retry-After")
	if want := `"default";r=0;t=` + retry; rec.Header().Get("RateLimit") != want || retry != "60" {
		t.Fatalf("RateLimit %q, Retry-After %q; want %q and 60", rec.Header().Get("RateLimit"), retry, want)
	}
}

func TestDefaultHeadersOnly(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Second)
	h := newHandler(t, l)
	for _, rec := range []*httptest.ResponseRecorder{get(h, "/"), get(h, "/")} {
		for k := range rec.Header() {
			switch k {
			case "Ratelimit-Policy", "Ratelimit", "Retry-After", "Content-Type", "Content-Length", "X-Content-Type-Options":
			default:
				t.Errorf("unexpected field %s", k)
			}
		}
		if rec.Header().Get("RateLimit-Policy") != `"default";q=1;w=1` {
			t.Errorf("RateLimit-Policy = %q", rec.Header().Get("RateLimit-Policy"))
		}
	}
}

// Two routes on one shared limiter keep separate budgets through their
// key prefixes.
func TestRoutesKeepSeparateBudgets(t *testing.T) {
	l, _ := newLimiter(t, 3, time.Minute)
	status := newHandler(t, l, httplimit.WithRoute("status"))
	search := newHandler(t, l, httplimit.WithRoute("search"))
	for range 3 {
		get(status, "/api/status")
	}
	if rec := get(status, "/api/status"); rec.Code != 429 {
		t.Fatalf("status: %d, want 429", rec.Code)
	}
	rec := get(search, "/api/search")
	if rec.Code != 200 || rec.Header().Get("RateLimit") != `"search";r=2;t=60` {
		t.Fatalf("search after status is spent: %d %q, want 200 with its own budget", rec.Code, rec.Header().Get("RateLimit"))
	}
}

func TestAPIKeysKeepSeparateBudgets(t *testing.T) {
	l, _ := newLimiter(t, 3, time.Minute)
	h := newHandler(t, l, httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)))
	for range 3 {
		get(h, "/", "X-API-Key", "alice")
	}
	cases := []struct {
		hdr  []string
		code int
	}{
		{[]string{"X-API-Key", "alice"}, 429},
		{[]string{"X-API-Key", "bob"}, 200},
		{nil, 200},                                // no key: the client's address, another budget
		{[]string{"X-API-Key", "192.0.2.1"}, 200}, // a key that looks like the address is still a key
	}
	for _, c := range cases {
		if rec := get(h, "/", c.hdr...); rec.Code != c.code {
			t.Errorf("%v: %d, want %d", c.hdr, rec.Code, c.code)
		}
	}
}

// 20 concurrent requests against a limit of 3: exactly three are served.
func TestConcurrentRequestsExactCount(t *testing.T) {
	for round := range 20 {
		l, err := keyrate.New(3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		h := newHandler(t, l)
		var wg sync.WaitGroup
		codes := make(chan int, 20)
		start := make(chan struct{})
		for range 20 {
			wg.Go(func() {
				<-start
				codes <- get(h, "/").Code
			})
		}
		close(start)
		wg.Wait()
		close(codes)
		count := map[int]int{}
		for c := range codes {
			count[c]++
		}
		if count[200] != 3 || count[429] != 17 {
			t.Fatalf("round %d: %v, want exactly 3 x 200 and 17 x 429", round, count)
		}
		l.Close()
	}
}

func TestWeight(t *testing.T) {
	l, _ := newLimiter(t, 3, time.Minute)
	cost := func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		return n
	}
	h := newHandler(t, l, httplimit.WithWeight(cost))

	// Nothing held: no quota is to come back, so no t.
	if rec := get(h, "/?n=0"); rec.Code != 200 || rec.Header().Get("RateLimit") != `"default";r=3` {
		t.Fatalf("free request: %d %q", rec.Code, rec.Header().Get("RateLimit"))
	}
	if rec := get(h, "/?n=2"); rec.Code != 200 || rec.Header().Get("RateLimit") != `"default";r=1;t=60` {
		t.Fatalf("weight 2: %d %q", rec.Code, rec.Header().Get("RateLimit"))
	}
	if rec := get(h, "/?n=2"); rec.Code != 429 || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("weight 2 over budget: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	// A weight that can never fit: waiting cannot help, so 413 and no Retry-After.
	for _, n := range []string{"4", "-1"} {
		rec := get(h, "/?n="+n)
		if rec.Code != 413 || rec.Header().Get("Retry-After") != "" {
			t.Fatalf("weight %s: %d, Retry-After %q; want 413 without it", n, rec.Code, rec.Header().Get("Retry-After"))
		}
		decodeProblem(t, rec)
	}
}

func TestOverflowIs429(t *testing.T) {
	l, _ := newLimiter(t, 3, time.Minute, keyrate.WithMaxKeys(1), keyrate.WithRefuseNewKeys())
	h := newHandler(t, l, httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)))
	get(h, "/", "X-API-Key", "a")
	rec := get(h, "/", "X-API-Key", "b")
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("overflow: %d, Retry-After %q; want 429 and the window", rec.Code, rec.Header().Get("Retry-After"))
	}
	if p := decodeProblem(t, rec); !strings.Contains(p.Detail, "Too many clients") || p.Type != "about:blank" {
		t.Errorf("overflow detail %q", p.Detail)
	}
}

func TestSkip(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Minute)
	h := newHandler(t, l, httplimit.WithSkip(func(r *http.Request) bool {
		return r.URL.Path == "/healthz"
	}))
	for range 3 {
		if rec := get(h, "/healthz"); rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("skipped request: %d %v", rec.Code, rec.Header())
		}
	}
	if get(h, "/").Code != 200 || get(h, "/").Code != 429 {
		t.Fatal("skipped requests consumed budget")
	}
}

func TestHooksAndCustomHandler(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Minute)
	var decided, limited, handled []middleware.Event
	m, err := httplimit.New(l,
		httplimit.WithRoute("search"),
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)),
		httplimit.WithOnDecision(func(e middleware.Event) { decided = append(decided, e) }),
		httplimit.WithOnLimited(func(e middleware.Event) { limited = append(limited, e) }),
		httplimit.WithOnError(func(e middleware.Event) { t.Errorf("OnError: %v", e.Err) }),
		httplimit.WithLimitedHandler(func(w http.ResponseWriter, r *http.Request, e middleware.Event) {
			handled = append(handled, e)
			w.WriteHeader(http.StatusTeapot)
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	get(h, "/", "X-API-Key", "k")
	rec := get(h, "/", "X-API-Key", "k")
	if rec.Code != http.StatusTeapot || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("custom handler: %d, Retry-After %q; want 418 with the fields already set", rec.Code, rec.Header().Get("Retry-After"))
	}
	if len(decided) != 2 || len(limited) != 1 {
		t.Fatalf("%d decisions and %d refusals reported, want 2 and 1", len(decided), len(limited))
	}
	e := limited[0]
	if e.Route != "search" || e.Identity != "x-api-key=k" || e.Key != "search\x00x-api-key=k" ||
		e.Weight != 1 || e.Decision.Allowed || e.Decision.RetryAfter != time.Minute || e.Request == nil || e.Context != e.Request.Context() {
		t.Fatalf("event %+v", e)
	}
	if len(handled) != 1 || handled[0].Key != e.Key || handled[0].Decision != e.Decision {
		t.Fatalf("the limited handler got %+v, want the refusal's event", handled)
	}
	if !decided[0].Decision.Allowed || decided[0].Key != e.Key {
		t.Fatalf("first decision %+v", decided[0])
	}
}

// A request that cannot be identified is a client error, refused whatever
// the failure mode: 400, reported to OnError as keyrate.ErrInvalidKey with
// the KeyFunc's own error inside.
func TestKeyFuncErrorIsRefused(t *testing.T) {
	errNoKey := errors.New("no API key")
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		l, _ := newLimiter(t, 1, time.Minute)
		var errs []error
		h := newHandler(t, l, httplimit.WithFailureMode(mode),
			httplimit.WithKeyFunc(func(r *http.Request) (string, error) { return "", errNoKey }),
			httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) }))
		rec := get(h, "/")
		if rec.Code != 400 || len(errs) != 1 || !errors.Is(errs[0], keyrate.ErrInvalidKey) || !errors.Is(errs[0], errNoKey) {
			t.Fatalf("mode %d: %d, reported %v; want 400 and one error matching ErrInvalidKey and the KeyFunc's", mode, rec.Code, errs)
		}
		decodeProblem(t, rec)
		if rec.Header().Get("RateLimit") != "" || rec.Header().Get("Retry-After") != "" {
			t.Errorf("mode %d: fields sent without a decision: %v", mode, rec.Header())
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Minute)
	noWindow := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{Allowed: true}, nil
	})
	cases := map[string]struct {
		b    keyrate.Backend
		opts []httplimit.Option
	}{
		"nil backend":          {nil, nil},
		"zero budget":          {l, []httplimit.Option{httplimit.WithTimeBudget(0)}},
		"unknown failure mode": {l, []httplimit.Option{httplimit.WithFailureMode(7)}},
		"route with newline":   {l, []httplimit.Option{httplimit.WithRoute("a\nb")}},
		"route over 256 bytes": {l, []httplimit.Option{httplimit.WithRoute(strings.Repeat("r", 257))}},
	}
	for name, c := range cases {
		if _, err := httplimit.New(c.b, c.opts...); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("%s: err = %v, want keyrate.ErrConfig", name, err)
		}
	}
	if _, err := httplimit.New(noWindow); err != nil {
		t.Errorf("a BackendFunc whose decisions carry no window: %v", err)
	}
}

// A backend that lists no policies: the policy's quota comes from each
// Decision, and t from ResetAfter when the backend leaves RefillAfter 0.
// 1.5s is no whole number of seconds, so w is left out.
func TestPolicyFromDecision(t *testing.T) {
	b := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 1500 * time.Millisecond}, nil
	})
	h := newHandler(t, b, httplimit.WithRoute(`a"b`))
	rec := get(h, "/")
	if p, r := rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"); p != `"a\"b";q=5` || r != `"a\"b";r=4;t=2` {
		t.Fatalf("RateLimit-Policy %q, RateLimit %q", p, r)
	}
}
