package redislimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestResolutionNeverOverLimit sends random requests at random instants to
// limiters with a resolution, and holds every answer against the exact
// rule over the instants the requests were really admitted at: no window
// of those instants holds more than its policy's limit; every refusal is
// one the exact rule would make over a window longer by the resolution (a
// refusal comes at most a resolution early); and each policy's RetryAfter
// is at least the exact rule's and at most a resolution more.
func TestResolutionNeverOverLimit(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(123457 * time.Microsecond)
	s := time.Second
	for seq, c := range []struct {
		res      time.Duration
		policies []keyrate.Policy
	}{
		{s, []keyrate.Policy{{Limit: 10, Window: 10 * s}}},
		{250 * time.Millisecond, []keyrate.Policy{{Name: "second", Limit: 3, Window: s}, {Name: "minute", Limit: 20, Window: time.Minute}}},
		{time.Minute, []keyrate.Policy{{Limit: 50, Window: time.Minute}}},
		{7 * s, []keyrate.Policy{{Name: "a", Limit: 5, Window: 10 * s}, {Name: "b", Limit: 12, Window: 45 * s}}},
	} {
		clock := keyrate.NewManualClock(start)
		l, err := redislimit.NewPolicies(client, c.policies, redislimit.WithPrefix(uniquePrefix()),
			redislimit.WithClock(clock), redislimit.WithResolution(c.res))
		if err != nil {
			t.Fatal(err)
		}
		type admitted struct {
			at time.Time
			n  int
		}
		var log []admitted
		// held returns the weight admitted in (now-w, now].
		held := func(now time.Time, w time.Duration) (h int) {
			for _, e := range log {
				if e.at.After(now.Add(-w)) && !e.at.After(now) {
					h += e.n
				}
			}
			return h
		}
		shortest := c.policies[0].Window
		for _, p := range c.policies {
			shortest = min(shortest, p.Window)
		}
		rng := rand.New(rand.NewPCG(uint64(seq), 5))
		for step := range 400 {
			clock.Advance(time.Duration(rng.Int64N(int64(shortest / 5))))
			now, n := clock.Now(), 1+rng.IntN(3)
			d := mustTake(t, l, "k", n)
			refusedLonger := false
			for i, p := range c.policies {
				part := d.Policies()[i]
				// The exact rule's RetryAfter over the admitted instants.
				var exact time.Duration
				if need := held(now, p.Window) + n - p.Limit; need > 0 {
					for _, e := range log {
						if e.at.After(now.Add(-p.Window)) {
							if need -= e.n; need <= 0 {
								exact = e.at.Add(p.Window).Sub(now)
								break
							}
						}
					}
				}
				if part.RetryAfter < exact || part.RetryAfter > exact+c.res {
					t.Fatalf("resolution %v, step %d, policy %q: RetryAfter %v, the exact rule's %v; want it at most %v more",
						c.res, step, p.Name, part.RetryAfter, exact, c.res)
				}
				if held(now, p.Window+c.res)+n > p.Limit {
					refusedLonger = true
				}
			}
			if d.Allowed {
				log = append(log, admitted{now, n})
			} else if !refusedLonger {
				t.Fatalf("resolution %v, step %d: refused %+v, which no policy would refuse over a window %v longer", c.res, step, d, c.res)
			}
		}
		for _, p := range c.policies {
			for _, e := range log {
				if h := held(e.at, p.Window); h > p.Limit {
					t.Fatalf("resolution %v, policy %q: %d admitted in the window ending at +%v, over the limit of %d",
						c.res, p.Name, h, e.at.Sub(start), p.Limit)
				}
			}
		}
	}
}

// TestResolutionBoundsEntries admits 5,000 events in under a minute at
// five per second's resolution: the log holds at most window/resolution + 2
// entries, whatever the limit, and every event still counts.
func TestResolutionBoundsEntries(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const res = 200 * time.Millisecond
	l := newLimiter(t, client, 5000, time.Minute, redislimit.WithClock(clock), redislimit.WithResolution(res))
	for i := range 5000 {
		if d := mustTake(t, l, "k", 1); !d.Allowed || d.Remaining != 4999-i {
			t.Fatalf("event %d: %+v", i, d)
		}
		clock.Advance(11 * time.Millisecond)
	}
	g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	if max := int(time.Minute/res) + 2; len(g.Entries) > max || g.Held() != 5000 {
		t.Fatalf("log of %d entries holding %d, want at most %d holding 5000", len(g.Entries), g.Held(), max)
	}
	for _, e := range g.Entries {
		if e.At%res.Microseconds() != 0 {
			t.Fatalf("entry at %dµs, want a multiple of the resolution", e.At)
		}
	}
}

