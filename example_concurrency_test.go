package keyrate_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
)

// At most two reports per customer run at once: a third is turned away
// until one of the two ends, and a customer with none running costs no
// memory.
func ExampleConcurrency() {
	reports, err := keyrate.NewConcurrency(2, nil, nil)
	if err != nil {
		panic(err)
	}
	defer reports.Close()

	first, _, _ := reports.TryAcquire(context.Background(), "acme")
	second, _, _ := reports.TryAcquire(context.Background(), "acme")
	_, ok, _ := reports.TryAcquire(context.Background(), "acme")
	fmt.Println("a third report for acme:", ok)
	first() // the first report ends
	third, ok, _ := reports.TryAcquire(context.Background(), "acme")
	fmt.Println("once one ended:", ok)
	second()
	third()
	fmt.Println("customers in memory:", reports.Len())
	// Output:
	// a third report for acme: false
	// once one ended: true
	// customers in memory: 0
}

// Acquire waits for a slot within its context: here the only one is
// held, and the wait gives up at its deadline. The pro plan holds three
// at once (WithTiers: one policy with a Limit and no window per tier).
func ExampleConcurrency_Acquire() {
	plan := func(apiKey string) string {
		if strings.HasPrefix(apiKey, "pro-") {
			return "pro"
		}
		return ""
	}
	calls, err := keyrate.NewConcurrency(1, plan, map[string]int{
		"pro": 3,
	})
	if err != nil {
		panic(err)
	}
	defer calls.Close()

	release, err := calls.Acquire(context.Background(), "free-7")
	if err != nil {
		panic(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = calls.Acquire(ctx, "free-7")
	fmt.Println("a second call of free-7:", err)

	for i := range 4 {
		_, ok, _ := calls.TryAcquire(context.Background(), "pro-1")
		fmt.Printf("pro-1 call %d: %v\n", i+1, ok)
	}
	// Output:
	// a second call of free-7: context deadline exceeded
	// pro-1 call 1: true
	// pro-1 call 2: true
	// pro-1 call 3: true
	// pro-1 call 4: false
}
