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

// The tests in this file drive the scripts directly with several policies
// per key, as the protocol in scripts.go allows, and compare every number
// they return with naive models that keep every event and count each
// policy's window from scratch.

// policy is one limit over a window, the window in microseconds.
type policy struct{ limit, window int64 }

// verdict is a script's answer: allowed, the instant decided at, and per
// policy remaining, retryAfter, resetAfter and refillAfter.
type verdict struct {
	allowed bool
	now     int64
	per     [][4]int64
}

func runScript(t *testing.T, c redis.UniversalClient, s *redis.Script, key string, n, now int64, ps []policy) verdict {
	t.Helper()
	args := []any{n, now}
	for _, p := range ps {
		args = append(args, p.limit, p.window)
	}
	v, err := s.Run(context.Background(), c, []string{key}, args...).Int64Slice()
	if err != nil {
		t.Fatalf("script(n=%d, now=%d): %v", n, now, err)
	}
	if len(v) != 2+4*len(ps) {
		t.Fatalf("script returned %d values, want %d", len(v), 2+4*len(ps))
	}
	// The tests move a manual clock, not real time: keep Redis from
	// expiring what the model still counts. Expiry is tested elsewhere.
	if err := c.Persist(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	out := verdict{allowed: v[0] == 1, now: v[1]}
	for i := range ps {
		out.per = append(out.per, [4]int64(v[2+4*i:6+4*i]))
	}
	return out
}

// fits reports whether n can ever fit: not negative and within every limit.
func fits(n int64, ps []policy) bool {
	if n < 0 {
		return false
	}
	for _, p := range ps {
		if n > p.limit {
			return false
		}
	}
	return true
}

type event struct{ t, w int64 }

// logModel is the exact sliding log, naively: every event kept, every
// window summed from scratch.
type logModel struct{ events []event }

func (m *logModel) decide(now, n int64, ps []policy) verdict {
	if k := len(m.events); k > 0 && now < m.events[k-1].t {
		now = m.events[k-1].t
	}
	in := func(p policy) []event { // the events in p's window at now
		i := 0
		for i < len(m.events) && m.events[i].t <= now-p.window {
			i++
		}
		return m.events[i:]
	}
	sum := func(es []event) (s int64) {
		for _, e := range es {
			s += e.w
		}
		return s
	}
	allowed := n == 0 || fits(n, ps)
	for _, p := range ps {
		if n > 0 && sum(in(p))+n > p.limit {
			allowed = false
		}
	}
	v := verdict{allowed: allowed, now: now}
	for _, p := range ps {
		es := in(p)
		held := sum(es)
		var r [4]int64
		switch {
		case allowed && n > 0:
			r = [4]int64{p.limit - held - n, 0, p.window, p.window}
			if held > 0 {
				r[3] = es[0].t + p.window - now
			}
		default:
			r[0] = max(p.limit-held, 0)
			if held > 0 {
				r[2] = es[len(es)-1].t + p.window - now
				r[3] = es[0].t + p.window - now
			}
			if n > 0 && n <= p.limit && held+n > p.limit {
				// Drop events from the oldest until n fits.
				for _, e := range es {
					held -= e.w
					if held+n <= p.limit {
						r[1] = e.t + p.window - now
						break
					}
				}
			}
		}
		v.per = append(v.per, r)
	}
	if allowed && n > 0 {
		// An admission drops what has left the longest window of the
		// policies deciding it (and nothing else does): after a change to
		// longer windows those events no longer count.
		var wmax int64
		for _, p := range ps {
			wmax = max(wmax, p.window)
		}
		m.events = slices.DeleteFunc(m.events, func(e event) bool { return e.t <= now-wmax })
		m.events = append(m.events, event{now, n})
	}
	return v
}

// windowModel is the fixed window: per window length the newest window
// number seen and its count.
type windowModel struct{ windows map[int64]*fixed }

type fixed struct{ idx, count int64 }

func (m *windowModel) decide(now, n int64, ps []policy) verdict {
	if m.windows == nil {
		m.windows = map[int64]*fixed{}
	}
	idx, count, left := make([]int64, len(ps)), make([]int64, len(ps)), make([]int64, len(ps))
	allowed := n == 0 || fits(n, ps)
	for i, p := range ps {
		idx[i] = now / p.window
		if f := m.windows[p.window]; f != nil {
			idx[i] = max(idx[i], f.idx)
			if idx[i] == f.idx {
				count[i] = f.count
			}
		}
		left[i] = (idx[i]+1)*p.window - now
		if n > 0 && count[i]+n > p.limit {
			allowed = false
		}
	}
	v := verdict{allowed: allowed, now: now}
	for i, p := range ps {
		if allowed && n > 0 {
			v.per = append(v.per, [4]int64{p.limit - count[i] - n, 0, left[i], left[i]})
			m.windows[p.window] = &fixed{idx[i], count[i] + n}
			continue
		}
		r := [4]int64{max(p.limit-count[i], 0), 0, 0, 0}
		if count[i] > 0 {
			r[2], r[3] = left[i], left[i]
		}
		if n > 0 && n <= p.limit && count[i]+n > p.limit {
			r[1] = left[i]
		}
		v.per = append(v.per, r)
	}
	return v
}

type decider interface {
	decide(now, n int64, ps []policy) verdict
}

// TestScriptsMatchModels plays random sequences of weights and clock moves
// (forwards, standing still, backwards) on random sets of one to three
// policies, which change now and then as a SetTier or a key moving tier
// would change them, against both scripts and their models, comparing
// every number of every answer.
func TestScriptsMatchModels(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	windows := []int64{5e6, 7_654_321, 10e6, 60e6}
	limits := []int64{1, 2, 3, 5, 10, 1000}
	for _, alg := range []struct {
		name   string
		script *redis.Script
		model  func() decider
	}{
		{"SlidingLog", slidingLogScript, func() decider { return &logModel{} }},
		{"FixedWindow", fixedWindowScript, func() decider { return &windowModel{} }},
	} {
		t.Run(alg.name, func(t *testing.T) {
			for seq := range 150 {
				rng := rand.New(rand.NewPCG(uint64(seq), 15))
				draw := func() []policy {
					ps := make([]policy, 1+rng.IntN(3))
					for i := range ps {
						ps[i] = policy{limits[rng.IntN(len(limits))], windows[rng.IntN(len(windows))]}
					}
					return ps
				}
				ps := draw()
				key := fmt.Sprintf("model:%s:%d", alg.name, seq)
				client.Del(context.Background(), key)
				m := alg.model()
				now := base + rng.Int64N(60e6)
				for step := range 40 {
					if seq%2 == 1 && rng.IntN(8) == 0 {
						ps = draw()
					}
					switch r := rng.IntN(10); {
					case r < 6:
						now += rng.Int64N(windows[len(windows)-1]) / int64(1+rng.IntN(20))
					case r < 8: // the same instant
					default:
						now -= rng.Int64N(10e6)
					}
					var n int64
					switch r := rng.IntN(10); {
					case r < 5:
						n = 1
					case r < 8:
						n = rng.Int64N(ps[0].limit + 2)
					default:
						n = rng.Int64N(5) - 2
					}
					got := runScript(t, client, alg.script, key, n, now, ps)
					want := m.decide(now, n, ps)
					if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) {
						t.Fatalf("sequence %d step %d, policies %v: take(n=%d) at +%dµs\n got %+v\nwant %+v",
							seq, step, ps, n, now-base, got, want)
					}
					if lm, ok := m.(*logModel); ok && got.allowed && n > 0 {
						checkPruned(t, client, key, lm, got.now, ps)
					}
				}
			}
		})
	}
}

