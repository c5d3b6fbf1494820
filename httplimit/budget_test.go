package httplimit_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// boundedStore stands in for a networked backend that bounds its own calls,
// as the Redis backend does: each call takes delay, or fails when that is
// past its budget.
type boundedStore struct {
	budget, delay time.Duration
	deadlines     *[]bool // whether each call's context had a deadline
}

var errOwnBudget = errors.New("store: call exceeded the store's own budget")

func (s boundedStore) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	_, ok := ctx.Deadline()
	*s.deadlines = append(*s.deadlines, ok)
	if s.delay > s.budget {
		time.Sleep(s.budget)
		return keyrate.Decision{}, errOwnBudget
	}
	time.Sleep(s.delay)
	return keyrate.Decision{Allowed: true, Limit: 3, Remaining: 2, RefillAfter: time.Minute, ResetAfter: time.Minute}, nil
}
func (s boundedStore) TimeBudget() time.Duration { return s.budget }
func (s boundedStore) Policies() []keyrate.Policy {
	return []keyrate.Policy{{Limit: 3, Window: time.Minute}}
}

func (boundedStore) Tiered() bool { return false }

// In front of a backend with its own budget, the middleware adds none: a
// call of 400ms, past the middleware's default 250ms, inside the store's
// 500ms, is waited for, on the request's goroutine with the request's
// context; a call past the store's budget fails when the store says so.
func TestBoundedBackendRunsOneBudget(t *testing.T) {
	cases := []struct {
		name  string
		delay time.Duration
		took  time.Duration
		code  map[middleware.FailureMode]int
	}{
		{"inside its budget", 400 * time.Millisecond, 400 * time.Millisecond, map[middleware.FailureMode]int{middleware.FailOpen: 200, middleware.FailClosed: 200}},
		{"past its budget", time.Second, 500 * time.Millisecond, map[middleware.FailureMode]int{middleware.FailOpen: 200, middleware.FailClosed: 503}},
	}
	for _, c := range cases {
		for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
			synctest.Test(t, func(t *testing.T) {
				var deadlines []bool
				var errs []error
				store := boundedStore{budget: 500 * time.Millisecond, delay: c.delay, deadlines: &deadlines}
				h := newHandler(t, store, httplimit.WithFailureMode(mode),
					httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) }))
				start := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				took := time.Since(start)
				if took != c.took || rec.Code != c.code[mode] {
					t.Fatalf("%s, mode %d: %d after %v, want %d after %v", c.name, mode, rec.Code, took, c.code[mode], c.took)
				}
				if len(deadlines) != 1 || deadlines[0] {
					t.Fatalf("%s: calls with a deadline: %v, want one call under the request's own context", c.name, deadlines)
				}
				if c.delay > store.budget && (len(errs) != 1 || !errors.Is(errs[0], errOwnBudget)) {
					t.Fatalf("%s: reported %v, want the store's own error", c.name, errs)
				}
				if c.delay <= store.budget && (len(errs) != 0 || rec.Header().Get("RateLimit") != `"default";r=2;t=60`) {
					t.Fatalf("%s: errors %v, RateLimit %q", c.name, errs, rec.Header().Get("RateLimit"))
				}
			})
		}
	}
}

// WithTimeBudget is for backends the middleware must bound itself: for a
// Bounded one, the in-process limiter included (it never waits), it would
// be a second budget, or look like one, so New refuses it.
func TestTimeBudgetOnlyWhereTheMiddlewareEnforcesIt(t *testing.T) {
	store := boundedStore{budget: 500 * time.Millisecond, deadlines: new([]bool)}
	l, _ := newLimiter(t, 3, time.Minute)
	for name, b := range map[string]keyrate.Backend{"a store with its own budget": store, "the in-process limiter": l} {
		if _, err := httplimit.New(b, httplimit.WithTimeBudget(100*time.Millisecond)); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("%s with WithTimeBudget: %v, want ErrConfig", name, err)
		}
		if _, err := httplimit.New(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	unbounded := backend.Func(l.TakeContext)
	if _, err := httplimit.New(unbounded, httplimit.WithTimeBudget(100*time.Millisecond)); err != nil {
		t.Errorf("a backend that is not Bounded, with WithTimeBudget: %v", err)
	}
}
