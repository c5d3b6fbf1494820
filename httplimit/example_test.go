package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// Two requests a minute per client on one route. The second, 10 seconds
// after the first, leaves none: t=50 says when the first leaves the window
// and gives one back. The third, 25 seconds in, is refused; t and
// Retry-After both say when it fits.
func Example() {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	mw, _ := httplimit.New(l, httplimit.WithRoute("hello"))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for _, wait := range []time.Duration{0, 10 * time.Second, 15 * time.Second} {
		clock.Advance(wait)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/hello", nil))
		fmt.Printf("%d RateLimit-Policy: %s RateLimit: %s Retry-After: %q\n", rec.Code,
			rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Policy: "hello";q=2;w=60 RateLimit: "hello";r=1;t=60 Retry-After: ""
	// 200 RateLimit-Policy: "hello";q=2;w=60 RateLimit: "hello";r=0;t=50 Retry-After: ""
	// 429 RateLimit-Policy: "hello";q=2;w=60 RateLimit: "hello";r=0;t=35 Retry-After: "35"
}

// Shadow mode tries a limit out: the refusal it would make is reported,
// with the fields it would send, and the request is served all the same.
func ExampleWithShadow() {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(1, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	mw, _ := httplimit.New(l, httplimit.WithRoute("export"), httplimit.WithShadow(),
		httplimit.WithOnLimited(func(e middleware.Event) {
			fmt.Printf("would refuse %s for %v (shadow %v)\n", e.Identity, e.Decision.RetryAfter, e.Shadow)
		}))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/export", nil))
		fmt.Printf("%d RateLimit: %s\n", rec.Code, rec.Header().Get("RateLimit"))
		clock.Advance(20 * time.Second)
	}
	// Output:
	// 200 RateLimit: "export";r=0;t=60
	// would refuse 192.0.2.1 for 40s (shadow true)
	// 200 RateLimit: "export";r=0;t=40
}

// Two policies on one route, 2 a second and 3 a minute: every response
// lists both. The third request within a second is refused by the short
// one and names it; a second later the long one still has room for one
// more, then refuses with its own wait.
func Example_policies() {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.NewPolicies([]keyrate.Policy{
		{Name: "second", Limit: 2, Window: time.Second},
		{Name: "minute", Limit: 3, Window: time.Minute},
	}, keyrate.WithClock(clock))
	defer l.Close()
	mw, _ := httplimit.New(l, httplimit.WithRoute("search"))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, wait := range []time.Duration{0, 0, 0, time.Second, 0} {
		clock.Advance(wait)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/search", nil))
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/search", nil))
	fmt.Println("RateLimit-Policy:", rec.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 RateLimit: "second";r=1;t=1, "minute";r=2;t=60 Retry-After: ""
	// 200 RateLimit: "second";r=0;t=1, "minute";r=1;t=60 Retry-After: ""
	// 429 RateLimit: "second";r=0;t=1, "minute";r=1;t=60 Retry-After: "1"
	// 200 RateLimit: "second";r=1;t=1, "minute";r=0;t=59 Retry-After: ""
	// 429 RateLimit: "second";r=1;t=1, "minute";r=0;t=59 Retry-After: "59"
	// RateLimit-Policy: "second";q=2;w=1, "minute";q=3;w=60
}

// routes limits GET /api/search to 20 requests a minute per API key, or
// per client address without one, behind one reverse proxy.
func routes(mux *http.ServeMux, searchHandler http.Handler) error {
	l, err := keyrate.New(20, time.Minute)
	if err != nil {
		return err
	}
	ip, err := httplimit.ClientIP(httplimit.IPConfig{TrustHops: 1}) // one reverse proxy in front
	if err != nil {
		return err
	}
	search, err := httplimit.New(l,
		httplimit.WithRoute("search"),                               // own budget, own policy name
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", ip)), // API key, else client IP
		httplimit.WithOnLimited(func(e middleware.Event) { log.Printf("limited on %s", e.Route) }),
	)
	if err != nil {
		return err
	}
	mux.Handle("GET /api/search", search.Handler(searchHandler))
	return nil
}

// The search route admits a client and says its policy.
func Example_routes() {
	mux := http.NewServeMux()
	if err := routes(mux, http.NotFoundHandler()); err != nil {
		log.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/api/search", nil)
	req.Header.Set("X-API-Key", "alice")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"))
	// Output: 404 "search";q=20;w=60
}

// A model API of 10,000 tokens a minute per client reserves what a request
// asks for (max_tokens) and settles what it used: the handler reports its
// cost, and the rest goes back to the client's budget before the response
// is sent, so that the RateLimit field says what is left.
func ExampleWithWeight() {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(10_000, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	mw, _ := httplimit.New(l, httplimit.WithRoute("generate"), httplimit.WithWeight(func(r *http.Request) int {
		n, err := strconv.Atoi(r.URL.Query().Get("max_tokens"))
		if err != nil {
			return -1 // never admitted: 413
		}
		return n
	}))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := 1200 // what the model produced, at most max_tokens
		if err := middleware.ReportWeight(r.Context(), used); err != nil {
			log.Print(err)
		}
		fmt.Fprintln(w, "...")
	}))

	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/generate?max_tokens=4096", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "generate";r=8800;t=60
	// 200 "generate";r=7600;t=60
}
