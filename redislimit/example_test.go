package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

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
	case errors.Is(err, redislimit.ErrInvalidKey):
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
		redislimit.WithAlgorithm(redislimit.FixedWindow), redislimit.WithTimeout(50*time.Millisecond))
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
