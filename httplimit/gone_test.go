package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// goneContexts returns 10 cancelled contexts and 10 whose deadline has
// passed: requests whose client has hung up, or timed out, before they were
// decided.
func goneContexts(t *testing.T) []context.Context {
	var ctxs []context.Context
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ctxs = append(ctxs, ctx)
	}
	for range 10 {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		t.Cleanup(cancel)
		ctxs = append(ctxs, ctx)
	}
	return ctxs
}

// viaGoroutine hides that the limiter is Bounded, so that the middleware
// calls it on a goroutine under its time budget, as it calls a store.
type viaGoroutine struct{ l *keyrate.Limiter }

func (b viaGoroutine) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return b.l.TakeContext(ctx, key, n)
}

// A request whose context is already done is never served: not in either
// failure mode, not in shadow mode, whether the backend is called inline
// or on a goroutine. It is not decided either, so it spends nothing: of
// 10 cancelled requests, 10 expired ones and one live one at a limit of 1,
// the handler runs exactly once, for the live one, which comes last.
func TestGoneClientNeverServed(t *testing.T) {
	type setup struct {
		mode   middleware.FailureMode
		shadow bool
	}
	setups := map[string]setup{
		"fail-open":           {middleware.FailOpen, false},
		"fail-closed":         {middleware.FailClosed, false},
		"fail-open, shadow":   {middleware.FailOpen, true},
		"fail-closed, shadow": {middleware.FailClosed, true},
	}
	backends := map[string]func(*keyrate.Limiter) keyrate.Backend{
		"inline":    func(l *keyrate.Limiter) keyrate.Backend { return l },
		"goroutine": func(l *keyrate.Limiter) keyrate.Backend { return viaGoroutine{l} },
	}
	for sname, s := range setups {
		for bname, backend := range backends {
			t.Run(sname+"/"+bname, func(t *testing.T) {
				l, _ := newLimiter(t, 1, time.Minute)
				var served atomic.Int64
				var errs []error
				opts := []httplimit.Option{
					httplimit.WithFailureMode(s.mode),
					httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) }),
				}
				if s.shadow {
					opts = append(opts, httplimit.WithShadow())
				}
				m, err := httplimit.New(backend(l), opts...)
				if err != nil {
					t.Fatal(err)
				}
				h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					served.Add(1)
					w.Write([]byte("ok"))
				}))
				for i, ctx := range goneContexts(t) {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
					if rec.Code != http.StatusServiceUnavailable {
						t.Errorf("gone request %d: %d %q, want 503", i, rec.Code, rec.Body)
						continue
					}
					if p := decodeProblem(t, rec); p.Detail != goneDetail || p.Type != "about:blank" {
						t.Errorf("gone request %d: %q %q, want about:blank and %q: the store's capacity is not at issue", i, p.Type, p.Detail, goneDetail)
					}
					if rec.Header().Get("RateLimit") != "" || rec.Header().Get("RateLimit-Policy") != "" {
						t.Errorf("gone request %d: fields %v on an undecided request", i, rec.Header())
					}
				}
				rec := get(h, "/")
				if rec.Code != 200 || rec.Header().Get("RateLimit") != `"default";r=0;t=60` {
					t.Errorf("live request: %d %v, want 200 with the whole budget spent by it alone", rec.Code, rec.Header())
				}
				if got := served.Load(); got != 1 {
					t.Errorf("the handler ran %d times, want once", got)
				}
				if len(errs) != 20 {
					t.Fatalf("OnError heard of %d requests, want 20", len(errs))
				}
				for i, err := range errs {
					want := context.Canceled
					if i >= 10 {
						want = context.DeadlineExceeded
					}
					if !errors.Is(err, middleware.ErrClientGone) || !errors.Is(err, want) || errors.Is(err, middleware.ErrBudgetExceeded) {
						t.Errorf("OnError got %v for gone request %d, want ErrClientGone and %v", err, i, want)
					}
				}
			})
		}
	}
}

const goneDetail = "The request was cancelled or timed out before it could be decided."

// A store still busy when the client's deadline passes is not waited for:
// the request ends at its deadline, unserved, whether the store then
// admits it or fails, and in either failure mode. The store's late answer
// counts for nothing.
func TestGoneClientSlowStore(t *testing.T) {
	answers := map[string]func() (keyrate.Decision, error){
		"admits": func() (keyrate.Decision, error) {
			return keyrate.Decision{Allowed: true, Limit: 3, Remaining: 2}, nil
		},
		"fails": func() (keyrate.Decision, error) { return keyrate.Decision{}, errStore },
	}
	for aname, answer := range answers {
		for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
			t.Run(fmt.Sprintf("%s/mode=%d", aname, mode), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					// The store answers after 50ms, whatever its context
					// says: the client gives up after 5ms, well inside the
					// middleware's 250ms budget.
					store := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
						time.Sleep(50 * time.Millisecond)
						return answer()
					})
					var served int
					var errs []error
					m, err := httplimit.New(store, httplimit.WithFailureMode(mode),
						httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) }))
					if err != nil {
						t.Fatal(err)
					}
					h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
					defer cancel()
					start := time.Now()
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
					took := time.Since(start)
					time.Sleep(time.Second) // let the store's goroutine end
					if served != 0 || rec.Code != http.StatusServiceUnavailable {
						t.Errorf("mode %d: handler ran %d times, answered %d; want no run and 503", mode, served, rec.Code)
					}
					if took != 5*time.Millisecond {
						t.Errorf("mode %d: the request took %v, want the client's 5ms", mode, took)
					}
					if len(errs) != 1 || !errors.Is(errs[0], middleware.ErrClientGone) || !errors.Is(errs[0], context.DeadlineExceeded) {
						t.Errorf("mode %d: OnError got %v, want one ErrClientGone matching DeadlineExceeded", mode, errs)
					}
				})
			})
		}
	}
}

// The budget's own timeout, with the client still waiting, is the store's
// failure, not the client's: FailOpen still serves it.
func TestBudgetTimeoutIsNotClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer func() { close(release); synctest.Wait() }()
		var reported error
		m, err := httplimit.New(failingBackends(release)["hangs until its context ends"],
			httplimit.WithTimeBudget(100*time.Millisecond),
			httplimit.WithOnError(func(e middleware.Event) { reported = e.Err }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		m.Handler(okHandler).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if rec.Code != 200 || !errors.Is(reported, middleware.ErrBudgetExceeded) || errors.Is(reported, middleware.ErrClientGone) {
			t.Fatalf("%d, reported %v; want the handler's 200 and ErrBudgetExceeded alone", rec.Code, reported)
		}
	})
}
