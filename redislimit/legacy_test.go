package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/keyrate/keyrate/redislimit/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests in this file write keys with the sorted-set script of earlier
// releases (legacy_fixture_test.go), as replicas still running one would,
// and check that the string log counts every event it admitted.

// runLegacy runs the earlier releases' script on the sorted set of key
// (key+":sl", where runScriptAt looks for it) and returns its answer.
func runLegacy(t *testing.T, c redis.UniversalClient, key string, n, now int64, ps []policy) verdict {
	t.Helper()
	args := []any{n, now}
	for _, p := range ps {
		args = append(args, p.limit, p.window)
	}
	v, err := legacyLogScript.Run(context.Background(), c, []string{key + ":sl"}, args...).Int64Slice()
	if err != nil {
		t.Fatalf("earlier script(n=%d, now=%d): %v", n, now, err)
	}
	if err := c.Persist(context.Background(), key+":sl").Err(); err != nil {
		t.Fatal(err)
	}
	out := verdict{allowed: v[0] == 1, now: v[1]}
	for i := range ps {
		out.per = append(out.per, [4]int64(v[2+4*i:6+4*i]))
	}
	return out
}

// TestUpgradeKeepsEvents writes random sequences with the earlier
// releases' script, then goes on with the current one: every answer of
// both matches one model of every event, so the upgrade forgets nothing.
// The first decision after the upgrade, admitted or refused, converts the
// sorted set and deletes it.
func TestUpgradeKeepsEvents(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	// Windows up to 35 minutes: the string log keeps them to the
	// microsecond, as the sorted set did.
	windows := []int64{1e6, 10e6, 60e6, 1800e6}
	limits := []int64{1, 3, 10, 100}
	for seq := range 60 {
		rng := rand.New(rand.NewPCG(uint64(seq), 3))
		ps := make([]policy, 1+rng.IntN(3))
		for i := range ps {
			ps[i] = policy{limits[rng.IntN(len(limits))], windows[rng.IntN(len(windows))]}
		}
		key := fmt.Sprintf("upgrade:%d", seq)
		client.Del(ctx, key, key+":sl")
		m := &logModel{}
		now := base + rng.Int64N(1e6)
		upgrade := 5 + rng.IntN(60)
		for step := range upgrade + 40 {
			now += rng.Int64N(ps[0].window/ps[0].limit + 1)
			n := int64(1)
			if rng.IntN(8) == 0 {
				n = rng.Int64N(ps[0].limit + 1)
			}
			var got verdict
			if step < upgrade {
				got = runLegacy(t, client, key, n, now, ps)
			} else {
				got = runScript(t, client, slidingLogScript, key, n, now, ps)
			}
			want := m.decide(now, n, ps)
			if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) {
				t.Fatalf("sequence %d step %d (upgraded at %d), policies %v: take(n=%d)\n got %+v\nwant %+v",
					seq, step, upgrade, ps, n, got, want)
			}
			if step == upgrade {
				if n := client.Exists(ctx, key+":sl").Val(); n != 0 {
					t.Fatalf("sequence %d: the sorted set is still there after the first decision on the string log", seq)
				}
				g, err := ReadLog(ctx, client, key)
				if err != nil || len(g.Entries) == 0 && len(m.entries(now, ps)) > 0 {
					t.Fatalf("sequence %d: log after the upgrade %+v, %v; want the model's events", seq, g, err)
				}
			}
			if step >= upgrade && got.allowed && n > 0 {
				checkPruned(t, client, key, m, got.now, ps)
			}
		}
	}
}

// TestRollingUpgrade interleaves replicas of both releases on one key, as a
// rolling deploy does. A replica of the earlier release sees only the
// sorted set, which the current script empties into the string log at its
// every decision, so it may admit more than the limit; every answer of the
// current script still counts every event admitted by either, and matches
// the model of all of them.
func TestRollingUpgrade(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for seq := range 40 {
		rng := rand.New(rand.NewPCG(uint64(seq), 4))
		ps := []policy{{5, 10e6}}
		if seq%2 == 1 {
			ps = []policy{{3, 1e6}, {20, 60e6}}
		}
		key := fmt.Sprintf("rolling:%d", seq)
		client.Del(ctx, key, key+":sl")
		m := &logModel{}
		now := base
		for step := range 120 {
			now += rng.Int64N(ps[0].window / 4)
			n := 1 + rng.Int64N(2)
			if rng.IntN(3) == 0 {
				// The earlier release decides alone; what it admits, it
				// records, and the model counts it.
				got := runLegacy(t, client, key, n, now, ps)
				if got.allowed {
					m.events = append(m.events, event{got.now, n})
					m.last = max(m.last, got.now)
				}
				continue
			}
			got := runScript(t, client, slidingLogScript, key, n, now, ps)
			want := m.decide(now, n, ps)
			if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) {
				t.Fatalf("sequence %d step %d, policies %v: take(n=%d)\n got %+v\nwant %+v", seq, step, ps, n, got, want)
			}
			if n := client.Exists(ctx, key+":sl").Val(); n != 0 {
				t.Fatalf("sequence %d step %d: the sorted set outlived a decision of the current script", seq, step)
			}
		}
	}
}

// TestUpgradeKeepsExpiry checks that a converted key lives as long as the
// longer-lived of its two layouts did, and that a sorted set holding only
// events out of the window leaves nothing behind.
func TestUpgradeKeepsExpiry(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	ps := []policy{{10, 3600e6}}
	const key = "upgrade:expiry"
	client.Del(ctx, key, key+":sl")
	if v, err := legacyLogScript.Run(ctx, client, []string{key + ":sl"}, 1, now, 10, int64(3600e6)).Int64Slice(); err != nil || v[0] != 1 {
		t.Fatalf("earlier script: %v, %v", v, err)
	}
	if ttl := client.PTTL(ctx, key+":sl").Val(); ttl <= time.Hour {
		t.Fatalf("PTTL of the sorted set: %v, want 1.5 hours", ttl)
	}
	got := runScript(t, client, slidingLogScript, key, 0, now+1e6, ps) // a decision that records nothing
	if got.per[0][0] != 9 {
		t.Fatalf("after the upgrade: %+v, want 9 remaining", got)
	}
	// runScript persisted the key; the conversion had set the sorted set's
	// expiry on it, which a second conversion shows.
	client.Del(ctx, key)
	legacyLogScript.Run(ctx, client, []string{key + ":sl"}, 1, now+2e6, 10, int64(3600e6))
	args := []any{0, now + 3e6, 0, 10, int64(3600e6)}
	if err := slidingLogScript.Run(ctx, client, []string{key, key + ":sl"}, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl <= time.Hour || ttl > 90*time.Minute {
		t.Fatalf("PTTL of the converted log: %v, want the sorted set's 1.5 hours", ttl)
	}

	// Events that have all left the window: converted to nothing.
	client.Del(ctx, key, key+":sl")
	legacyLogScript.Run(ctx, client, []string{key + ":sl"}, 1, now, 10, int64(3600e6))
	got = runScript(t, client, slidingLogScript, key, 0, now+3601e6, ps)
	if got.per[0][0] != 10 || client.Exists(ctx, key, key+":sl").Val() != 0 {
		t.Fatalf("after converting events an hour old: %+v, keys left %d; want a whole limit and no keys",
			got, client.Exists(ctx, key, key+":sl").Val())
	}
}
