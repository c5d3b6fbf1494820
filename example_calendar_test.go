package keyrate_test

import (
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
)

// ExampleNewPolicies_monthlyQuota sells a plan as products do: 3 calls a
// month, the month turning on the 15th, the billing day, at midnight in New
// York, beside 2 a minute. A refusal by the month waits until the 15th; the
// first instant of the new month admits again.
func ExampleNewPolicies_monthlyQuota() {
	ny, _ := time.LoadLocation("America/New_York")
	clock := keyrate.NewManualClock(time.Date(2027, 3, 14, 23, 58, 0, 0, ny))
	l, _ := keyrate.NewPolicies([]keyrate.Policy{
		{Name: "minute", Limit: 2, Window: time.Minute},
		{Name: "month", Limit: 3, Calendar: keyrate.Monthly(15, ny)},
	}, keyrate.WithClock(clock))
	defer l.Close()
	show := func(d keyrate.Decision) {
		fmt.Printf("%s allowed=%v %s remaining=%d retry=%v\n",
			clock.Now().Format("Jan 2 15:04"), d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	}
	show(l.Take("acme", 1))
	show(l.Take("acme", 1))
	show(l.Take("acme", 1)) // the minute is spent
	clock.Advance(time.Minute)
	show(l.Take("acme", 1))
	show(l.Take("acme", 1)) // the month is spent until the 15th
	clock.Advance(time.Minute)
	d := l.Take("acme", 1)
	show(d)
	month := d.Policies()[1] // March 15th to April 15th
	fmt.Printf("month: %v long, %d left, turns in %v\n", month.Period, month.Remaining, month.ResetAfter)
	// Output:
	// Mar 14 23:58 allowed=true minute remaining=1 retry=0s
	// Mar 14 23:58 allowed=true minute remaining=0 retry=0s
	// Mar 14 23:58 allowed=false minute remaining=0 retry=1m0s
	// Mar 14 23:59 allowed=true month remaining=0 retry=0s
	// Mar 14 23:59 allowed=false month remaining=0 retry=1m0s
	// Mar 15 00:00 allowed=true minute remaining=1 retry=0s
	// month: 744h0m0s long, 2 left, turns in 744h0m0s
}
