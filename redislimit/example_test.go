package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// exampleRedis returns the address of the redis-server the tests started
// (see TestMain), emptied first so that each example starts with no
// events. Examples run after every test has finished.
func exampleRedis() string {
	addr := redistest.SharedAddr()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		log.Fatal(err)
	}
	return addr
}

// This example needs a Redis server, so it is compiled but not run; the
// tests run the same calls against a real redis-server.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // let go-redis give up at the limiter's budget too
	})
	defer client.Close()

	// 100 requests per minute per API key, shared by every replica.
	limiter, err := redislimit.New(client, 100, time.Minute, redislimit.WithPrefix("myapi:"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.TakeContext(context.Background(), "api-key-123", 1)
	switch {
	case errors.Is(err, keyrate.ErrInvalidKey):
		fmt.Println("no client key: reject the request")
	case err != nil:
		fmt.Println("redis unavailable: fail open or closed, by policy:", err)
	case !d.Allowed:
		fmt.Printf("429, retry in %v\n", d.RetryAfter)
	default:
		fmt.Printf("allowed, %d left\n", d.Remaining)
	}
}

// FixedWindow keeps one counter per key instead of one entry per event.
func ExampleWithAlgorithm() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.New(client, 1_000_000, time.Hour,
		redislimit.WithAlgorithm(keyrate.FixedWindow), redislimit.WithTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	ok, err := limiter.Allow(context.Background(), "tenant-7")
	fmt.Println(ok, err)
}

// A Redis Cluster takes the same limiter: each key's state sits in one
// slot, and keys spread over the slots.
func Example_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer client.Close()
	limiter, err := redislimit.New(client, 100, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.TakeContext(context.Background(), "api-key-123", 1)
	fmt.Println(d.Allowed, err)
}

// With a deny cache, a client hammering a key past its limit is refused
// locally, without a round trip, until Redis could admit it again.
func ExampleWithDenyCache() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.New(client, 10, time.Second, redislimit.WithDenyCache(10_000))
	if err != nil {
		log.Fatal(err)
	}
	for range 20 {
		d, err := limiter.TakeContext(context.Background(), "tenant-7", 1)
		if err == nil && !d.Allowed {
			fmt.Printf("429, t=%v\n", d.RefillAfter.Round(time.Second))
		}
	}
}

