package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests in this file drive the scripts directly with several policies
// per key, as the protocol in scripts.go allows, and compare every number
// they return with naive models that keep every event and count each
// policy's window from scratch.

// policy is one limit over a window, the window in microseconds.
type policy struct{ limit, window int64 }

// verdict is a script's answer: allowed, the instant decided at, per
// policy remaining, retryAfter, resetAfter and refillAfter, and the
// instant an admission's events were recorded at (0 when none were).
type verdict struct {
	allowed  bool
	now      int64
	per      [][4]int64
	recorded int64
}

// runScript runs s for key with no resolution; see runScriptAt.
func runScript(t *testing.T, c redis.UniversalClient, s *script, key string, n, now int64, ps []policy) verdict {
	t.Helper()
	return runScriptAt(t, c, s, key, n, now, 0, ps)
}

// runScriptAt runs s for key at resolution res (µs): a batch of one
// request of one key.
func runScriptAt(t *testing.T, c redis.UniversalClient, s *script, key string, n, now, res int64, ps []policy) verdict {
	t.Helper()
	tr := &tier{}
	for _, p := range ps {
		tr.policies = append(tr.policies, keyrate.Policy{Limit: int(p.limit)})
		tr.args = append(tr.args, p.limit, p.window)
		tr.ids = append(tr.ids, 0)
	}
	r := &request{keys: []string{key}, weights: []int{int(n)}, tiers: []*tier{tr}}
	args := appendArgs(nil, now, res, time.Time{}, []*tier{tr}, []*request{r})
	v, err := s.Run(context.Background(), c, []string{key}, args...).Text()
	if err != nil {
		t.Fatalf("script(n=%d, now=%d): %v", n, now, err)
	}
	settle([]*request{r}, v, nil)
	if r.ans.err != nil {
		t.Fatalf("script(n=%d, now=%d): %v", n, now, r.ans.err)
	}
	// The tests move a manual clock, not real time: keep Redis from
	// expiring what the model still counts. Expiry is tested elsewhere.
	if err := c.Persist(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	k := r.ans.replies[0]
	out := verdict{allowed: r.ans.admitted, now: k.now()}
	if out.allowed && n > 0 { // recorded rid after now
		out.recorded = k.now() + k.rid()
	}
	for i := range ps {
		out.per = append(out.per, [4]int64(k.policy(i)))
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

// logModel is the sliding log, naively: every event kept, every window
// summed from scratch. An event counts at the instant it was admitted at,
// rounded up to a multiple of the resolution res (0: none) and then of the
// tick of the longest window deciding it, as the script records it (its
// events rounded up again when a later admission's tick is coarser);
// without a resolution and with windows up to 35 minutes, that is the
// instant itself: the exact log.
type logModel struct {
	events []event // oldest first, at the instants they count at
	last   int64   // the newest instant decided at, unrounded, once the key exists
	exists bool    // since the first admission: the key is never lost here
	tick   int64   // the tick the log's instants are in
	res    int64
}

// tickOf returns the tick, in microseconds, in which a log whose longest
// window is wmax keeps its instants: the least power of two under which
// wmax is fewer than 2^31-1 ticks.
func tickOf(wmax int64) int64 {
	t := int64(1)
	for wmax >= (1<<31-1)*t {
		t *= 2
	}
	return t
}

// roundUp rounds x > 0 up to a multiple of u.
func roundUp(x, u int64) int64 { return (x + u - 1) / u * u }

func (m *logModel) decide(now, n int64, ps []policy) verdict {
	if m.exists && now < m.last {
		now = m.last
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
	var wmax int64
	for _, p := range ps {
		wmax = max(wmax, p.window)
	}
	allowed := n == 0 || fits(n, ps)
	for _, p := range ps {
		if n > 0 && sum(in(p))+n > p.limit {
			allowed = false
		}
	}
	// The instant an admission is recorded at: rounded up, and never
	// before the newest event.
	tick, at := tickOf(wmax), now
	if m.res > 0 {
		at = roundUp(at, m.res)
	}
	at = roundUp(at, tick)
	if k := len(m.events); k > 0 {
		at = max(at, roundUp(m.events[k-1].t, tick))
	}
	v := verdict{allowed: allowed, now: now}
	for _, p := range ps {
		es := in(p)
		held := sum(es)
		var r [4]int64
		switch {
		case allowed && n > 0:
			r = [4]int64{p.limit - held - n, 0, at + p.window - now, at + p.window - now}
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
	// Every decision of a key that exists drops what has left the longest
	// window of the policies deciding it: after a change to longer windows
	// those events no longer count. An admission moves the rest to its
	// tick.
	// A decision that records nothing in ticks coarser than the log's
	// moves them to its own, as an admission does.
	if m.exists || allowed && n > 0 {
		m.events = slices.DeleteFunc(m.events, func(e event) bool { return e.t <= now-wmax })
		m.last = now
		if allowed && n > 0 || tick > m.tick && len(m.events) > 0 {
			for i := range m.events {
				m.events[i].t = roundUp(m.events[i].t, tick)
			}
			m.tick = tick
		}
	}
	if allowed && n > 0 {
		m.events = append(m.events, event{at, n})
		m.exists = true
		v.recorded = at
	}
	return v
}

// entries returns the events in the longest window of ps at now, one per
// instant with the weights admitted at it: what the log holds after an
// admission at now.
func (m *logModel) entries(now int64, ps []policy) []LogEntry {
	var wmax int64
	for _, p := range ps {
		wmax = max(wmax, p.window)
	}
	var want []LogEntry
	for _, e := range m.events {
		switch k := len(want); {
		case e.t <= now-wmax:
		case k > 0 && want[k-1].At == e.t:
			want[k-1].Weight += e.w
		default:
			want = append(want, LogEntry{At: e.t, Weight: e.w})
		}
	}
	return want
}

// windowModel is the fixed window: per window length the newest window
// number seen and its count, and, once the key exists, the newest instant
// decided at.
type windowModel struct {
	windows map[int64]*fixed
	last    int64
}

type fixed struct{ idx, count int64 }

func (m *windowModel) decide(now, n int64, ps []policy) verdict {
	if m.windows == nil {
		m.windows = map[int64]*fixed{}
	}
	if len(m.windows) > 0 {
		now = max(now, m.last)
		m.last = now
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
	if allowed && n > 0 {
		v.recorded = now
	}
	for i, p := range ps {
		if allowed && n > 0 {
			v.per = append(v.per, [4]int64{p.limit - count[i] - n, 0, left[i], left[i]})
			m.windows[p.window] = &fixed{idx[i], count[i] + n}
			m.last = now
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

// TestModelScripts plays random sequences of weights and clock moves
// (forwards, standing still, backwards) on random sets of one to three
// policies, which change now and then as a SetTier or a key moving tier
// would change them, against both scripts and their models, comparing
// every number of every answer.
func TestModelScripts(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	windows := []int64{5e6, 7_654_321, 10e6, 60e6}
	limits := []int64{1, 2, 3, 5, 10, 1000}
	for _, alg := range []struct {
		name   string
		script *script
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
					if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) || got.recorded != want.recorded {
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
// the longest window in the log, one entry per instant with the weight
// admitted at it, and that the log reads back whole (ReadLog checks its
// header against its entries).
func checkPruned(t *testing.T, c redis.UniversalClient, key string, m *logModel, now int64, ps []policy) {
	t.Helper()
	g, err := ReadLog(context.Background(), c, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]LogEntry, len(g.Entries))
	for i, e := range g.Entries {
		got[i] = LogEntry{At: e.At, Weight: e.Weight}
	}
	if want := m.entries(now, ps); !slices.Equal(got, want) {
		t.Fatalf("after an admission at %d the log holds %v, want %v (the longest window's events, by instant)", now, got, want)
	}
}

// TestRunningTotalsWrap admits weights near the largest limit for long
// enough that the running totals, kept mod 2^32, wrap around many times,
// on two policies whose windows keep different events: every answer still
// matches the model.
func TestRunningTotalsWrap(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	const key = "model:wrap"
	client.Del(context.Background(), key)
	ps := []policy{{1<<31 - 1, 10e6}, {1 << 30, 3e6}}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	m := &logModel{}
	rng := rand.New(rand.NewPCG(1, 2))
	var admitted int64
	for step := range 300 {
		n := rng.Int64N(1 << 30)
		now += rng.Int64N(2e6)
		got := runScript(t, client, slidingLogScript, key, n, now, ps)
		want := m.decide(now, n, ps)
		if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) || got.recorded != want.recorded {
			t.Fatalf("step %d: take(n=%d)\n got %+v\nwant %+v", step, n, got, want)
		}
		if got.allowed {
			admitted += n
			checkPruned(t, client, key, m, now, ps)
		}
	}
	if admitted < 8<<32 {
		t.Fatalf("admitted %d in all, want the totals to wrap at least 8 times", admitted)
	}
}

// TestModelLog plays long random sequences on the sliding log
// against the model: windows from a second to a week (ticks of 1 to 512
// µs), resolutions, limits up to 400, dense stretches that fill the ring
// (it grows, wraps around and flushes its buffer into it) and sparse ones
// that drain it (it shrinks), weights, policies that change as tiers would,
// and a clock that stands still and steps back. Every number of every
// answer must match, and after each admission the log must hold the
// model's entries.
func TestModelLog(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + 123457
	windows := []int64{1e6, 10e6, 60e6, 3600e6, 86400e6, 7 * 86400e6}
	limits := []int64{1, 4, 5, 9, 60, 400}
	resolutions := []int64{0, 0, 1, 999, 1000, 250_000, 1e6} // at most the shortest window
	for seq := range 48 {
		rng := rand.New(rand.NewPCG(uint64(seq), 77))
		m := &logModel{res: resolutions[rng.IntN(len(resolutions))]}
		draw := func() []policy {
			ps := make([]policy, 1+rng.IntN(3))
			for i := range ps {
				ps[i] = policy{limits[rng.IntN(len(limits))], windows[rng.IntN(len(windows))]}
			}
			return ps
		}
		ps := draw()
		key := fmt.Sprintf("model:long:%d", seq)
		client.Del(context.Background(), key)
		now := base + rng.Int64N(1e6)
		for step := range 600 {
			if seq%3 == 1 && rng.IntN(80) == 0 {
				ps = draw()
			}
			wmin, longest := ps[0].window, ps[0]
			for _, p := range ps {
				wmin = min(wmin, p.window)
				if p.window > longest.window {
					longest = p
				}
			}
			wmax := longest.window
			switch r := rng.IntN(100); {
			case step/200%2 == 1 && r < 50: // a sparse stretch
				now += rng.Int64N(wmax / 8)
			case r < 80: // dense: about the longest window's limit per window
				now += rng.Int64N(2*wmax/longest.limit + 1)
			case r < 95: // the same instant
			case r < 98:
				now -= rng.Int64N(wmin)
			default:
				now += rng.Int64N(wmax)
			}
			n := int64(1)
			if rng.IntN(10) == 0 {
				n = rng.Int64N(ps[0].limit+2) - 1
			}
			got := runScriptAt(t, client, slidingLogScript, key, n, now, m.res, ps)
			want := m.decide(now, n, ps)
			if got.allowed != want.allowed || got.now != want.now || !slices.Equal(got.per, want.per) || got.recorded != want.recorded {
				t.Fatalf("sequence %d step %d, resolution %dµs, policies %v: take(n=%d) at +%dµs\n got %+v\nwant %+v",
					seq, step, m.res, ps, n, now-base, got, want)
			}
			if got.allowed && n > 0 {
				checkPruned(t, client, key, m, got.now, ps)
			}
		}
	}
}
