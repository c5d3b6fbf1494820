package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// zone loads a time zone of the system's database.
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarBoundaries spends a quota of 3 per period at an instant of
// each period that tests a boundary, then checks, through decisions on a
// manual clock, that the key is refused with RetryAfter, ResetAfter and
// RefillAfter all the time until the period's end (local midnight of its
// boundary day, written out by hand), still refused a microsecond before
// it, and admitted again at that instant, with a fresh count.
func TestCalendarBoundaries(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ny, tokyo := zone(t, "America/New_York"), zone(t, "Asia/Tokyo")
	for _, c := range []struct {
		name    string
		cal     keyrate.Calendar
		at, end time.Time
	}{
		// Billing on the 31st: February 2031 has 28 days, so the period
		// from January 31st turns at the start of February 28th.
		{"a short month's last day", keyrate.Monthly(31, time.UTC),
			time.Date(2031, 2, 10, 12, 0, 0, 0, time.UTC), time.Date(2031, 2, 28, 0, 0, 0, 0, time.UTC)},
		{"a leap year", keyrate.Monthly(30, time.UTC),
			time.Date(2032, 2, 10, 12, 0, 0, 0, time.UTC), time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC)},
		// March 9th 2031 lasts 23 hours in New York, November 2nd 25.
		{"spring forward in New York", keyrate.Daily(ny),
			time.Date(2031, 3, 9, 0, 30, 0, 0, ny), time.Date(2031, 3, 10, 0, 0, 0, 0, ny)},
		{"fall back in New York", keyrate.Daily(ny),
			time.Date(2031, 11, 2, 0, 30, 0, 0, ny), time.Date(2031, 11, 3, 0, 0, 0, 0, ny)},
		{"a week starting Sunday", keyrate.Weekly(time.Sunday, ny),
			time.Date(2031, 1, 8, 9, 0, 0, 0, ny), time.Date(2031, 1, 12, 0, 0, 0, 0, ny)},
		{"Tokyo's midnight", keyrate.Daily(tokyo),
			time.Date(2031, 6, 1, 10, 0, 0, 0, time.UTC), time.Date(2031, 6, 1, 15, 0, 0, 0, time.UTC)},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := keyrate.NewManualClock(c.at)
			p := keyrate.Policy{Limit: 3, Calendar: c.cal}
			l := newPolicies(t, client, []keyrate.Policy{p}, redislimit.WithClock(clock))
			if d := mustTake(t, l, "k", 2); !d.Allowed || d.Remaining != 1 || d.ResetAfter != c.end.Sub(c.at) {
				t.Fatalf("first take: %+v, want admitted, 1 left, reset in %v", d, c.end.Sub(c.at))
			}
			mustTake(t, l, "k", 1)
			left := c.end.Sub(c.at)
			if d := mustTake(t, l, "k", 1); d.Allowed || d.Remaining != 0 || d.RetryAfter != left || d.ResetAfter != left || d.RefillAfter != left {
				t.Fatalf("spent at %v: %+v, want refused with 0 left, retry, reset and refill in %v", c.at, d, left)
			}
			clock.Set(c.end.Add(-time.Microsecond))
			if d := mustTake(t, l, "k", 1); d.Allowed || d.RetryAfter != time.Microsecond {
				t.Fatalf("a microsecond before %v: %+v, want refused, retry in 1µs", c.end, d)
			}
			clock.Set(c.end)
			if d := mustTake(t, l, "k", 3); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("at %v, the next period's start: %+v, want a fresh quota of 3", c.end, d)
			}
		})
	}
}

