package redislimit

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

var onePrefixes atomic.Int64

// generalScript is the sliding log's batch script without its fast path:
// what the fast path must answer and write alike.
var generalScript = decisionScript(slidingLogRing + slidingLogSource)

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
		"e": {{Limit: 50, Window: 100 * time.Millisecond}},
		"f": {{Limit: 1000, Window: 200 * time.Millisecond}},
	}
	names := []string{"", "a", "b", "c", "d", "d", "d", "e", "f", "f"}
	var grown growths
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
			script := slidingLogScript
			if len(reqs) == 1 && rapid.Bool().Draw(rt, "script for one") {
				script = slidingLogOneScript
			}
			general, err := matchScripts(ctx, client, l, script, reqs, &grown)
			if err != nil {
				rt.Fatalf("step %d: %v", step, err)
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
	// Logs growing out of their buffer or ring, the fast path's rarest
	// writes (TestFastGrowthMatchesGeneral takes each kind in turn).
	assert.Positive(t, grown.any, "no log grew")
}

// TestFastGrowthMatchesGeneral drives logs through each way the fast path
// grows one, each step compared with the general code (matchScripts):
// out of the buffer of a new log, at an admission that sets the key's
// expiry (to one other than it had) and at one that keeps it; and out of
// a ring whose entries wrap around its end, after the window's turning
// moved its head.
func TestFastGrowthMatchesGeneral(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(time.UnixMicro(1_700_000_000_000_000))
	limiter := func(policies []keyrate.Policy, opts ...Option) *Limiter {
		opts = append(opts, withClock(clock), WithPrefix(fmt.Sprintf("one%d:", onePrefixes.Add(1))))
		l, err := NewPolicies(client, policies, opts...)
		require.NoError(t, err)
		return l
	}
	per := func(window time.Duration) []keyrate.Policy { return []keyrate.Policy{{Limit: 1000, Window: window}} }
	// Instants round up to 400 ms: a new log's expiry counts from its
	// entry's, up to 400 ms after the admission, and one set later from an
	// admission on a multiple of it, so the two expiries differ.
	young := limiter(per(10*time.Second), WithResolution(400*time.Millisecond))
	// A window of 1 s holds at most 7 entries 200 ms apart: a ring sized
	// for that, not for 9.
	bounded := limiter(per(time.Second), WithResolution(200*time.Millisecond))
	// Under two policies, the ring is sized by the longest window's limit.
	two := limiter([]keyrate.Policy{{Name: "burst", Limit: 5, Window: 200 * time.Millisecond}, {Name: "steady", Limit: 50, Window: 2 * time.Second}})
	ring := limiter(per(time.Second))
	var g growths
	take := func(l *Limiter, script *script) {
		t.Helper()
		r := &request{instant: l.localNow() / 1000, keys: []string{l.StoreKey("k")}, weights: []int{1}, tiers: []*tier{l.tiers.Load().def}}
		_, err := matchScripts(ctx, client, l, script, []*request{r}, &g)
		require.NoError(t, err)
	}
	for _, script := range []*script{slidingLogOneScript, slidingLogScript} {
		// A new log's buffer fills with an entry each 400 ms (its expiry
		// 15.4 s on, 1.5 windows after its first entry's instant), and the
		// fifth admission comes at 6 s, when that expiry is within a
		// window of it. Then the log grows again, keeping its expiry.
		clock.Set(time.UnixMicro(1_700_000_000_000_001))
		for range 4 {
			take(young, script)
			clock.Advance(400 * time.Millisecond)
		}
		clock.Set(time.UnixMicro(1_700_000_006_000_000))
		for range 10 {
			take(young, script)
			clock.Advance(400 * time.Millisecond)
		}
		// Five entries 200 ms apart, and five 1 ms apart, each log
		// growing at its fifth.
		clock.Set(time.UnixMicro(1_700_000_000_000_001))
		for range 5 {
			take(bounded, script)
			clock.Advance(200 * time.Millisecond)
		}
		for range 5 {
			take(two, script)
			clock.Advance(time.Millisecond)
		}
		// Forty admissions a millisecond apart grow a log three times.
		for range 40 {
			take(ring, script)
			clock.Advance(time.Millisecond)
		}
		// A second on, the oldest twenty have left the window (the ring's
		// head moves on past them); then admissions a microsecond apart
		// fill the ring past its end, until it grows.
		clock.Advance(time.Second - 20*time.Millisecond)
		for range 60 {
			take(ring, script)
			clock.Advance(time.Microsecond)
		}
		require.NoError(t, client.Del(ctx, young.StoreKey("k"), bounded.StoreKey("k"), two.StoreKey("k"), ring.StoreKey("k")).Err())
	}
	assert.GreaterOrEqual(t, g.any, 16, "too few logs grew")
	assert.GreaterOrEqual(t, g.wrapped, 2, "no log grew out of a ring that wrapped around")
	assert.GreaterOrEqual(t, g.refreshed, 2, "no log grew at an admission that set its expiry")
}

