package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

// With a local fallback, each of two replicas admits half of each limit on
// its own while Redis cannot answer: here a port where nothing listens.
// The first call waits out its budget and opens the circuit breaker; the
// calls after it are decided at once, in this process.
func ExampleWithLocalFallback() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now

	client := redis.NewClient(&redis.Options{Addr: down, ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.New(client, 4, time.Minute,
		redislimit.WithTimeout(50*time.Millisecond),
		redislimit.WithLocalFallback(0.5)) // two replicas
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		d, err := limiter.TakeContext(context.Background(), "tenant-7", 1)
		fmt.Printf("allowed=%v fallback=%v limit=%d remaining=%d err=%v\n", d.Allowed, d.Fallback, d.Limit, d.Remaining, err)
	}
	// Output:
	// allowed=true fallback=true limit=2 remaining=1 err=<nil>
	// allowed=true fallback=true limit=2 remaining=0 err=<nil>
	// allowed=false fallback=true limit=2 remaining=0 err=<nil>
}
