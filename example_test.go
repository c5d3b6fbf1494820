package keyrate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// A limiter of 3 events per 10 seconds per key, on a manual clock so the
// output is the same on every run.
func Example() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := keyrate.New(3, 10*time.Second, keyrate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	for i := range 4 {
		fmt.Println("request", i+1, "allowed:", limiter.Allow("alice"))
	}
	fmt.Println("bob allowed:", limiter.Allow("bob"))
	clock.Advance(10 * time.Second)
	fmt.Println("10s later, alice allowed:", limiter.Allow("alice"))
	// Output:
	// request 1 allowed: true
	// request 2 allowed: true
	// request 3 allowed: true
	// request 4 allowed: false
	// bob allowed: true
	// 10s later, alice allowed: true
}

// The boundary burst: 10 requests at 00:09 and 10 at 00:11. A fixed window
// resetting at 00:10 would admit all 20; the sliding window admits 10.
func Example_boundaryBurst() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 9, 0, time.UTC))
	limiter, _ := keyrate.New(10, 10*time.Second, keyrate.WithClock(clock))
	defer limiter.Close()

	burst := func() (admitted int) {
		for range 10 {
			if limiter.Allow("client") {
				admitted++
			}
		}
		return admitted
	}
	fmt.Println("00:09 admitted:", burst())
	clock.Advance(2 * time.Second)
	fmt.Println("00:11 admitted:", burst())
	fmt.Println("retry after:", limiter.Peek("client").RetryAfter)
	// Output:
	// 00:09 admitted: 10
	// 00:11 admitted: 0
	// retry after: 8s
}

// Take returns the numbers behind the answer: what a server puts in its
// RateLimit and Retry-After headers.
func ExampleLimiter_Take() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, _ := keyrate.New(5, time.Minute, keyrate.WithClock(clock))
	defer limiter.Close()

	d := limiter.Take("upload", 4) // a request of weight 4
	fmt.Printf("allowed=%v remaining=%d reset=%v\n", d.Allowed, d.Remaining, d.ResetAfter)
	clock.Advance(15 * time.Second)
	d = limiter.Take("upload", 2)
	fmt.Printf("allowed=%v remaining=%d retry=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	// The 4 taken at 0s leave at 1m: quota comes back in 45s (RefillAfter,
	// the RateLimit field's t), though the window empties only at 1m15s.
	d = limiter.Take("upload", 1)
	fmt.Printf("allowed=%v remaining=%d refill=%v reset=%v\n", d.Allowed, d.Remaining, d.RefillAfter, d.ResetAfter)
	// Output:
	// allowed=true remaining=1 reset=1m0s
	// allowed=false remaining=1 retry=45s
	// allowed=true remaining=0 refill=45s reset=1m0s
}

// Wait blocks until the request fits. With a deadline too close for the
// next free slot, it fails at once instead of sleeping in vain.
func ExampleLimiter_Wait() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, _ := keyrate.New(1, time.Hour, keyrate.WithClock(clock))
	defer limiter.Close()

	fmt.Println(limiter.Wait(context.Background(), "api.example.com"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := limiter.Wait(ctx, "api.example.com")
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded), "context still live:", ctx.Err() == nil)
	// Output:
	// <nil>
	// deadline exceeded: true context still live: true
}

// WithMaxKeys bounds the keys tracked at once. A new key is decided at
// once all the same: the least recently decided key makes room for it, and
// forgets its events.
func ExampleWithMaxKeys() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, _ := keyrate.New(1, time.Minute, keyrate.WithMaxKeys(2), keyrate.WithClock(clock))
	defer limiter.Close()

	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		fmt.Println(ip, "allowed:", limiter.Allow(ip))
		clock.Advance(time.Second)
	}
	fmt.Println("tracked:", limiter.Len())
	// 192.0.2.1 made room for 192.0.2.3: it starts afresh. 192.0.2.3 was
	// decided recently and keeps its event.
	fmt.Println("192.0.2.1 again:", limiter.Allow("192.0.2.1"))
	fmt.Println("192.0.2.3 again:", limiter.Allow("192.0.2.3"))
	// Output:
	// 192.0.2.1 allowed: true
	// 192.0.2.2 allowed: true
	// 192.0.2.3 allowed: true
	// tracked: 2
	// 192.0.2.1 again: true
	// 192.0.2.3 again: false
}