// TestCalendarReplicas has 64 goroutines on two Limiters (replicas) sharing
// one Redis reserve 600 each under 10,000 a month, on the server's clock:
// exactly 16 get through, as 16 x 600 fit and 17 do not.
func TestCalendarReplicas(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	policies := []keyrate.Policy{{Limit: 10_000, Calendar: keyrate.Monthly(1, time.UTC)}}
	prefix := redislimit.WithPrefix(uniquePrefix())
	var replicas [2]*redislimit.Limiter
	for i := range replicas {
		l, err := redislimit.NewPolicies(client, policies, prefix, redislimit.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = l
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			d, err := replicas[i%2].TakeContext(context.Background(), "tenant", 600)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 16 {
		t.Fatalf("%d reservations of 600 admitted under 10,000 a month, want 16", got)
	}
	if d := mustTake(t, replicas[0], "tenant", 400); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the last 400: %+v, want admitted with 0 left", d)
	}
}

// TestCalendarRefundLaterPeriod refunds a decision within its period,
// which gives back, and after the period turned, which gives nothing back
// to the new period: under a calendar alone the refund finds nothing, and
// beside a sliding window still holding the events, only the window gets
// them back.
func TestCalendarRefundLaterPeriod(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	day := keyrate.Policy{Name: "day", Limit: 10, Calendar: keyrate.Daily(time.UTC)}
	week := keyrate.Policy{Name: "week", Limit: 100, Window: 7 * 24 * time.Hour}
	start := time.Date(2031, 5, 6, 22, 0, 0, 0, time.UTC)

	t.Run("calendar alone", func(t *testing.T) {
		clock := keyrate.NewManualClock(start)
		l := newPolicies(t, client, []keyrate.Policy{day}, redislimit.WithClock(clock))
		a := mustTakeReceipt(t, l, "k", 4)
		if err := l.RefundN(ctx, "k", &a, 1); err != nil {
			t.Fatalf("refund within the period: %v", err)
		}
		if d := mustTake(t, l, "k", 0); d.Remaining != 7 {
			t.Fatalf("after a refund of 1 of 4: %d left, want 7", d.Remaining)
		}
		clock.Set(start.Add(2 * time.Hour)) // the next day
		mustTake(t, l, "k", 5)
		if err := l.Refund(ctx, "k", &a); !errors.Is(err, keyrate.ErrNothingToRefund) {
			t.Fatalf("refund in a later period: %v, want ErrNothingToRefund", err)
		}
		if d := mustTake(t, l, "k", 0); d.Remaining != 5 {
			t.Fatalf("the new period after a refund of the old one's decision: %d left, want 5", d.Remaining)
		}
	})
	t.Run("beside a sliding window", func(t *testing.T) {
		clock := keyrate.NewManualClock(start)
		l := newPolicies(t, client, []keyrate.Policy{day, week}, redislimit.WithClock(clock))
		a := mustTakeReceipt(t, l, "k", 4)
		clock.Set(start.Add(2 * time.Hour))
		mustTake(t, l, "k", 5)
		if err := l.Refund(ctx, "k", &a); err != nil {
			t.Fatalf("refund in a later period, its events still in the week: %v", err)
		}
		d := mustTake(t, l, "k", 0)
		if ps := d.Policies(); ps[0].Remaining != 5 || ps[1].Remaining != 95 {
			t.Fatalf("after the refund: day %d left, week %d, want 5 and 95", ps[0].Remaining, ps[1].Remaining)
		}
	})
}

// TestCalendarServerClockPicksPeriod computes the calendar's boundaries
// on a client clock a few minutes off the instant the script decides at
// (the server's): the script counts in the server's period either way,
// and a client off by more than a period gets an error, not a wrong count.
func TestCalendarServerClockPicksPeriod(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	midnight := time.Date(2031, 7, 1, 0, 0, 0, 0, time.UTC)
	p := keyrate.Policy{Limit: 2, Calendar: keyrate.Daily(time.UTC)}
	for _, c := range []struct {
		name           string
		server, client time.Duration // from midnight
		fresh          bool          // the server is in the new day
	}{
		{"client behind, server in the new day", 30 * time.Second, -90 * time.Second, true},
		{"client ahead, server in the old day", -30 * time.Second, 90 * time.Second, false},
		{"both in the new day", 30 * time.Second, 90 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := keyrate.NewManualClock(midnight.Add(-time.Hour))
			l := newPolicies(t, client, []keyrate.Policy{p}, redislimit.WithClock(clock))
			mustTake(t, l, "k", 2) // the old day spent
			clock.Set(midnight.Add(c.server))
			redislimit.SetCalendarClock(l, func() time.Time { return midnight.Add(c.client) })
			d := mustTake(t, l, "k", 1)
			if d.Allowed != c.fresh {
				t.Fatalf("server at midnight%+v, client at midnight%+v: %+v, want admitted %v", c.server, c.client, d, c.fresh)
			}
			want := midnight.Sub(midnight.Add(c.server)) // the old day's end
			if c.fresh {
				want += 24 * time.Hour
			}
			if d.ResetAfter != want {
				t.Fatalf("ResetAfter %v, want %v: the server's period's end", d.ResetAfter, want)
			}
		})
	}
	t.Run("client a period off", func(t *testing.T) {
		clock := keyrate.NewManualClock(midnight)
		l := newPolicies(t, client, []keyrate.Policy{p}, redislimit.WithClock(clock))
		redislimit.SetCalendarClock(l, func() time.Time { return midnight.Add(-49 * time.Hour) })
		_, err := l.TakeContext(context.Background(), "k", 1)
		if err == nil || !strings.Contains(err.Error(), "outside the calendar periods") {
			t.Fatalf("a client two days behind: %v, want the clocks' error", err)
		}
	})
}

