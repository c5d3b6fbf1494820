package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

// field returns every line of a list field joined as one list, with the
// optional space after each comma dropped, so that lists split over lines
// or written with and without spaces compare alike.
func field(h http.Header, name string) string {
	return strings.ReplaceAll(strings.Join(h.Values(name), ","), ", ", ",")
}

// Limit 5 per 60s, one request every 10s: t counts down to when the oldest
// request leaves the window, not to when the window is empty, and on the
// refusal it equals Retry-After.
func TestTIsWhenQuotaComesBack(t *testing.T) {
	l, clock := newLimiter(t, 5, time.Minute)
	h := newHandler(t, l)
	want := []struct {
		code        int
		rateLimit   string
		retryAfter  string
		description string
	}{
		{200, `"default";r=4;t=60`, "", "its own request leaves at 60s"},
		{200, `"default";r=3;t=50`, "", "the one at 0s leaves at 60s"},
		{200, `"default";r=2;t=40`, "", ""},
		{200, `"default";r=1;t=30`, "", ""},
		{200, `"default";r=0;t=20`, "", "the fifth"},
		{429, `"default";r=0;t=10`, "10", "refused until the one at 0s leaves"},
		{200, `"default";r=0;t=10`, "", "at 60s the one at 0s has left; the one at 10s is next"},
	}
	for i, w := range want {
		if i > 0 {
			clock.Advance(10 * time.Second)
		}
		rec := get(h, "/")
		if rec.Code != w.code || rec.Header().Get("RateLimit") != w.rateLimit || rec.Header().Get("Retry-After") != w.retryAfter {
			t.Fatalf("request %d at %ds (%s): %d RateLimit %q Retry-After %q; want %d %q %q", i+1, 10*i, w.description,
				rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"), w.code, w.rateLimit, w.retryAfter)
		}
	}
}

// On every 429, whatever the instant and the weight, Retry-After equals t.
func TestRetryAfterEqualsTOnEveryRefusal(t *testing.T) {
	l, clock := newLimiter(t, 4, 10*time.Second)
	h := newHandler(t, l, httplimit.WithWeight(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		return n
	}))
	refusals := 0
	for i := range 200 {
		clock.Advance(time.Duration(i%7) * 370 * time.Millisecond)
		rec := get(h, "/?n="+strconv.Itoa(1+i%3))
		if rec.Code != 429 {
			continue
		}
		refusals++
		retry := rec.Header().Get("Retry-After")
		_, tParam, _ := strings.Cut(rec.Header().Get("RateLimit"), ";t=")
		if retry == "" || retry == "0" || retry != tParam {
			t.Fatalf("request %d: Retry-After %q, RateLimit %q; want t equal to a positive Retry-After", i, retry, rec.Header().Get("RateLimit"))
		}
	}
	if refusals < 50 {
		t.Fatalf("only %d refusals: the trace does not test refusals", refusals)
	}
}

