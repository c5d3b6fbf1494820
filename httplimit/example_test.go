package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

// Two requests a minute per client on one route. The third, 15 seconds
// later, is refused; RateLimit's t and Retry-After both say when it fits.
func Example() {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	mw, _ := httplimit.New(l, httplimit.WithRoute("hello"))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for i := range 3 {
		if i == 2 {
			clock.Advance(15 * time.Second)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/hello", nil))
		fmt.Printf("%d RateLimit-Policy: %s RateLimit: %s Retry-After: %q\n", rec.Code,
			rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Policy: "hello";q=2;w=60 RateLimit: "hello";r=1;t=60 Retry-After: ""
	// 200 RateLimit-Policy: "hello";q=2;w=60 RateLimit: "hello";r=0;t=60 Retry-After: ""
	// 429 RateLimit-Policy: "hello";q=2;w=60 RateLimit: "hello";r=0;t=45 Retry-After: "45"
}
