package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

// A model call reserves its max_tokens, 500, from a budget of 1,000 tokens
// a minute, and gives back what it did not use once it knows: it used 120,
// so the key holds 120, and the receipt 120 more to give back should the
// call fail after all.
func ExampleLimiter_RefundN() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, 1000, time.Minute, redislimit.WithPrefix("tokens:"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	d, err := limiter.TakeContext(ctx, "team-9", 500) // reserve max_tokens
	if err != nil || !d.Allowed {
		log.Fatal("not admitted: ", err)
	}
	fmt.Println("reserved, remaining:", d.Remaining)

	used := 120 // the call's real cost
	if err := limiter.RefundN(ctx, "team-9", &d, 500-used); err != nil {
		log.Fatal(err)
	}
	now, err := limiter.TakeContext(ctx, "team-9", 0) // a weight of 0 reads the key
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled, remaining:", now.Remaining, "receipt left:", d.Receipt.N())
	// Output:
	// reserved, remaining: 500
	// settled, remaining: 880 receipt left: 120
}
