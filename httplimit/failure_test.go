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

var errStore = errors.New("store unreachable")

// Backends that fail in the ways a networked store does. Each blocks, if at
// all, until release is closed, so the test can end its goroutines.
func failingBackends(release <-chan struct{}) map[string]backend.Func {
	return map[string]backend.Func{
		"errors": func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
			return keyrate.Decision{}, errStore
		},
		"hangs ignoring its context": func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
			<-release
			return keyrate.Decision{Allowed: true, Limit: 3, Remaining: 2}, nil
		},
		"hangs until its context ends": func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
			select {
			case <-ctx.Done():
				return keyrate.Decision{}, ctx.Err()
			case <-release:
				return keyrate.Decision{Allowed: true}, nil
			}
		},
	}
}

func TestBackendFailure(t *testing.T) {
	const budget = 100 * time.Millisecond
	modes := map[string]middleware.FailureMode{"fail-open": middleware.FailOpen, "fail-closed": middleware.FailClosed}
	for mname, mode := range modes {
		for bname := range failingBackends(nil) {
			t.Run(mname+"/"+bname, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					release := make(chan struct{})
					defer func() { close(release); synctest.Wait() }()
					b := failingBackends(release)[bname]
					var reported []error
					m, err := httplimit.New(b,
						httplimit.WithTimeBudget(budget),
						httplimit.WithFailureMode(mode),
						httplimit.WithOnError(func(e middleware.Event) { reported = append(reported, e.Err) }),
						httplimit.WithOnDecision(func(e middleware.Event) { t.Errorf("OnDecision called for a failure") }),
					)
					if err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					rec := httptest.NewRecorder()
					m.Handler(okHandler).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
					took := time.Since(start)

					hangs := bname != "errors"
					if wantTook := map[bool]time.Duration{true: budget, false: 0}[hangs]; took != wantTook {
						t.Errorf("request took %v, want %v", took, wantTook)
					}
					if len(reported) != 1 {
						t.Fatalf("%d errors reported, want 1", len(reported))
					}
					if hangs && !(errors.Is(reported[0], middleware.ErrBudgetExceeded) && errors.Is(reported[0], context.DeadlineExceeded)) {
						t.Errorf("reported %v, want ErrBudgetExceeded and DeadlineExceeded", reported[0])
					}
					if !hangs && !errors.Is(reported[0], errStore) {
						t.Errorf("reported %v, want the backend's error", reported[0])
					}
					if rec.Header().Get("RateLimit") != "" || rec.Header().Get("Retry-After") != "" {
						t.Errorf("fields sent without a decision: %v", rec.Header())
					}
					switch mode {
					case middleware.FailOpen:
						if rec.Code != 200 || rec.Body.String() != "ok" {
							t.Errorf("fail-open: %d %q, want the handler's 200", rec.Code, rec.Body)
						}
					case middleware.FailClosed:
						if rec.Code != 503 {
							t.Errorf("fail-closed: %d, want 503", rec.Code)
						}
						if p := decodeProblem(t, rec); p.Type != reducedCapacity || p.Violated != nil {
							t.Errorf("fail-closed: problem %+v, want the draft's temporary-reduced-capacity, naming no policy", p)
						}
					}
				})
			})
		}
	}
}

// A backend that answers within the budget is waited for, goroutine or not.
func TestSlowBackendWithinBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
			time.Sleep(249 * time.Millisecond)
			return keyrate.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Minute}, nil
		})
		m, err := httplimit.New(b, httplimit.WithFailureMode(middleware.FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rec := httptest.NewRecorder()
		m.Handler(okHandler).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if took := time.Since(start); rec.Code != 200 || took != 249*time.Millisecond {
			t.Fatalf("%d after %v, want 200 after 249ms (inside the default 250ms budget)", rec.Code, took)
		}
		if rec.Header().Get("RateLimit") != `"default";r=2;t=60` {
			t.Fatalf("RateLimit = %q", rec.Header().Get("RateLimit"))
		}
	})
}

// A client that goes away is reported as its own cancellation, not as the
// backend's fault.
func TestClientGoneIsNotBudgetExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer func() { close(release); synctest.Wait() }()
		var reported error
		m, err := httplimit.New(failingBackends(release)["hangs ignoring its context"],
			httplimit.WithOnError(func(e middleware.Event) { reported = e.Err }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		start := time.Now()
		m.Handler(okHandler).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if took := time.Since(start); took != 10*time.Millisecond || !errors.Is(reported, context.Canceled) || errors.Is(reported, middleware.ErrBudgetExceeded) {
			t.Fatalf("after %v reported %v; want context.Canceled after 10ms", took, reported)
		}
	})
}

// The in-process limiter is called inline: a closed one fails at once with
// keyrate.ErrClosed, answered per the failure mode.
func TestClosedLocalLimiter(t *testing.T) {
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		l, _ := newLimiter(t, 3, time.Minute)
		l.Close()
		var reported error
		h := newHandler(t, l, httplimit.WithFailureMode(mode),
			httplimit.WithOnError(func(e middleware.Event) { reported = e.Err }))
		rec := get(h, "/")
		want := map[middleware.FailureMode]int{middleware.FailOpen: 200, middleware.FailClosed: 503}[mode]
		if rec.Code != want || !errors.Is(reported, keyrate.ErrClosed) {
			t.Fatalf("mode %d: %d, reported %v; want %d and ErrClosed", mode, rec.Code, reported, want)
		}
		if mode == middleware.FailOpen && rec.Header().Get("RateLimit-Policy") != `"default";q=3;w=60` {
			t.Errorf("fail-open lost the policy: %v", rec.Header())
		}
	}
}

// A backend whose store is down but whose local fallback decides (as the
// Redis backend's WithLocalFallback does) returns decisions, not errors:
// in either failure mode the middleware serves and refuses them like any
// other, with the fallback's numbers in the fields, and reports them to
// OnDecision with Fallback set, never to OnError.
func TestFallbackDecisionsAreDecisions(t *testing.T) {
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		local, _ := newLimiter(t, 2, time.Minute) // the fallback: a share of a limit of 4
		b := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
			d, err := local.TakeContext(ctx, key, n)
			d.Fallback = true
			return d, err
		})
		var decided []keyrate.Decision
		h := newHandler(t, b, httplimit.WithFailureMode(mode),
			httplimit.WithOnDecision(func(e middleware.Event) { decided = append(decided, e.Decision) }),
			httplimit.WithOnError(func(e middleware.Event) { t.Errorf("mode %d: OnError(%v) for a fallback decision", mode, e.Err) }))
		var codes []int
		for range 3 {
			codes = append(codes, get(h, "/").Code)
		}
		if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
			t.Errorf("mode %d: %v, want 200 200 429 at the fallback's limit of 2", mode, codes)
		}
		if rec := get(h, "/"); rec.Header().Get("RateLimit") != `"default";r=0;t=60` {
			t.Errorf("mode %d: RateLimit %q, want the fallback's numbers", mode, rec.Header().Get("RateLimit"))
		}
		if len(decided) != 4 || !decided[0].Fallback || !decided[3].Fallback {
			t.Errorf("mode %d: OnDecision saw %d decisions, want 4 with Fallback set", mode, len(decided))
		}
	}
}