// matchScripts runs reqs, each of whose keys is under the same tier, as
// one run: by script, which has the fast path, on copies of their keys'
// logs, and by generalScript on the logs themselves, at the same instant
// with the same ARGV. It returns the general script's reply, or an error
// unless the two replies are the same bytes and so are the two logs, with
// the same expiry to the millisecond's rounding, but for the generation a
// log that held no entries draws at random in each. g counts the logs
// that grew.
func matchScripts(ctx context.Context, client *redis.Client, l *Limiter, script *script, reqs []*request, g *growths) (string, error) {
	keys, args := l.runArgs(reqs)
	copies := make([]string, len(keys))
	gens := map[string]string{}
	before := make([]string, len(keys))
	for i, k := range keys {
		copies[i] = k + ":one"
		if err := copyKey(ctx, client, k, copies[i]); err != nil {
			return "", err
		}
		gens[k] = client.GetRange(ctx, k, 2, 3).Val()
		before[i] = client.GetRange(ctx, k, 0, 55).Val()
	}
	began := time.Now() // expiries count from when each script ran
	one, err := script.Run(ctx, client, copies, args...).Text()
	if err != nil {
		return "", fmt.Errorf("with the fast path: %w", err)
	}
	general, err := generalScript.Run(ctx, client, keys, args...).Text()
	if err != nil {
		return "", fmt.Errorf("general: %w", err)
	}
	drawn := map[string]bool{}
	for i, k := range keys {
		va, vb := client.Get(ctx, copies[i]).Val(), client.Get(ctx, k).Val()
		if len(vb) > 4 && vb[2:4] != gens[k] && len(va) == len(vb) {
			drawn[k] = true
			va = va[:2] + vb[2:4] + va[4:]
		}
		if va != vb {
			return "", fmt.Errorf("logs of %s differ:\nfast    %x\ngeneral %x", k, va, vb)
		}
		g.count(before[i], vb)
		pa, pb := client.PTTL(ctx, copies[i]).Val(), client.PTTL(ctx, k).Val()
		if (pa < 0) != (pb < 0) || (pa-pb).Abs() > 50*time.Millisecond+time.Since(began) {
			return "", fmt.Errorf("expiries of %s differ: fast %v, general %v", k, pa, pb)
		}
	}
	// Each record of a run that no error ended: a status, then each key's
	// numbers.
	P := len(reqs[0].tiers[0].policies)
	size := 8 * (3 + 4*P)
	if len(one) == len(general) && len(one) == len(reqs)+size*len(keys) {
		at := 0
		for _, r := range reqs {
			at++
			for _, k := range r.keys {
				if drawn[k] {
					g := at + 8*(1+4*P)
					one = one[:g] + general[g:g+8] + one[g+8:]
				}
				at += size
			}
		}
	}
	if one != general {
		return "", fmt.Errorf("replies differ:\nfast    %x\ngeneral %x", one, general)
	}
	return general, nil
}

// growths counts the rewrites of a log into a larger one (its header's
// capacity grew) that TestOneScriptMatchesBatch saw: in all, from a ring
// whose entries wrapped around its end, and at an admission that set the
// key's expiry (its header's expires changed).
type growths struct{ any, wrapped, refreshed int }

// count counts the step that took a log's header from before to the log
// after, if it grew.
func (g *growths) count(before, after string) {
	if len(before) < 56 || len(after) < 56 || before[0] != 1 || after[0] != 1 {
		return
	}
	u32 := func(s string, at int) uint32 { return binary.LittleEndian.Uint32([]byte(s[at:])) }
	capB, head, rc, cnt := u32(before, 4), u32(before, 8), u32(before, 12), u32(before, 36)
	if cnt == 0 || u32(after, 4) <= capB {
		return
	}
	g.any++
	if head+rc > capB {
		g.wrapped++
	}
	if before[28:36] != after[28:36] {
		g.refreshed++
	}
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
