package ratelimitfield_test

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// Ten a second and a thousand a day: the fields after the first request,
// as a response would carry them.
func Example() {
	l, err := keyrate.NewPolicies([]keyrate.Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "day", Limit: 1000, Window: 24 * time.Hour},
	}, keyrate.WithClock(keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	d := l.Take("alice", 1)

	h := http.Header{}
	h.Set("RateLimit-Policy", string(ratelimitfield.AppendPolicy(nil, &d, "", "")))
	h.Set("RateLimit", string(ratelimitfield.AppendRateLimit(nil, &d, "")))
	fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", h.Get("RateLimit"))
	// Output:
	// RateLimit-Policy: "second";q=10;w=1, "day";q=1000;w=86400
	// RateLimit: "second";r=9;t=1, "day";r=999;t=86400
}

// A refusal: the refusing policy's t is when the request fits, and that is
// Retry-After too. The unnamed policy of keyrate.New takes the route's
// name.
func ExampleT() {
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	l.AllowN("alice", 2)
	clock.Advance(15 * time.Second)
	d := l.Take("alice", 1)

	t, _ := ratelimitfield.T(&d)
	fmt.Println("RateLimit:", string(ratelimitfield.AppendRateLimit(nil, &d, "search")))
	fmt.Println("Retry-After:", strconv.FormatInt(t, 10))
	// Output:
	// RateLimit: "search";r=0;t=45
	// Retry-After: 45
}

// Without a decision at hand, as when the store is unavailable, the
// backend's own policies are advertised, here with a quota unit.
func ExampleAppendPolicies() {
	policies := []keyrate.Policy{{Limit: 1 << 20, Window: time.Hour}}
	fmt.Println(string(ratelimitfield.AppendPolicies(nil, policies, "upload", "content-bytes")))
	// Output:
	// "upload";q=1048576;qu="content-bytes";w=3600
}

// Appending into a buffer of the caller's own costs no allocation, however
// many fields are written into it.
func ExampleAppendRateLimit() {
	d := backend.Combine(keyrate.PolicyDecision{
		Policy:  keyrate.Policy{Name: "burst", Limit: 5, Window: 10 * time.Second},
		Allowed: true, Remaining: 3, RefillAfter: 2500 * time.Millisecond, ResetAfter: 9 * time.Second,
	})
	var buf [64]byte
	b := ratelimitfield.AppendRateLimit(buf[:0], &d, "")
	fmt.Printf("%s\n", b)
	// Output:
	// "burst";r=3;t=3
}

// The same decision in each Revision's parameters: the default, Draft10,
// and the renaming pull request 166 proposes, with what the request
// consumed.
func ExampleRevision_AppendRateLimit() {
	d := backend.Combine(keyrate.PolicyDecision{
		Policy:  keyrate.Policy{Name: "burst", Limit: 5, Window: 10 * time.Second},
		Allowed: true, Remaining: 3, RefillAfter: 2500 * time.Millisecond,
	})
	for _, v := range []ratelimitfield.Revision{ratelimitfield.Draft10, ratelimitfield.Proposal166} {
		fmt.Printf("%s: %s\n", v, v.AppendRateLimit(nil, &d, "", 2))
	}
	// Output:
	// draft-10: "burst";r=3;t=3
	// proposal-166: "burst";a=3;w=3;c=2
}