// TestCalendarMemoryAndExpiry reports MEMORY USAGE for a key counting a
// monthly quota alone and beside a sliding policy, and checks that the key
// lives until its month ends, not 1.5 minutes as its sliding minute
// alone would keep it.
func TestCalendarMemoryAndExpiry(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 20, 0, 0, 0, 0, time.UTC)
	end := time.Date(2031, 2, 1, 0, 0, 0, 0, time.UTC)
	month := keyrate.Policy{Name: "month", Limit: 1_000_000, Calendar: keyrate.Monthly(1, time.UTC)}
	minute := keyrate.Policy{Name: "minute", Limit: 10_000, Window: time.Minute}
	hour := keyrate.Policy{Name: "hour", Limit: 1000, Window: time.Hour}
	for _, c := range []struct {
		name     string
		policies []keyrate.Policy
		takes, n int
		max      int64
	}{
		{"calendar alone", []keyrate.Policy{month}, 3, 1000, 250},
		{"beside a sliding minute", []keyrate.Policy{minute, month}, 3, 1000, 250},
		{"beside a sliding hour holding 1,000 events", []keyrate.Policy{hour, month}, 1000, 1, 10_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := keyrate.NewManualClock(now)
			l := newPolicies(t, client, c.policies, redislimit.WithClock(clock))
			for range c.takes {
				if d := mustTake(t, l, "k", c.n); !d.Allowed {
					t.Fatalf("refused: %+v", d)
				}
				clock.Advance(time.Second)
			}
			used, err := client.MemoryUsage(ctx, l.StoreKey("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("MEMORY USAGE of a key counting a month's %d events, %s: %d bytes", c.takes*c.n, c.name, used)
			if used > c.max {
				t.Fatalf("MEMORY USAGE %d bytes, want at most %d", used, c.max)
			}
			ttl, err := client.PTTL(ctx, l.StoreKey("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < end.Sub(clock.Now()) {
				t.Fatalf("the key expires in %v, before its month ends in %v", ttl, end.Sub(now))
			}
			g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k"))
			if err != nil {
				t.Fatal(err)
			}
			want := []redislimit.CalendarCounter{{ID: redislimit.CalendarID(month.Calendar), Count: uint32(c.takes * c.n), End: end.UnixMicro()}}
			if fmt.Sprint(g.Counters) != fmt.Sprint(want) || g.Version != 2 {
				t.Fatalf("log version %d, counters %+v, want 2 and %+v", g.Version, g.Counters, want)
			}
		})
	}
}

// TestCalendarMigratesLog decides a key under a sliding policy alone, which
// keeps a log of version 1, then under a tier that adds a calendar: the
// log moves to version 2 at that admission, its entries kept and still
// counted, and back under the sliding policy alone it is read as before.
func TestCalendarMigratesLog(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(time.Date(2031, 1, 20, 0, 0, 0, 0, time.UTC))
	hour := keyrate.Policy{Name: "hour", Limit: 100, Window: time.Hour}
	month := keyrate.Policy{Name: "month", Limit: 50, Calendar: keyrate.Monthly(1, time.UTC)}
	l := newPolicies(t, client, []keyrate.Policy{hour}, redislimit.WithClock(clock))
	for range 10 { // enough entries for a ring
		mustTake(t, l, "k", 3)
		clock.Advance(time.Second)
	}
	if g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k")); err != nil || g.Version != 1 || g.Held() != 30 {
		t.Fatalf("before: %+v, %v; want version 1 holding 30", g, err)
	}
	if err := l.SetTier("", []keyrate.Policy{hour, month}); err != nil {
		t.Fatal(err)
	}
	d := mustTake(t, l, "k", 5)
	if ps := d.Policies(); !d.Allowed || ps[0].Remaining != 65 || ps[1].Remaining != 45 {
		t.Fatalf("under the calendar too: %+v, want hour 65 left and month 45", ps)
	}
	g, err := redislimit.ReadLog(ctx, client, l.StoreKey("k"))
	if err != nil || g.Version != 2 || g.Held() != 35 || len(g.Counters) != 1 || g.Counters[0].Count != 5 {
		t.Fatalf("after: %+v, %v; want version 2 holding 35, a counter of 5", g, err)
	}
	for range 20 {
		clock.Advance(time.Second)
		mustTake(t, l, "k", 1)
	}
	if err := l.SetTier("", []keyrate.Policy{hour}); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, l, "k", 1); !d.Allowed || d.Remaining != 100-56 {
		t.Fatalf("back under the hour alone: %+v, want 44 left", d)
	}
	if d := mustTake(t, l, "k", 0); d.Remaining != 44 {
		t.Fatalf("%+v", d)
	}
	if err := l.SetTier("", []keyrate.Policy{hour, month}); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, l, "k", 0); d.Policies()[1].Remaining != 25 {
		t.Fatalf("the month's count after a tier without it: %+v, want 25 left", d.Policies())
	}
}