// WithRefuseNewKeys keeps a full limiter's keys instead: during a flood of
// new keys, the ones beyond the bound are refused without growing the map.
func ExampleWithRefuseNewKeys() {
	limiter, _ := keyrate.New(100, time.Minute, keyrate.WithMaxKeys(2), keyrate.WithRefuseNewKeys())
	defer limiter.Close()

	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		d := limiter.Take(ip, 1)
		fmt.Println(ip, "allowed:", d.Allowed, "overflow:", d.Overflow)
	}
	fmt.Println("tracked:", limiter.Len())
	// Output:
	// 192.0.2.1 allowed: true overflow: false
	// 192.0.2.2 allowed: true overflow: false
	// 192.0.2.3 allowed: false overflow: true
	// tracked: 2
}

// Two policies on every key, 10 per second and 1,000 per day: a request is
// admitted only when both have room, and the Decision names the policy
// that decided. Policies lists each one's numbers, for headers.
func ExampleNewPolicies() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := keyrate.NewPolicies([]keyrate.Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "day", Limit: 1000, Window: 24 * time.Hour},
	}, keyrate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	d := limiter.Take("alice", 10) // a burst of 10
	fmt.Println("allowed:", d.Allowed, "binding:", d.Policy)
	d = limiter.Take("alice", 1)
	fmt.Println("allowed:", d.Allowed, "binding:", d.Policy, "retry after:", d.RetryAfter)
	for _, p := range d.Policies() {
		fmt.Printf("  %s: %d of %d left, room: %v\n", p.Name, p.Remaining, p.Limit, p.Allowed)
	}
	// Spend the rest of the day's quota, one full second at a time.
	for range 99 {
		clock.Advance(time.Second)
		limiter.Take("alice", 10)
	}
	clock.Advance(time.Second)
	d = limiter.Take("alice", 1)
	fmt.Println("allowed:", d.Allowed, "binding:", d.Policy, "retry after:", d.RetryAfter)
	// Output:
	// allowed: true binding: second
	// allowed: false binding: second retry after: 1s
	//   second: 0 of 10 left, room: false
	//   day: 990 of 1000 left, room: true
	// allowed: false binding: day retry after: 23h58m20s
}

// Tiers give keys different policies by plan. The tier function runs on
// every decision, so a key's new plan applies from its next request, and
// SetTier changes a tier's policies at run time.
func ExampleWithTiers() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	plan := func(apiKey string) string {
		if strings.HasPrefix(apiKey, "pro-") {
			return "pro"
		}
		return "" // the default tier: NewPolicies' policies
	}
	limiter, err := keyrate.NewPolicies(
		[]keyrate.Policy{{Name: "minute", Limit: 3, Window: time.Minute}},
		keyrate.WithClock(clock),
		keyrate.WithTiers(plan, map[string][]keyrate.Policy{
			"pro": {{Name: "minute", Limit: 10, Window: time.Minute}},
		}),
	)
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	admitted := func(key string) (n int) {
		for range 20 {
			if limiter.Allow(key) {
				n++
			}
		}
		return n
	}
	fmt.Println("free-1 admitted:", admitted("free-1"))
	fmt.Println("pro-1 admitted:", admitted("pro-1"))
	// The pro plan grows to 15 a minute; pro-1's 10 events still count.
	if err := limiter.SetTier("pro", []keyrate.Policy{{Name: "minute", Limit: 15, Window: time.Minute}}); err != nil {
		panic(err)
	}
	fmt.Println("pro-1 admitted after SetTier:", admitted("pro-1"))
	// Output:
	// free-1 admitted: 3
	// pro-1 admitted: 10
	// pro-1 admitted after SetTier: 5
}

