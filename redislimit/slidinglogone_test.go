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

// generalScript is the sliding log's batch script without its fast path:
// what the fast path must answer and write alike.
var generalScript = decisionScript(slidingLogSource)

// TestOneScriptMatchesBatch runs the script for a run of one request
// (slidingLogOneScript) or the batch script, each with the fast path, and
// the batch script's code without it on copies of the same log, at the
// same instant, with the same ARGV, over random sequences: takes of
// weights -1 to 12 under tiers of one to three policies (ticks of 1 and 2
// µs, so that a log changes tick; one of a minute that often fills a ring), with and without a resolution, a clock
// that moves on by up to 3 s or steps back, and refunds of earlier
// admissions through the Limiter; runs of one request, and of a few, each
// of one key or of two or three (TakeAll's), on three keys. After every run the two replies must be
// the same bytes (but for the generation a log that held no entries draws
// at random), and so must the two logs, with the same expiry to the
// millisecond's rounding. The log each step starts from is the batch
// script's, so the script for one reads every state the batch script
// writes, and writes what it would (so a log written by either path
// reads alike by the other); refunds run on that log too, and the
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
		clientKeys := []string{"k", "k2", "k3"}
		var receipts []receipt
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
				r := receipts[rapid.IntRange(0, len(receipts)-1).Draw(rt, "which")]
				n := rapid.IntRange(1, 3).Draw(rt, "refund n")
				_ = l.RefundN(ctx, r.key, &r.d, n) // nothing to refund is an outcome too
				continue
			}
			if step == 0 || rapid.IntRange(0, 9).Draw(rt, "new tier?") == 0 {
				plan = names[rapid.IntRange(0, len(names)-1).Draw(rt, "tier")]
			}
			tr := l.tiers.Load().named[plan]
			// A run of one request, mostly; else of a few, on one key or
			// both, so that a request the fast path declines follows one
			// it decided.
			var reqs []*request
			var of []int // each request's key, as an index of clientKeys
			runLen := 1
			if rapid.IntRange(0, 3).Draw(rt, "several?") == 0 {
				runLen = rapid.IntRange(2, 4).Draw(rt, "run")
			}
			for range runLen {
				r := &request{instant: l.localNow() / 1000}
				// Mostly one key; else several, distinct (TakeAll merges
				// a key given twice), as TakeAll's.
				ks := []int{rapid.IntRange(0, 2).Draw(rt, "key")}
				if rapid.IntRange(0, 2).Draw(rt, "several keys?") == 0 {
					ks = rapid.Permutation([]int{0, 1, 2}).Draw(rt, "keys")[:rapid.IntRange(2, 3).Draw(rt, "K")]
				}
				for _, k := range ks {
					r.keys = append(r.keys, l.StoreKey(clientKeys[k]))
					r.weights = append(r.weights, rapid.IntRange(-1, 12).Draw(rt, "n"))
					r.tiers = append(r.tiers, tr)
					of = append(of, k)
				}
				reqs = append(reqs, r)
			}
			keys, args := l.runArgs(reqs)
			// The logs the step starts from, copied, and their generations:
			// a log left with no entries draws a new one at random in each
			// script, so the two may differ in it alone.
			copies := make([]string, len(keys))
			gens := map[string]string{}
			for i, k := range keys {
				copies[i] = k + ":one"
				if err := copyKey(ctx, client, k, copies[i]); err != nil {
					rt.Fatal(err)
				}
				gens[k] = client.GetRange(ctx, k, 2, 3).Val()
			}
			script := slidingLogScript
			if len(reqs) == 1 && rapid.Bool().Draw(rt, "script for one") {
				script = slidingLogOneScript
			}
			began := time.Now() // expiries count from when each script ran
			one, err := script.Run(ctx, client, copies, args...).Text()
			if err != nil {
				rt.Fatalf("step %d: with the fast path: %v", step, err)
			}
			general, err := generalScript.Run(ctx, client, keys, args...).Text()
			if err != nil {
				rt.Fatalf("step %d: general: %v", step, err)
			}
			drawn := map[string]bool{}
			for i, k := range keys {
				va, vb := client.Get(ctx, copies[i]).Val(), client.Get(ctx, k).Val()
				if len(vb) > 4 && vb[2:4] != gens[k] && len(va) == len(vb) {
					drawn[k] = true
					va = va[:2] + vb[2:4] + va[4:]
				}
				if va != vb {
					rt.Fatalf("step %d: logs of %s differ:\nfast    %x\ngeneral %x", step, clientKeys[of[i]], va, vb)
				}
				pa, pb := client.PTTL(ctx, copies[i]).Val(), client.PTTL(ctx, k).Val()
				if (pa < 0) != (pb < 0) || (pa-pb).Abs() > 50*time.Millisecond+time.Since(began) {
					rt.Fatalf("step %d: expiries differ: fast %v, general %v", step, pa, pb)
				}
			}
			// Each record of a run that no error ended: a status, then
			// each key's numbers.
			size := 8 * (3 + 4*len(tr.policies))
			if len(one) == len(general) && len(one) == len(reqs)+size*len(keys) {
				at := 0
				for _, r := range reqs {
					at++
					for _, k := range r.keys {
						if drawn[k] {
							g := at + 8*(1+4*len(tr.policies))
							one = one[:g] + general[g:g+8] + one[g+8:]
						}
						at += size
					}
				}
			}
			if one != general {
				rt.Fatalf("step %d: replies differ:\nfast    %x\ngeneral %x", step, one, general)
			}
			settle(reqs, general, nil)
			i := 0
			for _, r := range reqs {
				if r.ans.err != nil {
					rt.Fatalf("step %d: %v", step, r.ans.err)
				}
				for j := range r.keys {
					if r.ans.admitted && r.weights[j] > 0 {
						d, err := tr.decision(r.weights[j], true, r.ans.replies[j])
						if err != nil {
							rt.Fatalf("step %d: %v", step, err)
						}
						receipts = append(receipts, receipt{clientKeys[of[i]], d})
					}
					i++
				}
			}
		}
	})
}

// receipt is an admission of TestOneScriptMatchesBatch's, to refund.
type receipt struct {
	key string
	d   keyrate.Decision
}

// copyKey makes dst a copy of src, its value and its expiry; of no key,
// no key.
func copyKey(ctx context.Context, c *redis.Client, src, dst string) error {
	if err := c.Del(ctx, dst).Err(); err != nil {
		return err
	}
	return c.Copy(ctx, src, dst, 0, true).Err()
}