// A per-route budget inside a global one: both policies are listed in both
// fields, each middleware adding its member, and a field another handler
// set first keeps its members.
func TestNestedMiddlewaresListBothPolicies(t *testing.T) {
	global, _ := newLimiter(t, 10, time.Minute)
	search, _ := newLimiter(t, 3, time.Minute)
	all := httplimit.DraftHeaders | httplimit.LegacyHeaders | httplimit.XHeaders
	outer, err := httplimit.New(global, httplimit.WithRoute("global"), httplimit.WithHeaders(all))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := httplimit.New(search, httplimit.WithRoute("search"), httplimit.WithHeaders(all))
	if err != nil {
		t.Fatal(err)
	}
	upstream := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("RateLimit-Policy", `"tenant";q=1000;w=3600`)
			w.Header().Add("RateLimit", `"tenant";r=999;t=3600`)
			next.ServeHTTP(w, r)
		})
	}
	h := upstream(outer.Handler(inner.Handler(okHandler)))
	for i := range 4 {
		rec := get(h, "/api/search")
		wantPolicy := `"tenant";q=1000;w=3600,"global";q=10;w=60,"search";q=3;w=60`
		wantLimit := `"tenant";r=999;t=3600,"global";r=` + strconv.Itoa(9-i) + `;t=60,"search";r=` + strconv.Itoa(max(2-i, 0)) + ";t=60"
		wantCode, wantRemaining := 200, strconv.Itoa(max(2-i, 0))
		if i == 3 {
			// The outer budget admitted and recorded it; the inner one refused.
			wantCode = 429
		}
		if rec.Code != wantCode || field(rec.Header(), "RateLimit-Policy") != wantPolicy || field(rec.Header(), "RateLimit") != wantLimit {
			t.Fatalf("request %d: %d\nRateLimit-Policy: %s\nRateLimit: %s\nwant %d\n%s\n%s", i+1, rec.Code,
				field(rec.Header(), "RateLimit-Policy"), field(rec.Header(), "RateLimit"), wantCode, wantPolicy, wantLimit)
		}
		// The single-policy fields describe the one with the least remaining.
		for _, k := range []string{"RateLimit-Remaining", "X-RateLimit-Remaining"} {
			if v := rec.Header().Values(k); len(v) != 1 || v[0] != wantRemaining {
				t.Fatalf("request %d: %s = %q, want the search budget's %s alone", i+1, k, v, wantRemaining)
			}
		}
		if rec.Header().Get("RateLimit-Limit") != "3" {
			t.Fatalf("request %d: RateLimit-Limit = %q, want the search budget's 3", i+1, rec.Header().Get("RateLimit-Limit"))
		}
		if i == 3 && (rec.Header().Get("Retry-After") != "60" || len(rec.Header().Values("Retry-After")) != 1) {
			t.Fatalf("refusal: Retry-After %q, want 60 once", rec.Header().Values("Retry-After"))
		}
	}
}

// w is whole seconds: a window that is not one is enforced, but its w is
// left out rather than rounded into a policy the limiter does not enforce.
func TestWindowThatIsNotWholeSecondsHasNoW(t *testing.T) {
	cases := []struct {
		window time.Duration
		policy string
	}{
		{500 * time.Millisecond, `"default";q=10`},
		{1500 * time.Millisecond, `"default";q=10`},
		{time.Second, `"default";q=10;w=1`},
		{90 * time.Second, `"default";q=10;w=90`},
		{24 * time.Hour, `"default";q=10;w=86400`},
	}
	for _, c := range cases {
		l, clock := newLimiter(t, 10, c.window)
		h := newHandler(t, l)
		for range 10 {
			get(h, "/")
		}
		rec := get(h, "/")
		if got := rec.Header().Get("RateLimit-Policy"); rec.Code != 429 || got != c.policy {
			t.Errorf("window %v: %d %q, want 429 and %q", c.window, rec.Code, got, c.policy)
		}
		clock.Advance(c.window)
		if rec := get(h, "/"); rec.Code != 200 {
			t.Errorf("window %v: %d one window later, want 200", c.window, rec.Code)
		}
	}
}

// WithQuotaUnit says what q and r count; without it no unit is claimed.
func TestQuotaUnit(t *testing.T) {
	l, _ := newLimiter(t, 1000, time.Minute)
	bytes := func(r *http.Request) int { return int(r.ContentLength) }
	h := newHandler(t, l, httplimit.WithRoute("upload"), httplimit.WithWeight(bytes), httplimit.WithQuotaUnit("content-bytes"))
	r := httptest.NewRequest("PUT", "/", strings.NewReader(strings.Repeat("x", 300)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if p, rl := rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"); p != `"upload";q=1000;qu="content-bytes";w=60` || rl != `"upload";r=700;t=60` {
		t.Fatalf("RateLimit-Policy %q, RateLimit %q", p, rl)
	}
	if _, err := httplimit.New(l, httplimit.WithQuotaUnit("bytes\n")); !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("a unit with a newline: %v, want ErrConfig", err)
	}
}

// decided is a backend that answers every request with d, and reports
// limit and window as its one policy: a stand-in for the numbers behind one of
// the draft's examples.
type decided struct {
	limit  int
	window time.Duration
	d      keyrate.Decision
}

func (b decided) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	d := b.d
	d.Limit = b.limit
	return d, nil
}
func (b decided) Policies() []keyrate.Policy {
	return []keyrate.Policy{{Limit: b.limit, Window: b.window}}
}

func (decided) Tiered() bool                { return false }
func (b decided) TimeBudget() time.Duration { return 0 }

