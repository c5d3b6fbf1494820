package benchmarks

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/keyrate/keyrate"
)

// heapBytes returns the live heap after two full collections (the second
// frees what finalizers of the first released).
func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// fill admits events events for each of keys fresh keys. Each key string is
// formatted here and referenced only by the limiter, so a limiter that keeps
// its keys is charged for them and one that keeps only a hash is not.
func fill(l Limiter, keys, events int) {
	for i := range keys {
		k := Key(i)
		for range events {
			l.Allow(k)
		}
	}
}

// BytesPerKey returns the heap the limiter holds per tracked key after
// admitting events events (at most 100) to each of keys fresh keys under the
// 100-per-minute budget, key strings included.
func BytesPerKey(p Peer, keys, events int) (float64, error) {
	l, err := p.New(Config{Limit: 100, Window: time.Minute})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	before := heapBytes()
	fill(l, keys, events)
	after := heapBytes()
	runtime.KeepAlive(l)
	return float64(after-before) / float64(keys), nil
}

// IdleSetup is the scaled-down configuration of the idle-memory measurement:
// a window and sweep interval short enough to watch every key go idle and be
// swept in real time.
const (
	IdleWindow = 200 * time.Millisecond
	IdleSweep  = 100 * time.Millisecond
	IdleWait   = 2 * time.Second
)

// BytesPerKeyAfterIdle admits one event for each of keys fresh keys under a
// budget of 100 per IdleWindow, lets every key go idle for IdleWait (many
// windows and sweeps), then calls Allow on two other keys one window apart
// (a limiter that sweeps only on its callers' path, like httprate, sweeps
// then) and returns the heap still held per original key.
//
// It runs in real time: the peers' sweepers read the system clock.
func BytesPerKeyAfterIdle(p Peer, keys int) (float64, error) {
	l, err := p.New(Config{Limit: 100, Window: IdleWindow, Sweep: IdleSweep})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	before := heapBytes()
	fill(l, keys, 1)
	deadline := time.Now().Add(IdleWait)
	if k, ok := l.(interface{ Len() int }); ok {
		// keyrate says when it is done; poll, with the same deadline.
		for k.Len() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	} else {
		time.Sleep(time.Until(deadline))
	}
	l.Allow("probe-a")
	time.Sleep(IdleWindow)
	l.Allow("probe-b")
	after := heapBytes()
	runtime.KeepAlive(l)
	return float64(after-before) / float64(keys), nil
}

// MemoryCase is one row of the memory table at the full limit: a key's
// policies, and how many keys to fill, enough to average over and few
// enough that the heaviest limiter's keys stay within a few hundred MB.
type MemoryCase struct {
	// Name is the row's label.
	Name string
	// Policies hold every key. Several are decided together by the
	// limiters that can (Peer.NewPolicies); the others get one limiter per
	// policy (Stack).
	Policies []keyrate.Policy
	// Keys is how many keys are filled.
	Keys int
	// Requests, when set, is how many requests fill the longest window,
	// and Weight(i) the weight of the i-th (its tokens, its bytes): a
	// budget of cost units rather than of requests. Only limiters that
	// take a weight (WeightedLimiter) can be measured under it. Unset: the
	// limit's worth of requests of weight 1.
	Requests int
	Weight   func(i int) int
}

// WeightedLimiter is a Limiter that takes a request of any weight in one
// call, for the memory cases of weighted requests.
type WeightedLimiter interface {
	AllowN(key string, n int) bool
}

// ErrUnweighted is what BytesPerKeyFull returns for a limiter that takes no
// weights under a case of weighted requests.
var ErrUnweighted = errors.New("benchmarks: the limiter takes no weights")

// MemoryCases are the rows of the memory table at the full limit: a minute,
// an hour and a day, a day's limit under a per-second one, and limits large
// enough that a log of every event costs hundreds of kilobytes per key.
var MemoryCases = []MemoryCase{
	{"100/min", []keyrate.Policy{{Limit: 100, Window: time.Minute}}, 10_000, 0, nil},
	{"1,000/hour", []keyrate.Policy{{Limit: 1_000, Window: time.Hour}}, 10_000, 0, nil},
	{"10/s + 1,000/day (NewPolicies)", []keyrate.Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "day", Limit: 1_000, Window: 24 * time.Hour},
	}, 10_000, 0, nil},
	{"10,000/day", []keyrate.Policy{{Limit: 10_000, Window: 24 * time.Hour}}, 1_000, 0, nil},
	{"100,000/day", []keyrate.Policy{{Limit: 100_000, Window: 24 * time.Hour}}, 300, 0, nil},
	// A model API's budget: a million tokens a minute, held by 1,000
	// requests of 850 to 949 tokens.
	{"1,000,000 tokens/min, 1,000 requests of ~900", []keyrate.Policy{{Limit: 1_000_000, Window: time.Minute}}, 1_000, 1_000,
		func(i int) int { return 850 + i%100 }},
	// One request of the largest weight a limit holds.
	{"one request of 2^31-1 (limit 2^31-1/min)", []keyrate.Policy{{Limit: math.MaxInt32, Window: time.Minute}}, 10_000, 1,
		func(int) int { return math.MaxInt32 }},
}