// TestResolutionErrors checks that a resolution must be positive, in whole
// microseconds and at most the shortest window of every tier (New,
// NewPolicies, WithTiers, SetTier), and applies to the sliding log only.
func TestResolutionErrors(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	day := keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
	sec := keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	tier := func(string) string { return "" }
	for _, c := range []struct {
		name     string
		policies []keyrate.Policy
		opts     []redislimit.Option
		field    string // what the error names
	}{
		{"zero", []keyrate.Policy{day}, []redislimit.Option{redislimit.WithResolution(0)}, "resolution"},
		{"negative", []keyrate.Policy{day}, []redislimit.Option{redislimit.WithResolution(-time.Second)}, "resolution"},
		{"fractional microseconds", []keyrate.Policy{day}, []redislimit.Option{redislimit.WithResolution(1500 * time.Nanosecond)}, "resolution"},
		{"longer than a window", []keyrate.Policy{sec, day}, []redislimit.Option{redislimit.WithResolution(time.Minute)}, "policies[0].Window"},
		{"longer than a tier's window", []keyrate.Policy{day}, []redislimit.Option{redislimit.WithResolution(time.Minute),
			redislimit.WithTiers(tier, map[string][]keyrate.Policy{"pro": {day, sec}})}, `tiers["pro"][1].Window`},
		{"fixed window", []keyrate.Policy{day}, []redislimit.Option{redislimit.WithResolution(time.Second),
			redislimit.WithAlgorithm(keyrate.FixedWindow)}, "fixed window"},
		{"GCRA", []keyrate.Policy{day}, []redislimit.Option{redislimit.WithResolution(time.Second),
			redislimit.WithAlgorithm(keyrate.GCRA)}, "GCRA"},
	} {
		l, err := redislimit.NewPolicies(client, c.policies, c.opts...)
		if !errors.Is(err, keyrate.ErrConfig) || l != nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: NewPolicies = %v, %v; want an error wrapping keyrate.ErrConfig naming %s", c.name, l, err, c.field)
		}
	}
	if _, err := redislimit.New(client, 5, 2*time.Second, redislimit.WithResolution(3*time.Second)); !errors.Is(err, keyrate.ErrConfig) ||
		!strings.Contains(err.Error(), "window is 2s") {
		t.Errorf("New with a resolution over its window: %v, want an error wrapping keyrate.ErrConfig naming the window", err)
	}

	// A resolution equal to the shortest window is allowed; SetTier holds
	// every tier to it.
	l, err := redislimit.NewPolicies(client, []keyrate.Policy{sec, day}, redislimit.WithResolution(time.Second),
		redislimit.WithTiers(tier, map[string][]keyrate.Policy{"pro": {sec}}))
	if err != nil {
		t.Fatal(err)
	}
	short := keyrate.Policy{Limit: 1, Window: 500 * time.Millisecond}
	if err := l.SetTier("pro", []keyrate.Policy{short}); !errors.Is(err, keyrate.ErrConfig) || !strings.Contains(err.Error(), `tiers["pro"][0].Window`) {
		t.Errorf("SetTier to a window under the resolution: %v, want an error wrapping keyrate.ErrConfig", err)
	}
	if err := l.SetTier("", []keyrate.Policy{day, {Name: "short", Limit: 1, Window: short.Window}}); !errors.Is(err, keyrate.ErrConfig) || !strings.Contains(err.Error(), "policies[1].Window") {
		t.Errorf("SetTier of the default tier to a window under the resolution: %v, want an error wrapping keyrate.ErrConfig", err)
	}
	if got := l.Policies(); len(got) != 2 || got[0] != sec {
		t.Errorf("a refused SetTier changed the policies to %v", got)
	}
	if err := l.SetTier("pro", []keyrate.Policy{{Limit: 3, Window: time.Second}}); err != nil {
		t.Errorf("SetTier to a window of the resolution: %v", err)
	}
}
