package ratelimitfield_test

import (
	"fmt"
	"net/http"

	"github.com/keyrate/keyrate/ratelimitfield"
)

// A client reads what it has left from a response's RateLimit field.
func ExampleParseRateLimit() {
	h := http.Header{}
	h.Add("RateLimit", `"second";r=9;t=1, "day";r=0;t=51840`)
	quotas, err := ratelimitfield.ParseRateLimit(h.Values("RateLimit"))
	if err != nil {
		panic(err)
	}
	for _, q := range quotas {
		fmt.Printf("%s: %d left, more in %v\n", q.Name, q.Remaining, q.Reset)
	}
	// Output:
	// second: 9 left, more in 1s
	// day: 0 left, more in 14h24m0s
}