// FullMemory is what BytesPerKeyFull measured for one limiter and one case.
type FullMemory struct {
	// BytesPerKey is the live heap after GC per key, key strings included.
	BytesPerKey float64
	// Admitted and Calls count the events admitted and asked for per key:
	// equal for a limiter on the virtual clock, fewer admitted for one that
	// reads the real clock where a policy's budget comes back only with
	// time (10/s). Such a limiter's state has a fixed size per key, so
	// its memory does not depend on them.
	Admitted, Calls int
	// Limiters is how many limiters hold each key: one, or one per policy
	// for a peer under several (Stack).
	Limiters int
}

// memoryStart is where the virtual clock of BytesPerKeyFull starts: a
// midnight, so that the calendar windows of every policy of MemoryCases
// (a second, a minute, an hour, a day) start there too, and FixedWindow
// holds every event of a key in one window.
var memoryStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// BytesPerKeyFull fills c.Keys fresh keys to the full limit of c's longest
// policy, its events spread evenly over that window (one every window/limit,
// which every MemoryCase's shorter policy also admits), and returns the
// live heap after GC per key, key strings counted.
//
// Limiters that take a clock (Peer.Clock) run on a keyrate.ManualClock that
// moves from one event to the next, so that a day's events fill in seconds;
// all of their calls must be admitted. The others read the real clock and
// are filled as far as they admit in the seconds that takes.
func BytesPerKeyFull(p Peer, c MemoryCase) (FullMemory, error) {
	longest := c.Policies[0]
	for _, q := range c.Policies[1:] {
		if q.Window > longest.Window {
			longest = q
		}
	}
	events := longest.Limit
	weight := func(int) int { return 1 }
	if c.Weight != nil {
		events, weight = c.Requests, c.Weight
	}
	every := longest.Window / time.Duration(events)
	for _, q := range c.Policies {
		if spanned := int(q.Window/every) + 1; spanned > q.Limit && q != longest {
			return FullMemory{}, fmt.Errorf("%s: %d events evenly over %v overrun %d per %v", c.Name, events, longest.Window, q.Limit, q.Window)
		}
	}
	clock := keyrate.NewManualClock(memoryStart)
	cfg := Config{Sweep: NoSweep}
	if p.Clock {
		cfg.Now = clock.Now
	}
	l, limiters, err := newUnder(p, cfg, c.Policies)
	if err != nil {
		return FullMemory{}, err
	}
	defer l.Close()
	allow := l.Allow
	wl, weighted := l.(WeightedLimiter)
	if c.Weight != nil && !weighted {
		return FullMemory{}, ErrUnweighted
	}

	before := heapBytes()
	keys := make([]string, c.Keys)
	for i := range keys {
		keys[i] = Key(i)
	}
	admitted := 0
	for e := range events {
		clock.Set(memoryStart.Add(time.Duration(e) * every))
		if c.Weight != nil {
			n := weight(e)
			allow = func(k string) bool { return wl.AllowN(k, n) }
		}
		for _, k := range keys {
			if allow(k) {
				admitted++
			}
		}
	}
	keys = nil // the limiter alone holds them now
	after := heapBytes()
	runtime.KeepAlive(l)
	m := FullMemory{
		BytesPerKey: float64(after-before) / float64(c.Keys),
		Admitted:    admitted / c.Keys,
		Calls:       events,
		Limiters:    limiters,
	}
	if p.Clock && admitted != events*c.Keys {
		return m, fmt.Errorf("%s, %s: %d of %d events admitted on the virtual clock, want all", p.Name, c.Name, admitted, events*c.Keys)
	}
	return m, nil
}

// newUnder returns a limiter from p under policies, and how many limiters
// it is: one, or, for a peer under several policies, a Stack of one per
// policy.
func newUnder(p Peer, cfg Config, policies []keyrate.Policy) (Limiter, int, error) {
	if len(policies) == 1 {
		cfg.Limit, cfg.Window = policies[0].Limit, policies[0].Window
		l, err := p.New(cfg)
		return l, 1, err
	}
	if p.NewPolicies != nil {
		l, err := p.NewPolicies(cfg, policies)
		return l, 1, err
	}
	var s Stack
	for _, q := range policies {
		cfg.Limit, cfg.Window = q.Limit, q.Window
		l, err := p.New(cfg)
		if err != nil {
			s.Close()
			return nil, 0, err
		}
		s = append(s, l)
	}
	return s, len(s), nil
}

// Stack is a peer under several policies: one limiter per policy, each
// asked about every call, so that each holds every key. It admits a call
// when all of them do; one that refuses does not undo what the others
// recorded, which is why keyrate decides several policies in one limiter.
// Only the memory table uses it.
type Stack []Limiter

// Allow asks every limiter and reports whether all of them admitted.
func (s Stack) Allow(key string) bool {
	ok := true
	for _, l := range s {
		ok = l.Allow(key) && ok
	}
	return ok
}

// Exhaust spends key's budget in every limiter.
func (s Stack) Exhaust(key string) {
	for _, l := range s {
		l.Exhaust(key)
	}
}

// Close closes every limiter.
func (s Stack) Close() {
	for _, l := range s {
		l.Close()
	}
}
