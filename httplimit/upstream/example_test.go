package upstream_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit/upstream"
)

// A client of a paid API held to its plan, 3 calls a second and 1,000 a
// day: the transport makes a call wait for its turn rather than send it
// over the plan, and pauses when the API answers 429 with a Retry-After.
// Four calls take a second.
func ExampleNewTransport() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	defer api.Close()

	plan, err := keyrate.NewPolicies([]keyrate.Policy{
		{Name: "second", Limit: 3, Window: time.Second},
		{Name: "day", Limit: 1000, Window: 24 * time.Hour},
	})
	if err != nil {
		panic(err)
	}
	defer plan.Close()
	transport, err := upstream.NewTransport(http.DefaultTransport, plan)
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: transport}

	start := time.Now()
	for i := range 4 {
		resp, err := client.Get(api.URL + "/v1/quote")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("call %d: %d\n", i+1, resp.StatusCode)
	}
	fmt.Println("a second or more:", time.Since(start) >= time.Second)
	// Output:
	// call 1: 200
	// call 2: 200
	// call 3: 200
	// call 4: 200
	// a second or more: true
}

// With WithFailFast a call over the plan is not sent and does not wait:
// the caller learns when it would fit, and may do something else.
func ExampleWithFailFast() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	plan, _ := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	defer plan.Close()
	transport, err := upstream.NewTransport(nil, plan, upstream.WithFailFast(), upstream.WithClock(clock))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: transport}

	for range 3 {
		resp, err := client.Get(api.URL)
		var limited *upstream.LimitedError
		switch {
		case errors.As(err, &limited):
			fmt.Println("not sent; it fits in", limited.RetryAfter)
		case err != nil:
			panic(err)
		default:
			resp.Body.Close()
			fmt.Println("sent:", resp.StatusCode)
		}
		clock.Advance(10 * time.Second)
	}
	// Output:
	// sent: 200
	// sent: 200
	// not sent; it fits in 40s
}