// The examples of draft-ietf-httpapi-ratelimit-headers (-10 and -11 alike)
// that this middleware can be in, as test vectors: the field values the
// draft shows, against what the middleware writes for the same policies
// and numbers. Examples that lower limits dynamically, or carry a partition
// key, describe what it never does.
func TestDraftExamples(t *testing.T) {
	mw := func(t *testing.T, b keyrate.Backend, opts ...httplimit.Option) func(http.Handler) http.Handler {
		m, err := httplimit.New(b, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m.Handler
	}
	route := httplimit.WithRoute
	cases := []struct {
		section string
		run     func(t *testing.T) *httptest.ResponseRecorder // the example's response
		code    int
		fields  map[string]string
	}{
		{"3: two policies", func(t *testing.T) *httptest.ResponseRecorder {
			burst := decided{100, time.Minute, keyrate.Decision{Allowed: true, Remaining: 99, RefillAfter: time.Minute}}
			daily := decided{1000, 24 * time.Hour, keyrate.Decision{Allowed: true, Remaining: 999, RefillAfter: 24 * time.Hour}}
			return get(mw(t, burst, route("burst"))(mw(t, daily, route("daily"))(okHandler)), "/")
		}, 200, map[string]string{"RateLimit-Policy": `"burst";q=100;w=60,"daily";q=1000;w=86400`}},
		{"3.2: one policy", func(t *testing.T) *httptest.ResponseRecorder {
			l, _ := newLimiter(t, 100, 10*time.Second)
			return get(mw(t, l)(okHandler), "/")
		}, 200, map[string]string{"RateLimit-Policy": `"default";q=100;w=10`}},
		{"3.2: multiple policies", func(t *testing.T) *httptest.ResponseRecorder {
			permin, _ := newLimiter(t, 50, time.Minute)
			perhr, _ := newLimiter(t, 1000, time.Hour)
			return get(mw(t, permin, route("permin"))(mw(t, perhr, route("perhr"))(okHandler)), "/")
		}, 200, map[string]string{"RateLimit-Policy": `"permin";q=50;w=60,"perhr";q=1000;w=3600`}},
		{"4, 4.2: 50 left, more in 30s", func(t *testing.T) *httptest.ResponseRecorder {
			b := decided{100, time.Minute, keyrate.Decision{Allowed: true, Remaining: 50, RefillAfter: 29*time.Second + time.Millisecond, ResetAfter: time.Minute}}
			return get(mw(t, b)(okHandler), "/")
		}, 200, map[string]string{"RateLimit": `"default";r=50;t=30`}},
		{"6: none left, more in 10s", func(t *testing.T) *httptest.ResponseRecorder {
			b := decided{5, time.Minute, keyrate.Decision{Allowed: true, Remaining: 0, RefillAfter: 10 * time.Second, ResetAfter: time.Minute}}
			return get(mw(t, b, route("problemPolicy"))(okHandler), "/")
		}, 200, map[string]string{"RateLimit": `"problemPolicy";r=0;t=10`}},
		{"7: one left, more in 7s", func(t *testing.T) *httptest.ResponseRecorder {
			b := decided{10, 10 * time.Second, keyrate.Decision{Allowed: true, Remaining: 1, RefillAfter: 7 * time.Second, ResetAfter: 9 * time.Second}}
			return get(mw(t, b)(okHandler), "/")
		}, 200, map[string]string{"RateLimit": `"default";r=1;t=7`}},
		{"8.5: daily", func(t *testing.T) *httptest.ResponseRecorder {
			b := decided{1000, 24 * time.Hour, keyrate.Decision{Allowed: true, Remaining: 1, RefillAfter: 36400 * time.Second, ResetAfter: 86400 * time.Second}}
			return get(mw(t, b, route("daily"))(okHandler), "/")
		}, 200, map[string]string{"RateLimit": `"daily";r=1;t=36400`}},
		{"B.1.1: quota spent for the next 50s", func(t *testing.T) *httptest.ResponseRecorder {
			// 3 per 60s: requests at 0s, 10s and 10s; the one at 0s leaves at 60s.
			l, clock := newLimiter(t, 3, time.Minute)
			h := mw(t, l)(okHandler)
			get(h, "/")
			clock.Advance(10 * time.Second)
			get(h, "/")
			return get(h, "/")
		}, 200, map[string]string{"RateLimit": `"default";r=0;t=50`}},
		{"B.1.3: 40 units in the first 2s of 100 per minute", func(t *testing.T) *httptest.ResponseRecorder {
			l, clock := newLimiter(t, 100, time.Minute)
			h := mw(t, l, route("basic"))(okHandler)
			get(h, "/")
			clock.Advance(2 * time.Second)
			for range 38 {
				get(h, "/")
			}
			return get(h, "/")
		}, 200, map[string]string{"RateLimit-Policy": `"basic";q=100;w=60`, "RateLimit": `"basic";r=60;t=58`}},
		{"B.1.4: throttled, retry in 5s", func(t *testing.T) *httptest.ResponseRecorder {
			l, clock := newLimiter(t, 2, 10*time.Second)
			h := mw(t, l)(okHandler)
			get(h, "/")
			get(h, "/")
			clock.Advance(5 * time.Second)
			return get(h, "/")
		}, 429, map[string]string{"RateLimit": `"default";r=0;t=5`, "Retry-After": "5", "Content-Type": "application/problem+json"}},
		{"B.2.1: 99 left for the next 50s", func(t *testing.T) *httptest.ResponseRecorder {
			// One request at 0s; at 10s a request of weight 0 reads the numbers.
			l, clock := newLimiter(t, 100, time.Minute)
			h := mw(t, l, route("fixedwindow"), httplimit.WithWeight(func(r *http.Request) int {
				n, _ := strconv.Atoi(r.URL.Query().Get("n"))
				return n
			}))(okHandler)
			get(h, "/?n=1")
			clock.Advance(10 * time.Second)
			return get(h, "/?n=0")
		}, 200, map[string]string{"RateLimit": `"fixedwindow";r=99;t=50`, "RateLimit-Policy": `"fixedwindow";q=100;w=60`}},
		{"B.3.2: hourly and daily", func(t *testing.T) *httptest.ResponseRecorder {
			hour := decided{1000, time.Hour, keyrate.Decision{Allowed: true, Remaining: 1000 - 100, RefillAfter: 3000 * time.Second, ResetAfter: time.Hour}}
			day := decided{5000, 24 * time.Hour, keyrate.Decision{Allowed: true, Remaining: 100, RefillAfter: 36000 * time.Second, ResetAfter: 24 * time.Hour}}
			rec := get(mw(t, hour, route("hour"))(mw(t, day, route("day"))(okHandler)), "/")
			// The draft shows the day's member alone; both are sent, and the
			// day's is the example's.
			rl := rec.Header().Values("RateLimit")
			if len(rl) != 2 || rl[1] != `"day";r=100;t=36000` {
				t.Errorf("RateLimit %q, want the hour's member and then the example's", rl)
			}
			return rec
		}, 200, map[string]string{"RateLimit-Policy": `"hour";q=1000;w=3600, "day";q=5000;w=86400`}},
	}
	for _, c := range cases {
		t.Run(c.section, func(t *testing.T) {
			rec := c.run(t)
			if rec.Code != c.code {
				t.Fatalf("status %d, want %d", rec.Code, c.code)
			}
			for k, want := range c.fields {
				if got, want := field(rec.Header(), k), strings.ReplaceAll(want, ", ", ","); got != want {
					t.Errorf("%s: %s, want the draft's %s", k, got, want)
				}
			}
		})
	}
}

// The draft's quota-exceeded problem (section 5.1, appendix B.1.4) names the
// violated policy as the fields do.
func TestRefusalIsQuotaExceededProblem(t *testing.T) {
	for _, c := range []struct{ route, name string }{{"", "default"}, {"search", "search"}, {`a"b`, `a"b`}} {
		l, _ := newLimiter(t, 1, time.Minute)
		h := newHandler(t, l, httplimit.WithRoute(c.route))
		get(h, "/")
		rec := get(h, "/")
		p := decodeProblem(t, rec)
		if rec.Code != 429 || p.Type != quotaExceeded || p.Title != "Quota Exceeded" || len(p.Violated) != 1 || p.Violated[0] != c.name {
			t.Errorf("route %q: %d %+v, want 429 quota-exceeded naming %q", c.route, rec.Code, p, c.name)
		}
	}
}
