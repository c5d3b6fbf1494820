package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"pgregory.net/rapid"
)

// behindClock is the Redis server's clock in the lease model: real time
// less how far the server's clock has stepped back, which only grows (a
// server clock that runs ahead of real time would let any limiter on it
// admit more per real window; stepping back is what failovers and
// corrections do).
type behindClock struct {
	real *keyrate.ManualClock
	back atomic.Int64
}

func (c *behindClock) Now() time.Time { return c.real.Now().Add(-time.Duration(c.back.Load())) }

// leaseEvent is one admitted decision in the lease model: its key, the
// real instant it was admitted at, the weight it still holds (refunds take
// from it), the limits of the tier it was decided under, and its Decision,
// for refunds.
type leaseEvent struct {
	key    string
	at     time.Time
	n      int
	limits []int
	d      keyrate.Decision
	by     int
}

// TestModelLeases holds several Limiters with leases that share one Redis
// to the exactness invariant, whatever they do: takes of random weights on
// a few keys, refunds of any admitted decision from any replica (into a
// live lease or through Redis), steps of the real clock short and long,
// the server's clock stepping back, the tier of every key changing (on
// every replica at once, as SetTier on each does), sweeps, a replica
// closed (its leases given back) and one abandoned holding its leases.
// After every step, the window ending at each admitted event holds, of
// the events admitted up to it, at most the limit of each policy (the
// larger of the two tiers' where the window holds events of both: a lease
// taken under one tier is spent under it until it ends, on a replica that
// may not have seen the change), in real time: no window of real time
// ever holds more than the limit, the property leases keep by looking back
// over window + d.
func TestModelLeases(t *testing.T) {
	srv := redistest.Shared(t)
	client := srv.Client(t)
	ctx := context.Background()
	windows := []time.Duration{time.Second, 3 * time.Second}
	tiers := map[string][]int{"free": {6, 10}, "paid": {9, 20}}
	policies := func(limits []int) []keyrate.Policy {
		return []keyrate.Policy{
			{Name: "second", Limit: limits[0], Window: windows[0]},
			{Name: "burst", Limit: limits[1], Window: windows[1]},
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		real := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		server := &behindClock{real: real}
		var paid atomic.Bool
		tierOf := func(string) string {
			if paid.Load() {
				return "paid"
			}
			return "free"
		}
		d := time.Duration(rapid.IntRange(1, 400).Draw(rt, "leaseMs")) * time.Millisecond
		prefix := uniquePrefix()
		const replicas = 3
		ls := make([]*redislimit.Limiter, replicas)
		gone := make([]bool, replicas) // closed or abandoned: no more calls
		for i := range ls {
			l, err := redislimit.NewPolicies(client, policies(tiers["free"]),
				redislimit.WithPrefix(prefix), redislimit.WithClock(server), redislimit.WithLeaseClock(real),
				redislimit.WithLeases(d),
				redislimit.WithTiers(tierOf, map[string][]keyrate.Policy{"free": policies(tiers["free"]), "paid": policies(tiers["paid"])}))
			if err != nil {
				rt.Fatal(err)
			}
			ls[i] = l
		}
		defer func() {
			for _, l := range ls {
				l.Close()
			}
		}()
		var events []*leaseEvent
		keys := []string{"a", "b"}
		check := func(step string) {
			for i, e := range events {
				if e.n == 0 {
					continue
				}
				for p, w := range windows {
					held, limit := 0, 0
					for _, f := range events[:i+1] {
						if f.key == e.key && f.at.After(e.at.Add(-w)) && !f.at.After(e.at) {
							held += f.n
							limit = max(limit, f.limits[p])
						}
					}
					if held > limit {
						rt.Fatalf("after %s: the %v window ending at %v holds %d of key %q, over its limit %d",
							step, w, e.at.Sub(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), held, e.key, limit)
					}
				}
			}
		}
		live := func() []int {
			var out []int
			for i, g := range gone {
				if !g {
					out = append(out, i)
				}
			}
			return out
		}
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for s := range steps {
			idle := live()
			op := rapid.IntRange(0, 99).Draw(rt, "op")
			switch {
			case op < 55 && len(idle) > 0:
				i := rapid.SampledFrom(idle).Draw(rt, "replica")
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				n := rapid.IntRange(1, 4).Draw(rt, "n")
				limits := tiers[tierOf(key)]
				dec, err := ls[i].TakeContext(ctx, key, n)
				if err != nil {
					rt.Fatalf("step %d: take: %v", s, err)
				}
				if dec.Allowed {
					events = append(events, &leaseEvent{key: key, at: real.Now(), n: n, limits: limits, d: dec, by: i})
				}
				check(fmt.Sprintf("step %d: replica %d takes %d of %q", s, i, n, key))
			case op < 65 && len(events) > 0 && len(idle) > 0:
				e := rapid.SampledFrom(events).Draw(rt, "event")
				if e.n == 0 {
					continue
				}
				i := rapid.SampledFrom(idle).Draw(rt, "refunder")
				m := rapid.IntRange(1, e.n).Draw(rt, "m")
				err := ls[i].RefundN(ctx, e.key, &e.d, m)
				switch {
				case err == nil:
					e.n -= m
				case errors.Is(err, keyrate.ErrNothingToRefund):
				default:
					rt.Fatalf("step %d: refund: %v", s, err)
				}
				check(fmt.Sprintf("step %d: replica %d refunds %d", s, i, m))
			case op < 80:
				real.Advance(time.Duration(rapid.Int64Range(0, int64(d)).Draw(rt, "short")))
			case op < 83:
				real.Advance(time.Duration(rapid.Int64Range(0, int64(4*time.Second)).Draw(rt, "long")))
			case op < 86 && len(events) > 0:
				// To near where an admitted event leaves a window: where
				// a look back of the window alone would miss a lease's
				// later events.
				e := rapid.SampledFrom(events).Draw(rt, "edgeOf")
				edge := e.at.Add(rapid.SampledFrom(windows).Draw(rt, "edge"))
				edge = edge.Add(time.Duration(rapid.Int64Range(-int64(d), int64(d)).Draw(rt, "jitter")))
				if el := edge.Sub(real.Now()); el > 0 {
					real.Advance(el)
				}
			case op < 89:
				server.back.Add(rapid.Int64Range(0, int64(2*time.Second)).Draw(rt, "back"))
			case op < 93:
				paid.Store(!paid.Load())
			case op < 97 && len(idle) > 0:
				redislimit.SweepLeases(ls[rapid.SampledFrom(idle).Draw(rt, "swept")])
			case len(idle) > 1:
				i := rapid.SampledFrom(idle).Draw(rt, "leaving")
				if rapid.Bool().Draw(rt, "close") {
					if err := ls[i].Close(); err != nil {
						rt.Fatal(err)
					}
					if _, err := ls[i].TakeContext(ctx, "a", 1); !errors.Is(err, keyrate.ErrClosed) {
						rt.Fatalf("take after Close: %v, want ErrClosed", err)
					}
				}
				gone[i] = true
				check(fmt.Sprintf("step %d: replica %d leaves", s, i))
			}
		}
	})
}
