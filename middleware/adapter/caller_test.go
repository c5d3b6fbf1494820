package adapter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
)

type ctxKey struct{}

func mustCaller(t *testing.T, b keyrate.Backend, budget time.Duration) *Caller {
	t.Helper()
	c, err := NewCaller(b, budget)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A Caller needs a backend, and a budget for one that does not bound its
// own calls; a Bounded one needs none.
func TestNewCaller(t *testing.T) {
	p := probe{seen: make(chan context.Context, 1)}
	for name, c := range map[string]struct {
		b      keyrate.Backend
		budget time.Duration
		ok     bool
	}{
		"nil backend":                 {nil, time.Second, false},
		"zero budget":                 {p, 0, false},
		"negative budget":             {p, -time.Second, false},
		"budget":                      {p, time.Second, true},
		"Bounded backend, no budget":  {bounded{p}, 0, true},
		"Bounded backend, any budget": {bounded{p}, time.Second, true},
	} {
		_, err := NewCaller(c.b, c.budget)
		if c.ok && err != nil || !c.ok && !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("%s: %v, want ok %v or keyrate.ErrConfig", name, err, c.ok)
		}
	}
}

// probe records the context of each call and answers after delay, or when
// the context ends if it heeds it.
type probe struct {
	delay time.Duration
	heeds bool
	seen  chan context.Context // each call's context
}

func (p probe) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	p.seen <- ctx
	if p.heeds {
		select {
		case <-time.After(p.delay):
		case <-ctx.Done():
			return keyrate.Decision{}, ctx.Err()
		}
	} else {
		time.Sleep(p.delay)
	}
	return keyrate.Decision{Allowed: true, Limit: n}, nil
}

type nonBlocking struct{ probe }

func (nonBlocking) TimeBudget() time.Duration { return 0 }

type bounded struct{ probe }

func (bounded) TimeBudget() time.Duration { return time.Second }

// Backends that return promptly by themselves get the caller's context as
// it is, and as long as they take; the others run under the budget.
func TestTake(t *testing.T) {
	const budget = 100 * time.Millisecond
	cases := []struct {
		name     string
		backend  func(probe) keyrate.Backend
		delay    time.Duration
		heeds    bool
		took     time.Duration
		err      error // nil: allowed
		inline   bool
		deadline bool
	}{
		{"non-blocking", func(p probe) keyrate.Backend { return nonBlocking{p} }, 300 * time.Millisecond, false, 300 * time.Millisecond, nil, true, false},
		{"bounded", func(p probe) keyrate.Backend { return bounded{p} }, 300 * time.Millisecond, false, 300 * time.Millisecond, nil, true, false},
		{"blocking, within the budget", func(p probe) keyrate.Backend { return p }, 99 * time.Millisecond, false, 99 * time.Millisecond, nil, false, true},
		{"blocking, ignoring its context", func(p probe) keyrate.Backend { return p }, time.Second, false, budget, middleware.ErrBudgetExceeded, false, true},
		{"blocking, heeding its context", func(p probe) keyrate.Backend { return p }, time.Second, true, budget, middleware.ErrBudgetExceeded, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				seen := make(chan context.Context, 2)
				caller := mustCaller(t, c.backend(probe{delay: c.delay, heeds: c.heeds, seen: seen}), budget)
				ctx := context.WithValue(context.Background(), ctxKey{}, "request")
				start := time.Now()
				d, err := caller.Take(ctx, "k", "k", 2)
				took := time.Since(start)
				time.Sleep(c.delay) // let a backend that outlived the budget finish
				var calls []context.Context
				for len(seen) > 0 {
					calls = append(calls, <-seen)
				}
				if took != c.took {
					t.Errorf("took %v, want %v", took, c.took)
				}
				if c.err == nil && (err != nil || !d.Allowed || d.Limit != 2) {
					t.Errorf("got %+v, %v; want the backend's answer", d, err)
				}
				if c.err != nil && (!errors.Is(err, c.err) || !errors.Is(err, context.DeadlineExceeded) || d.Allowed) {
					t.Errorf("got %+v, %v; want %v matching context.DeadlineExceeded", d, err, c.err)
				}
				if len(calls) != 1 || calls[0].Value(ctxKey{}) != "request" {
					t.Fatalf("backend saw %d calls, want one with the caller's context inside", len(calls))
				}
				if _, ok := calls[0].Deadline(); ok != c.deadline || (calls[0] == ctx) != c.inline {
					t.Errorf("deadline %v, same context %v; want %v and %v", ok, calls[0] == ctx, c.deadline, c.inline)
				}
			})
		})
	}
}

// A caller that goes away is its own cancellation, not the budget's: the
// client is gone.
func TestTakeCallerCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller := mustCaller(t, probe{delay: time.Second, heeds: true, seen: make(chan context.Context, 1)}, 100*time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		_, err := caller.Take(ctx, "k", "k", 1)
		if !errors.Is(err, middleware.ErrClientGone) || !errors.Is(err, context.Canceled) || errors.Is(err, middleware.ErrBudgetExceeded) {
			t.Fatalf("err = %v, want ErrClientGone and context.Canceled", err)
		}
	})
}