// A request can count against several keys at once, such as a user's and
// their organisation's: it is admitted only when both have room, and a
// refusal by one records nothing against the other.
func ExampleLimiter_TakeAll() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := keyrate.New(3, time.Minute, keyrate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	limiter.AllowN("org:acme", 3) // the organisation has spent its minute
	ds, ok, _ := limiter.TakeAll(context.Background(), []keyrate.Hit{{Key: "user:alice", Weight: 1}, {Key: "org:acme", Weight: 1}})
	fmt.Println("allowed:", ok, "| alice has room:", ds[0].Allowed, "| acme has room:", ds[1].Allowed)
	fmt.Println("alice's remaining, nothing recorded:", limiter.Peek("user:alice").Remaining+1)
	// Output:
	// allowed: false | alice has room: true | acme has room: false
	// alice's remaining, nothing recorded: 3
}

// Middleware limits a key it composes (the route, then the client), but a
// plan belongs to the client's own API key. backend.ContextWithIdentity
// hands the tier function that key as the client sent it; httplimit and
// grpclimit do this for every request.
func ExampleWithTiers_identity() {
	plan := func(apiKey string) string {
		if strings.HasPrefix(apiKey, "pro-") {
			return "pro"
		}
		return ""
	}
	limiter, err := keyrate.NewPolicies(
		[]keyrate.Policy{{Name: "minute", Limit: 3, Window: time.Minute}},
		keyrate.WithTiers(plan, map[string][]keyrate.Policy{
			"pro": {{Name: "minute", Limit: 10, Window: time.Minute}},
		}),
	)
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	key := "search\x00x-api-key=pro-42" // as the middleware composes it
	d, _ := limiter.TakeContext(context.Background(), key, 1)
	fmt.Println("by the key:", d.Limit)
	ctx := backend.ContextWithIdentity(context.Background(), "pro-42")
	d, _ = limiter.TakeContext(ctx, key, 1)
	fmt.Println("by the identity:", d.Limit)
	// Output:
	// by the key: 3
	// by the identity: 10
}

// The O(1) algorithms trade exactness for memory: under FixedWindow, 10
// calls at 00:09 and 10 more at 00:11 all pass a limit of 10 per 10
// seconds, where the sliding log admits 10 of the 20.
func ExampleWithAlgorithm() {
	for _, a := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 9, 0, time.UTC))
		limiter, err := keyrate.New(10, 10*time.Second, keyrate.WithClock(clock), keyrate.WithAlgorithm(a))
		if err != nil {
			panic(err)
		}
		admitted := 0
		for range 10 {
			if limiter.Allow("k") {
				admitted++
			}
		}
		clock.Advance(2 * time.Second)
		for range 10 {
			if limiter.Allow("k") {
				admitted++
			}
		}
		fmt.Printf("%s: %d of 20\n", a, admitted)
		limiter.Close()
	}
	// Output:
	// sliding log: 10 of 20
	// fixed window: 20 of 20
	// GCRA: 12 of 20
}

// A login endpoint that counts only failed attempts: every attempt is
// decided, and a successful one is refunded, leaving the log exactly as if
// it had never been made.
func ExampleLimiter_Refund() {
	clock := keyrate.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := keyrate.New(3, 15*time.Minute, keyrate.WithClock(clock)) // 3 failures per 15 minutes
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	login := func(user, password string) string {
		d := limiter.Take(user, 1)
		if !d.Allowed {
			return fmt.Sprintf("locked for %v", d.RetryAfter)
		}
		if password == "right" {
			if err := limiter.Refund(context.Background(), user, &d); err != nil {
				panic(err)
			}
			return "welcome"
		}
		return "wrong password"
	}
	for _, pw := range []string{"right", "right", "wrong", "right", "wrong", "wrong", "right"} {
		fmt.Println(login("alice", pw))
		clock.Advance(time.Minute)
	}
	// Output:
	// welcome
	// welcome
	// wrong password
	// welcome
	// wrong password
	// wrong password
	// locked for 11m0s
}

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