// TestCalendarAtomic refuses by a calendar policy and by a sliding one, in
// TakeContext and TakeAll: a request one policy or key refuses counts
// against none.
func TestCalendarAtomic(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := keyrate.NewManualClock(time.Date(2031, 1, 20, 0, 0, 0, 0, time.UTC))
	day := keyrate.Policy{Name: "day", Limit: 5, Calendar: keyrate.Daily(time.UTC)}
	second := keyrate.Policy{Name: "second", Limit: 3, Window: time.Second}
	l := newPolicies(t, client, []keyrate.Policy{second, day}, redislimit.WithClock(clock))
	mustTake(t, l, "a", 3)
	if d := mustTake(t, l, "a", 1); d.Allowed || d.Policy != "second" {
		t.Fatalf("%+v, want refused by the second", d)
	}
	clock.Advance(time.Second)
	if d := mustTake(t, l, "a", 3); d.Allowed || d.Policy != "day" || d.Policies()[0].Remaining != 3 {
		t.Fatalf("%+v, want refused by the day, the second's room untouched", d)
	}
	if _, ok, err := l.TakeAll(ctx, []keyrate.Hit{{Key: "a", Weight: 2}, {Key: "b", Weight: 2}}); err != nil || !ok {
		t.Fatalf("TakeAll within every budget: %v, %v", ok, err)
	}
	ds, ok, err := l.TakeAll(ctx, []keyrate.Hit{{Key: "b", Weight: 1}, {Key: "a", Weight: 1}})
	if err != nil || ok || ds[1].Policy != "day" {
		t.Fatalf("TakeAll over a's day: %v, %v, %+v", ok, err, ds)
	}
	if d := mustTake(t, l, "b", 0); d.Policies()[1].Remaining != 3 {
		t.Fatalf("b after the refused TakeAll: %+v, want 3 left of its day", d.Policies())
	}
}

// TestCalendarTiers moves a key between tiers of one calendar and another:
// the count carries over under the same calendar, a calendar the key was
// not under starts from 0, and SetTier changes the limit under the count.
func TestCalendarTiers(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	clock := keyrate.NewManualClock(time.Date(2031, 1, 20, 12, 0, 0, 0, time.UTC))
	month := keyrate.Monthly(1, time.UTC)
	var plan atomic.Value
	plan.Store("")
	l := newPolicies(t, client, []keyrate.Policy{{Limit: 10, Calendar: month}}, redislimit.WithClock(clock),
		redislimit.WithTiers(func(string) string { return plan.Load().(string) }, map[string][]keyrate.Policy{
			"pro":   {{Limit: 100, Calendar: month}},
			"daily": {{Limit: 4, Calendar: keyrate.Daily(time.UTC)}},
		}))
	mustTake(t, l, "k", 8)
	plan.Store("pro")
	if d := mustTake(t, l, "k", 1); d.Remaining != 91 {
		t.Fatalf("pro after 8 under the free plan: %+v, want 91 left", d)
	}
	plan.Store("daily")
	if d := mustTake(t, l, "k", 1); d.Remaining != 3 {
		t.Fatalf("a daily quota the key was not under: %+v, want 3 left", d)
	}
	plan.Store("")
	if d := mustTake(t, l, "k", 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("free after 9 this month: %+v, want the 10th admitted", d)
	}
	if d := mustTake(t, l, "k", 1); d.Allowed {
		t.Fatalf("free after 10 this month: %+v, want refused", d)
	}
	if err := l.SetTier("", []keyrate.Policy{{Limit: 20, Calendar: month}}); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, l, "k", 1); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("free raised to 20: %+v, want 9 left", d)
	}
}