// A refusal is held locally for at most the maximum hold. When Redis loses
// a key's events (here FLUSHDB; a restart without persistence does the
// same), the key is admitted again as soon as that hold has passed, not
// when the forgotten refusal would have run out, a day later.
func ExampleWithDenyCacheMaxHold() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, 2, 24*time.Hour,
		redislimit.WithDenyCache(10_000), redislimit.WithDenyCacheMaxHold(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	allow := func() bool {
		ok, err := limiter.Allow(ctx, "tenant-7")
		if err != nil {
			log.Fatal(err)
		}
		return ok
	}
	fmt.Println(allow(), allow(), allow(), allow()) // the last refused locally
	if err := client.FlushDB(ctx).Err(); err != nil {
		log.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the hold has passed: the next call asks Redis
	fmt.Println(allow())
	// Output:
	// true true false false
	// true
}

// Replicas of one service give their limiters the same hash tag secret
// (from the service's secret store; a constant only here), so that they
// share each key's budget while no client can choose the Cluster slot its
// keys land in.
func ExampleWithHashTagSecret() {
	secret := []byte("32 random bytes from the secrets") // the same on every replica
	addr := exampleRedis()
	replica := func() *redislimit.Limiter {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		l, err := redislimit.New(client, 3, time.Minute, redislimit.WithHashTagSecret(secret))
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	a, b := replica(), replica()
	var admitted []bool
	for _, l := range []*redislimit.Limiter{a, b, a, b} {
		ok, err := l.Allow(context.Background(), "api-key-123")
		if err != nil {
			log.Fatal(err)
		}
		admitted = append(admitted, ok)
	}
	fmt.Println(admitted)
	// Output: [true true true false]
}

// A client may send 10 requests a minute and 1,000 a day: one script run
// decides both, and the Decision names the policy that refused and lists
// every policy's numbers (for RateLimit headers).
func ExampleNewPolicies() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.NewPolicies(client, []keyrate.Policy{
		{Name: "minute", Limit: 10, Window: time.Minute},
		{Name: "day", Limit: 1000, Window: 24 * time.Hour},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var d keyrate.Decision
	for range 11 {
		if d, err = limiter.TakeContext(ctx, "client-42", 1); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("11th request: allowed %v, refused by %q, retry in about %v\n", d.Allowed, d.Policy, d.RetryAfter.Round(time.Minute))
	for _, p := range d.Policies() {
		fmt.Printf("%s: %d of %d left\n", p.Name, p.Remaining, p.Limit)
	}
	// Output:
	// 11th request: allowed false, refused by "minute", retry in about 1m0s
	// minute: 0 of 10 left
	// day: 990 of 1000 left
}

// Keys whose API key starts with "pro-" get 10 requests a minute, others
// 3; SetTier changes a plan at run time, and keys keep the events they
// have.
func ExampleWithTiers() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	plan := func(key string) string {
		if strings.HasPrefix(key, "pro-") {
			return "pro"
		}
		return "" // the default tier: New's 3 per minute
	}
	limiter, err := redislimit.New(client, 3, time.Minute, redislimit.WithTiers(plan, map[string][]keyrate.Policy{
		"pro": {{Limit: 10, Window: time.Minute}},
	}))
	if err != nil {
		log.Fatal(err)
	}
	admitted := func(key string) (n int) {
		for range 20 {
			if ok, err := limiter.Allow(context.Background(), key); err != nil {
				log.Fatal(err)
			} else if ok {
				n++
			}
		}
		return n
	}
	fmt.Println("free:", admitted("free-7"))
	fmt.Println("pro:", admitted("pro-7"))
	if err := limiter.SetTier("pro", []keyrate.Policy{{Limit: 15, Window: time.Minute}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("pro at 15 a minute:", admitted("pro-7"))
	// Output:
	// free: 3
	// pro: 10
	// pro at 15 a minute: 5
}

// At a resolution of a minute, a key's log holds at most about one entry
// per minute of its window (a day: 1,442 entries, 12 KB) however many of
// its 100,000 requests a day it admits: the requests of one minute share an
// entry, counted at the minute's end, so RetryAfter and RefillAfter run up
// to a minute long.
func ExampleWithResolution() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, 100_000, 24*time.Hour, redislimit.WithResolution(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	var d keyrate.Decision
	for range 3 {
		if d, err = limiter.TakeContext(context.Background(), "client-42", 1); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("remaining:", d.Remaining)
	fmt.Println("first quota back within a day and a minute:", d.RefillAfter <= 24*time.Hour+time.Minute)
	// Output:
	// remaining: 99997
	// first quota back within a day and a minute: true
}

// Counting only failed logins: each attempt takes from a budget of 3 per
// 15 minutes, and a successful one is refunded, so that only failures
// count. Refund removes the attempt's own event, whichever replica made
// it; once 3 failures are in the window, even the right password waits.
func ExampleLimiter_Refund() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, 3, 15*time.Minute, redislimit.WithPrefix("login:"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	login := func(user, password string) string {
		d, err := limiter.TakeContext(ctx, user, 1)
		if err != nil {
			log.Fatal(err) // or fail closed: it is a login
		}
		if !d.Allowed {
			return fmt.Sprintf("429, retry in %v", d.RetryAfter.Round(time.Minute))
		}
		if password != "correct horse" {
			return "401"
		}
		if err := limiter.Refund(ctx, user, &d); err != nil {
			log.Fatal(err)
		}
		return "200"
	}
	for _, password := range []string{"correct horse", "guess 1", "correct horse", "guess 2", "guess 3", "correct horse"} {
		fmt.Println(login("alice", password))
	}
	// Output:
	// 200
	// 401
	// 200
	// 401
	// 401
	// 429, retry in 15m0s
}

// GCRA is a token bucket: 10 per 10 minutes admits a burst of 10, then one
// a minute, as redis_rate does with a burst of 10 and a rate of 10 per 10
// minutes.
func ExampleWithAlgorithm_gcra() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, 10, 10*time.Minute, redislimit.WithAlgorithm(keyrate.GCRA))
	if err != nil {
		log.Fatal(err)
	}
	admitted, d := 0, keyrate.Decision{}
	for range 12 {
		if d, err = limiter.TakeContext(context.Background(), "tenant-7", 1); err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("next token in:", d.RetryAfter.Round(time.Second))
	// Output:
	// admitted: 10
	// next token in: 1m0s
}
