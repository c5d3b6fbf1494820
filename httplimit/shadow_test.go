package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// In shadow mode every request is served. Decisions are made and reported
// as when enforcing, refusals with Event.Shadow, and the RateLimit fields
// say what enforcement would: a refusal's r=0 and t, but no Retry-After,
// since the response is no refusal. A refusal records nothing, as when
// enforcing, so the budget moves exactly as it would under enforcement.
func TestShadow(t *testing.T) {
	l, clock := newLimiter(t, 2, time.Minute)
	var decided, limited []middleware.Event
	h := newHandler(t, l, httplimit.WithShadow(),
		httplimit.WithOnDecision(func(e middleware.Event) { decided = append(decided, e) }),
		httplimit.WithOnLimited(func(e middleware.Event) { limited = append(limited, e) }),
		httplimit.WithOnError(func(e middleware.Event) { t.Errorf("OnError: %v", e.Err) }))
	steps := []struct {
		at        time.Duration
		allowed   bool
		rateLimit string
	}{
		{0, true, `"default";r=1;t=60`},
		{10 * time.Second, true, `"default";r=0;t=50`},
		{20 * time.Second, false, `"default";r=0;t=40`}, // would be a 429 with Retry-After 40
		{30 * time.Second, false, `"default";r=0;t=30`},
		// At 60s the event at 0s has left. Had the refusals at 20s and 30s
		// been recorded, the window would still be full.
		{60 * time.Second, true, `"default";r=0;t=10`},
	}
	start := clock.Now()
	for i, s := range steps {
		clock.Set(start.Add(s.at))
		rec := get(h, "/")
		if rec.Code != 200 || rec.Body.String() != "ok" {
			t.Fatalf("step %d: %d %q, want the handler's response", i, rec.Code, rec.Body)
		}
		if got := rec.Header().Get("RateLimit"); got != s.rateLimit || rec.Header().Get("RateLimit-Policy") != `"default";q=2;w=60` {
			t.Fatalf("step %d: RateLimit %q, RateLimit-Policy %q; want %q", i, got, rec.Header().Get("RateLimit-Policy"), s.rateLimit)
		}
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			t.Fatalf("step %d: Retry-After %q on a served response", i, ra)
		}
		if e := decided[len(decided)-1]; e.Decision.Allowed != s.allowed || e.Shadow == s.allowed {
			t.Fatalf("step %d: OnDecision got allowed %v, shadow %v; want %v, %v", i, e.Decision.Allowed, e.Shadow, s.allowed, !s.allowed)
		}
	}
	if len(decided) != 5 || len(limited) != 2 {
		t.Fatalf("%d decisions and %d refusals reported, want 5 and 2", len(decided), len(limited))
	}
	for _, e := range limited {
		if !e.Shadow || e.Decision.Allowed || e.Decision.RetryAfter <= 0 {
			t.Fatalf("OnLimited got %+v, want a shadowed refusal", e)
		}
	}
}

// In shadow mode nothing is refused, errors included: the middleware limits
// no one yet, so serving a request it cannot place lifts no limit. Errors
// still reach OnError, with Shadow set where enforcement would have
// refused (400 for a request that cannot be placed, 503 under FailClosed).
func TestShadowServesErrors(t *testing.T) {
	l, _ := newLimiter(t, 2, time.Minute)
	closed, _ := newLimiter(t, 2, time.Minute)
	closed.Close()
	cases := []struct {
		name   string
		b      keyrate.Backend
		opts   []httplimit.Option
		shadow bool
	}{
		{"empty identity", l, []httplimit.Option{httplimit.WithKeyFunc(func(*http.Request) (string, error) { return "", nil })}, true},
		{"store unavailable, fail-closed", closed, []httplimit.Option{httplimit.WithFailureMode(middleware.FailClosed)}, true},
		{"store unavailable, fail-open", closed, nil, false},
	}
	for _, c := range cases {
		var errs []middleware.Event
		h := newHandler(t, c.b, append(c.opts, httplimit.WithShadow(),
			httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e) }))...)
		rec := get(h, "/")
		if rec.Code != 200 || rec.Body.String() != "ok" {
			t.Errorf("%s: %d %q, want the handler's response", c.name, rec.Code, rec.Body)
		}
		if len(errs) != 1 || errs[0].Err == nil || errs[0].Shadow != c.shadow {
			t.Errorf("%s: OnError got %+v, want one error with Shadow %v", c.name, errs, c.shadow)
		}
	}
}

// Event.Duration is how long the backend took, for decisions and failures
// alike; 0 when the backend was not asked.
func TestEventDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		delay := 30 * time.Millisecond
		b := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
			if key == "slow" {
				<-ctx.Done()
				return keyrate.Decision{}, ctx.Err()
			}
			time.Sleep(delay)
			return keyrate.Decision{Allowed: key == "a", Limit: 1, RetryAfter: time.Second}, nil
		})
		var events []middleware.Event
		record := func(e middleware.Event) { events = append(events, e) }
		h := newHandler(t, b, httplimit.WithTimeBudget(100*time.Millisecond),
			httplimit.WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("Id"), nil }),
			httplimit.WithOnDecision(record), httplimit.WithOnError(record))
		for _, id := range []string{"a", "b", "slow", ""} {
			get(h, "/", "Id", id)
		}
		want := []time.Duration{delay, delay, 100 * time.Millisecond, 0}
		if len(events) != len(want) {
			t.Fatalf("%d events, want %d", len(events), len(want))
		}
		for i, e := range events {
			if e.Duration != want[i] {
				t.Errorf("event %d (%q): Duration %v, want %v", i, e.Identity, e.Duration, want[i])
			}
		}
	})
}