// TestCalendarConfig checks what a calendar policy is refused with.
func TestCalendarConfig(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	month := keyrate.Policy{Limit: 10, Calendar: keyrate.Monthly(1, time.UTC)}
	for _, c := range []struct {
		name     string
		policies []keyrate.Policy
		opts     []redislimit.Option
		want     string
	}{
		{"Monthly(0)", []keyrate.Policy{{Limit: 1, Calendar: keyrate.Monthly(0, time.UTC)}}, nil, "policies[0].Calendar is monthly on day 0"},
		{"Monthly(32)", []keyrate.Policy{{Limit: 1, Calendar: keyrate.Monthly(32, time.UTC)}}, nil, "policies[0].Calendar is monthly on day 32"},
		{"Weekly(7)", []keyrate.Policy{{Limit: 1, Calendar: keyrate.Weekly(7, time.UTC)}}, nil, "want a time.Weekday"},
		{"nil location", []keyrate.Policy{{Limit: 1, Calendar: keyrate.Daily(nil)}}, nil, "nil location"},
		{"a window and a calendar", []keyrate.Policy{{Limit: 1, Window: time.Hour, Calendar: keyrate.Daily(time.UTC)}}, nil, "want one of them"},
		{"a limit of 0", []keyrate.Policy{{Limit: 0, Calendar: keyrate.Daily(time.UTC)}}, nil, "Limit is 0"},
		{"FixedWindow", []keyrate.Policy{month}, []redislimit.Option{redislimit.WithAlgorithm(keyrate.FixedWindow)}, "needs the sliding log, not fixed window"},
		{"GCRA", []keyrate.Policy{month}, []redislimit.Option{redislimit.WithAlgorithm(keyrate.GCRA)}, "needs the sliding log, not GCRA"},
		{"leases", []keyrate.Policy{month}, []redislimit.Option{redislimit.WithLeases(10 * time.Millisecond)}, "leases cannot decide exactly"},
		{"a tier under GCRA", []keyrate.Policy{{Limit: 1, Window: time.Second}}, []redislimit.Option{redislimit.WithAlgorithm(keyrate.GCRA),
			redislimit.WithTiers(func(string) string { return "" }, map[string][]keyrate.Policy{"pro": {month}})}, `tiers["pro"] has a calendar policy`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := redislimit.NewPolicies(client, c.policies, c.opts...)
			if !errors.Is(err, keyrate.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want ErrConfig saying %q", err, c.want)
			}
		})
	}
	l, err := redislimit.NewPolicies(client, []keyrate.Policy{{Limit: 1, Window: time.Second}}, redislimit.WithPrefix(uniquePrefix()),
		redislimit.WithLeases(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetTier("", []keyrate.Policy{month}); !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("SetTier of a calendar under leases: %v, want ErrConfig", err)
	}
	g, err := redislimit.NewPolicies(client, []keyrate.Policy{{Limit: 1, Window: time.Second}}, redislimit.WithAlgorithm(keyrate.GCRA))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetTier("", []keyrate.Policy{month}); !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("SetTier of a calendar under GCRA: %v, want ErrConfig", err)
	}
	if _, err := redislimit.NewPolicies(client, []keyrate.Policy{{Name: "m", Limit: 10, Calendar: keyrate.Daily(time.UTC)}, {Name: "x", Limit: 1, Window: time.Minute}},
		redislimit.WithResolution(time.Second)); err != nil {
		t.Fatalf("a calendar beside a resolution: %v", err)
	}
}