// checkPruned checks that an admission at now left exactly the events of
// the longest window in the sorted set, two entries each.
func checkPruned(t *testing.T, c redis.UniversalClient, key string, m *logModel, now int64, ps []policy) {
	t.Helper()
	var wmax int64
	for _, p := range ps {
		wmax = max(wmax, p.window)
	}
	want := int64(0)
	for _, e := range m.events {
		if e.t > now-wmax {
			want++
		}
	}
	if got := c.ZCard(context.Background(), key).Val(); got != 2*want {
		t.Fatalf("after an admission at %d the set has %d entries, want %d (two per event in the longest window)", now, got, 2*want)
	}
}

// TestRunningTotalsRebase starts a sliding log whose running totals are
// just below 2^52, the last value doubles count exactly, and admits heavy
// weights across it: the script shifts the totals down and every answer
// still matches the model.
func TestRunningTotalsRebase(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	const key = "model:rebase"
	client.Del(ctx, key)
	ps := []policy{{1<<31 - 1, 10e6}, {3 << 30, 30e6}}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

	// Three events already held, written in the script's layout, the
	// newest one's by-weight entry carrying the oldest one's start and age
	// and a key living an hour.
	m := &logModel{}
	s := int64(1<<52 - 5<<30)
	smin := s
	for i, w := range []int64{1 << 29, 1 << 28, 1 << 29} {
		at := now + int64(i)*1e6
		mT := fmt.Sprintf("%013x", s)
		mC := fmt.Sprintf("%x:%x:%x:%x:%x", s, at, smin, at-now, int64(3600e6))
		if err := client.ZAdd(ctx, key, redis.Z{Score: float64(at), Member: mT}, redis.Z{Score: -float64(s + w), Member: mC}).Err(); err != nil {
			t.Fatal(err)
		}
		m.events = append(m.events, event{at, w})
		s += w
	}
	now += 3e6
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 60 {
		n := rng.Int64N(1 << 30)
		now += rng.Int64N(4e6)
		got := runScript(t, client, slidingLogScript, key, n, now, ps)
		want := m.decide(now, n, ps)
		if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) {
			t.Fatalf("step %d: take(n=%d)\n got %+v\nwant %+v", step, n, got, want)
		}
	}
	top, err := client.ZRangeWithScores(ctx, key, 0, 0).Result()
	if err != nil || len(top) != 1 {
		t.Fatalf("newest entry: %v, %v", top, err)
	}
	if total := -top[0].Score; total >= 1<<40 {
		t.Fatalf("running total after 60 heavy admissions is %.0f; want it shifted down below 2^40", total)
	}
}
