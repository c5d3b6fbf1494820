package readme_test

// The root README's code: the functions it shows, verbatim, and Examples that
// run them. They live in the development module because one of them (a
// Redis limiter behind httplimit) needs modules the core does not require.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

var errTooManyRequests = errors.New("too many requests")

// serve answers one request from clientID, if its budget allows.
func serve(limiter *keyrate.Limiter, clientID string) error {
	if !limiter.Allow(clientID) {
		return errTooManyRequests
	}
	return nil // ... the work itself
}

// serve refuses the third request of a two-a-minute budget.
func Example_serve() {
	limiter, err := keyrate.New(2, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	for range 3 {
		fmt.Println(serve(limiter, "alice"))
	}
	// Output:
	// <nil>
	// <nil>
	// too many requests
}

// newAPILimiter holds every client to 10 a second and 1,000 a day, and
// clients whose key starts with "pro-" to 100 a second and 100,000 a day.
func newAPILimiter() (*keyrate.Limiter, error) {
	free := []keyrate.Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "day", Limit: 1000, Window: 24 * time.Hour},
	}
	pro := []keyrate.Policy{
		{Name: "second", Limit: 100, Window: time.Second},
		{Name: "day", Limit: 100_000, Window: 24 * time.Hour},
	}
	tier := func(key string) string {
		if strings.HasPrefix(key, "pro-") {
			return "pro"
		}
		return "" // the default tier: NewPolicies' own policies
	}
	return keyrate.NewPolicies(free, keyrate.WithTiers(tier, map[string][]keyrate.Policy{"pro": pro}))
}

// A new client's binding policy is its plan's per-second one.
func Example_newAPILimiter() {
	limiter, err := newAPILimiter()
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	for _, key := range []string{"free-1", "pro-1"} {
		d := limiter.Take(key, 1)
		fmt.Println(key, d.Allowed, d.Policy, d.Limit, d.Remaining)
	}
	// Output:
	// free-1 true second 10 9
	// pro-1 true second 100 99
}

// admit asks any store, in process or Redis, about a request of weight n,
// and says what its quota is when the store knows.
func admit(ctx context.Context, b keyrate.Backend, key string, n int) (bool, string, error) {
	d, err := b.TakeContext(ctx, key, n)
	quota := "unknown quota"
	if l, ok := b.(keyrate.PolicyLister); ok {
		p := l.Policies()[0]
		quota = fmt.Sprintf("%d per %v", p.Limit, p.Window)
	}
	return d.Allowed, quota, err
}

// admit asks the in-process limiter, which knows its quota.
func Example_admit() {
	limiter, err := keyrate.New(100, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	fmt.Println(admit(context.Background(), limiter, "alice", 1))
	// Output: true 100 per 1m0s <nil>
}

func routes(mux *http.ServeMux, searchHandler http.Handler) error {
	l, err := keyrate.New(20, time.Minute)
	if err != nil {
		return err
	}
	ip, err := httplimit.ClientIP(httplimit.TrustHops(1)) // one reverse proxy in front
	if err != nil {
		return err
	}
	search, err := httplimit.New(l,
		httplimit.WithRoute("search"),                               // own budget, own policy name
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", ip)), // API key, else client IP
		httplimit.WithOnLimited(func(e httplimit.Event) { log.Printf("limited on %s", e.Route) }),
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

// clientIP reads the client from X-Forwarded-For behind load balancers in
// 10.0.0.0/8: the rightmost address that is not theirs.
func clientIP() (httplimit.KeyFunc, error) {
	return httplimit.ClientIP(httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
}

// Behind the load balancers, the client is the rightmost address that is
// not theirs; the entries before it were written by the client.
func Example_clientIP() {
	key, err := clientIP()
	if err != nil {
		log.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.7:1234"
	req.Header.Set("X-Forwarded-For", "198.51.100.9, 203.0.113.5, 10.1.2.3")
	fmt.Println(key(req))
	// Output: 203.0.113.5 <nil>
}

// newLimiter keeps 100 requests per minute per key in Redis, one budget for
// every replica that uses the same server and prefix.
func newLimiter(addr string) (*redislimit.Limiter, error) {
	client := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true, // let go-redis give up at the limiter's budget too
	})
	return redislimit.New(client, 100, time.Minute, redislimit.WithPrefix("api:"))
}

// searchRoute limits a route across replicas: the middleware takes the
// Redis limiter as it takes the in-process one.
func searchRoute(limiter *redislimit.Limiter, next http.Handler) (http.Handler, error) {
	mw, err := httplimit.New(limiter, httplimit.WithRoute("search"))
	if err != nil {
		return nil, err
	}
	return mw.Handler(next), nil
}

// This example needs a Redis server, so it is compiled but not run.
func Example_searchRoute() {
	limiter, err := newLimiter("127.0.0.1:6379")
	if err != nil {
		log.Fatal(err)
	}
	search, err := searchRoute(limiter, http.NotFoundHandler())
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", search))
}