// answering is a backend that counts its calls and gives a set answer,
// inline or not.
type answering struct {
	calls  *int
	d      keyrate.Decision
	err    error
	inline bool
}

func (a answering) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	*a.calls++
	return a.d, a.err
}

// A request whose context is done is not asked about; one whose context
// ends by the time the backend fails is the client's doing; an answer the
// backend gave stands.
func TestTakeClientGone(t *testing.T) {
	errStore := errors.New("store down")
	admitted := keyrate.Decision{Allowed: true, Limit: 1}
	cancelled, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("stream reset"))
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		d     keyrate.Decision
		err   error
		calls int
		gone  error // nil: the backend's answer
	}{
		{"cancelled before", cancelled, admitted, nil, 0, context.Canceled},
		{"expired before", expired, admitted, nil, 0, context.DeadlineExceeded},
		{"live, store fails", context.Background(), keyrate.Decision{}, errStore, 1, nil},
		{"live, admitted", context.Background(), admitted, nil, 1, nil},
	} {
		for _, inline := range []bool{true, false} {
			calls := 0
			var b keyrate.Backend = answering{calls: &calls, d: tc.d, err: tc.err}
			if inline {
				b = nonBlockingAnswer{answering{calls: &calls, d: tc.d, err: tc.err}}
			}
			d, err := mustCaller(t, b, time.Second).Take(tc.ctx, "k", "k", 1)
			if calls != tc.calls {
				t.Errorf("%s, inline %v: backend asked %d times, want %d", tc.name, inline, calls, tc.calls)
			}
			switch {
			case tc.gone != nil:
				if !errors.Is(err, middleware.ErrClientGone) || !errors.Is(err, tc.gone) || d.Allowed {
					t.Errorf("%s, inline %v: %+v, %v; want ErrClientGone matching %v", tc.name, inline, d, err, tc.gone)
				}
			case d != tc.d || !errors.Is(err, tc.err) || errors.Is(err, middleware.ErrClientGone):
				t.Errorf("%s, inline %v: %+v, %v; want the backend's %+v, %v", tc.name, inline, d, err, tc.d, tc.err)
			}
		}
	}
	// A cause says why the request ended, beside its context's error.
	if _, err := mustCaller(t, answering{calls: new(int)}, time.Second).Take(cancelled, "k", "k", 1); err == nil || err.Error() != middleware.ErrClientGone.Error()+": context canceled: stream reset" {
		t.Errorf("with a cause: %v", err)
	}
}

type nonBlockingAnswer struct{ answering }

func (nonBlockingAnswer) TimeBudget() time.Duration { return 0 }

// A backend failing once the request's own deadline has passed failed
// because the client left, even though the budget is far off; the same
// failure with the client still there is the store's.
func TestTakeClientGoneDuringCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		heeding := probe{delay: time.Second, heeds: true, seen: make(chan context.Context, 2)}
		for name, b := range map[string]keyrate.Backend{"goroutine": heeding, "inline": bounded{heeding}} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := mustCaller(t, b, 100*time.Millisecond).Take(ctx, "k", "k", 1)
			if !errors.Is(err, middleware.ErrClientGone) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, middleware.ErrBudgetExceeded) || time.Since(start) != 5*time.Millisecond {
				t.Errorf("%s: %v after %v, want ErrClientGone and DeadlineExceeded after 5ms", name, err, time.Since(start))
			}
		}
	})
}

// The backend gets the client's identity in its context when the identity
// differs from the key, and the bare context when they are equal. A
// limiter without tiers never reads it, so it never gets it.
func TestTakePassesIdentity(t *testing.T) {
	seen := make(chan context.Context, 1)
	caller := mustCaller(t, nonBlocking{probe{seen: seen}}, time.Second)
	ctx := context.WithValue(context.Background(), ctxKey{}, "request")
	if _, err := caller.Take(ctx, "route\x00x-api-key=pro-42", "pro-42", 1); err != nil {
		t.Fatal(err)
	}
	got := <-seen
	if id, ok := backend.IdentityFromContext(got); !ok || id != "pro-42" || got.Value(ctxKey{}) != "request" {
		t.Errorf("backend saw identity %q (%v), want pro-42 inside the request's context", id, ok)
	}
	caller.Take(ctx, "k", "k", 1)
	if got := <-seen; got != ctx {
		t.Errorf("identity equal to the key: the backend got a new context, want the request's")
	}

	untiered, err := keyrate.New(1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer untiered.Close()
	tiered, err := keyrate.New(1, time.Minute, keyrate.WithTiers(func(string) string { return "" }, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer tiered.Close()
	u, tr := mustCaller(t, untiered, time.Second), mustCaller(t, tiered, time.Second)
	if u.identity || !tr.identity || !caller.identity {
		t.Errorf("identity passed to: an untiered limiter %v, a tiered one %v, another backend %v; want false, true, true",
			u.identity, tr.identity, caller.identity)
	}
	// An untiered limiter gets the request's context as it is.
	u.backend = nonBlocking{probe{seen: seen}}
	u.Take(ctx, "route\x00x-api-key=pro-42", "pro-42", 1)
	if got := <-seen; got != ctx {
		t.Errorf("a backend that never reads the identity got a new context, want the request's")
	}
}
