package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/keyrate/keyrate/redislimit"
	"github.com/redis/go-redis/v9"
)

// Two replicas share two report slots per customer: a report running on
// one holds a slot the other sees taken. Each slot is a lease of 10
// seconds, renewed while held, so a replica that dies frees its slots
// within 10 seconds.
func ExampleConcurrency() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis(), ContextTimeoutEnabled: true})
	defer client.Close()
	replica := func() *redislimit.Concurrency {
		c, err := redislimit.NewConcurrency(client, 2, 10*time.Second, redislimit.WithPrefix("reports:"))
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	a, b := replica(), replica()
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	onA, _, _ := a.TryAcquire(ctx, "acme")
	onB, ok, _ := b.TryAcquire(ctx, "acme")
	fmt.Println("a second report, on the other replica:", ok)
	_, ok, _ = b.TryAcquire(ctx, "acme")
	fmt.Println("a third:", ok)
	onA() // the report on a ends
	third, ok, err := b.TryAcquire(ctx, "acme")
	fmt.Println("once it ended:", ok, err)
	onB()
	third()
	// Output:
	// a second report, on the other replica: true
	// a third: false
	// once it ended: true <nil>
}
