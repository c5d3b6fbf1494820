package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

// A request that counts against two budgets at once, a user's and a
// route's, is admitted only when both have room, and recorded against
// both in one script run; a refusal records nothing. The hash tag
// function keeps the keys of one tenant in one Redis Cluster slot, so
// that a Cluster can decide them together too.
func ExampleLimiter_TakeAll() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()
	tenant := func(key string) string { t, _, _ := strings.Cut(key, "/"); return t }
	limiter, err := redislimit.New(client, 2, time.Minute, redislimit.WithHashTagFunc(tenant))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	alice, bob, export := "acme/user:alice", "acme/user:bob", "acme/route:/export"
	for _, hits := range [][]keyrate.Hit{
		{{Key: alice, Weight: 1}, {Key: export, Weight: 1}},
		{{Key: bob, Weight: 1}, {Key: export, Weight: 1}},
		{{Key: alice, Weight: 1}, {Key: export, Weight: 1}}, // the route is full: alice's budget is untouched
		{{Key: alice, Weight: 1}},
	} {
		ds, ok, err := limiter.TakeAll(ctx, hits)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("admitted=%v remaining:", ok)
		for _, d := range ds {
			fmt.Printf(" %d", d.Remaining)
		}
		fmt.Println()
	}
	// Output:
	// admitted=true remaining: 1 1
	// admitted=true remaining: 1 0
	// admitted=false remaining: 1 0
	// admitted=true remaining: 0
}
