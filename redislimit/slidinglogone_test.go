package redislimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

var onePrefixes atomic.Int64

// TestOneScriptMatchesBatch runs the script for a run of one request
// (slidingLogOneScript) and the batch script on copies of the same log, at
// the same instant, with the same ARGV, over random sequences: takes of
// weights -1 to 12 under tiers of one to three policies (ticks of 1 and 2
// µs, so that a log changes tick; one of a minute that often fills a ring), with and without a resolution, a clock
// that moves on by up to 3 s or steps back, and refunds of earlier
// admissions through the Limiter. After every take the two replies must be
// the same bytes (but for the generation a log that held no entries draws
// at random), and so must the two logs, with the same expiry to the
// millisecond's rounding. The log each step starts from is the batch
// script's, so the script for one reads every state the batch script
// writes, and writes what it would; refunds run on that log too, and the
// receipts they use are parsed from the replies.
func TestOneScriptMatchesBatch(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	tiers := map[string][]keyrate.Policy{
		"a": {{Limit: 10, Window: time.Second}},
		"b": {{Name: "b1", Limit: 5, Window: 200 * time.Millisecond}, {Name: "b2", Limit: 20, Window: 2 * time.Second}},
		"c": {{Name: "c1", Limit: 3, Window: 50 * time.Millisecond}, {Name: "c2", Limit: 8, Window: 500 * time.Millisecond},
			{Name: "c3", Limit: 1000, Window: time.Hour}},
		"d": {{Limit: 1000, Window: time.Minute}},
	}
	names := []string{"", "a", "b", "c", "d", "d", "d"}
	rapid.Check(t, func(rt *rapid.T) {
		clock := keyrate.NewManualClock(time.UnixMicro(1_700_000_000_000_000))
		opts := []Option{withClock(clock), WithTiers(func(string) string { return "" }, tiers),
			WithPrefix(fmt.Sprintf("one%d:", onePrefixes.Add(1)))}
		if rapid.Bool().Draw(rt, "resolution") {
			opts = append(opts, WithResolution(time.Duration(rapid.IntRange(1, 20).Draw(rt, "res ms"))*time.Millisecond))
		}
		l, err := NewPolicies(client, []keyrate.Policy{{Limit: 100, Window: 10 * time.Second}}, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		kb := l.StoreKey("k")
		ka := kb + ":one"
		var receipts []keyrate.Decision
		var plan string // mostly kept from step to step, as a key's plan is
		for step := range rapid.IntRange(1, 150).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "move") {
			case 0:
				clock.Advance(-time.Duration(rapid.IntRange(0, 100_000).Draw(rt, "back µs")) * time.Microsecond)
			case 1:
				clock.Advance(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "on ms")) * time.Millisecond)
			default:
				clock.Advance(time.Duration(rapid.IntRange(0, 30_000).Draw(rt, "on µs")) * time.Microsecond)
			}
			if len(receipts) > 0 && rapid.IntRange(0, 5).Draw(rt, "refund?") == 0 {
				d := receipts[rapid.IntRange(0, len(receipts)-1).Draw(rt, "which")]
				n := rapid.IntRange(1, 3).Draw(rt, "refund n")
				_ = l.RefundN(ctx, "k", &d, n) // nothing to refund is an outcome too
				continue
			}
			if step == 0 || rapid.IntRange(0, 9).Draw(rt, "new tier?") == 0 {
				plan = names[rapid.IntRange(0, len(names)-1).Draw(rt, "tier")]
			}
			tr := l.tiers.Load().named[plan]
			n := rapid.IntRange(-1, 12).Draw(rt, "n")
			r := &request{keys: []string{kb}, weights: []int{n}, tiers: []*tier{tr}, instant: l.localNow() / 1000}
			_, args := l.runArgs([]*request{r})
			// The log the step starts from, copied.
			if err := copyKey(ctx, client, kb, ka); err != nil {
				rt.Fatal(err)
			}
			// A log left with no entries draws a new generation, at random,
			// in each script: the two may differ in it alone.
			gen := client.GetRange(ctx, kb, 2, 3).Val()
			one, err := slidingLogOneScript.Run(ctx, client, []string{ka}, args...).Text()
			if err != nil {
				rt.Fatalf("step %d: one: %v", step, err)
			}
			batch, err := slidingLogScript.Run(ctx, client, []string{kb}, args...).Text()
			if err != nil {
				rt.Fatalf("step %d: batch: %v", step, err)
			}
			va, vb := client.Get(ctx, ka).Val(), client.Get(ctx, kb).Val()
			drawn := len(vb) > 4 && vb[2:4] != gen
			if drawn && len(one) == len(batch) && len(one) == 1+8*(3+4*len(tr.policies)) {
				at := 1 + 8*(1+4*len(tr.policies))
				one = one[:at] + batch[at:at+8] + one[at+8:]
			}
			if one != batch {
				rt.Fatalf("step %d: replies differ:\none   %x\nbatch %x", step, one, batch)
			}
			if drawn && len(va) == len(vb) {
				va = va[:2] + vb[2:4] + va[4:]
			}
			if va != vb {
				rt.Fatalf("step %d: logs differ:\none   %x\nbatch %x", step, va, vb)
			}
			pa, pb := client.PTTL(ctx, ka).Val(), client.PTTL(ctx, kb).Val()
			if (pa < 0) != (pb < 0) || (pa-pb).Abs() > 50*time.Millisecond {
				rt.Fatalf("step %d: expiries differ: one %v, batch %v", step, pa, pb)
			}
			settle([]*request{r}, batch, nil)
			if r.ans.err != nil {
				rt.Fatalf("step %d: %v", step, r.ans.err)
			}
			if d, err := tr.decision(n, r.ans.admitted, r.ans.replies[0]); err != nil {
				rt.Fatalf("step %d: %v", step, err)
			} else if d.Allowed && n > 0 {
				receipts = append(receipts, d)
			}
		}
	})
}

// copyKey makes dst a copy of src, its value and its expiry; of no key,
// no key.
func copyKey(ctx context.Context, c *redis.Client, src, dst string) error {
	if err := c.Del(ctx, dst).Err(); err != nil {
		return err
	}
	return c.Copy(ctx, src, dst, 0, true).Err()
}
