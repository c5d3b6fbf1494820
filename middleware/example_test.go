package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// logObserver prints what it is told, as metrics would count it.
type logObserver struct{}

func (logObserver) Observe(ev middleware.Event) {
	switch {
	case ev.Err != nil:
		fmt.Println(ev.Route, ev.Identity, "error:", ev.Err)
	case ev.Decision.Allowed:
		fmt.Println(ev.Route, ev.Identity, "allowed")
	default:
		fmt.Println(ev.Route, ev.Identity, "limited, retry in", ev.Decision.RetryAfter)
	}
}

// An Observer is told of every request after the hooks, and beside them:
// setting one replaces no hook.
func ExampleObserver() {
	l, err := keyrate.New(1, time.Minute, keyrate.WithClock(keyrate.NewManualClock(start)))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	m, err := httplimit.New(l,
		httplimit.WithRoute("search"),
		httplimit.WithObserver(logObserver{}),
		httplimit.WithOnLimited(func(ev middleware.Event) { fmt.Println("OnLimited hook:", ev.Identity) }),
	)
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		r := httptest.NewRequest("GET", "/search", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// search 192.0.2.1 allowed
	// OnLimited hook: 192.0.2.1
	// search 192.0.2.1 limited, retry in 1m0s
}
