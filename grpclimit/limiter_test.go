package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
	"github.com/keyrate/keyrate/middleware"
)

// Two calls a minute: the third, 15 seconds on, fails with ResourceExhausted
// and a RetryInfo of exactly the 45 seconds until the first call leaves the
// window; another client is unaffected.
func TestUnaryLimit(t *testing.T) {
	l, clock := manualLimiter(t, 2, time.Minute)
	ts := serve(t, mustNew(t, l))
	alice := ts.client(t, "127.0.0.1")

	for i := range 2 {
		res := callCheck(t, alice)
		if res.code != codes.OK {
			t.Fatalf("call %d: %v %s, want OK", i+1, res.code, res.msg)
		}
		if got, want := first(res.header, "ratelimit-policy"), `"`+check+`";q=2;w=60`; got != want {
			t.Errorf("call %d: ratelimit-policy %q, want %q", i+1, got, want)
		}
		if got, want := first(res.header, "ratelimit"), fmt.Sprintf(`"%s";r=%d;t=`, check, 1-i); !strings.HasPrefix(got, want) {
			t.Errorf("call %d: ratelimit %q, want it to start %q", i+1, got, want)
		}
	}
	clock.Advance(15 * time.Second)
	res := callCheck(t, alice)
	if res.code != codes.ResourceExhausted {
		t.Fatalf("third call: %v %s, want ResourceExhausted", res.code, res.msg)
	}
	if res.retry == nil {
		t.Fatal("third call: no RetryInfo detail")
	}
	if got := res.retry.GetRetryDelay().AsDuration(); got != 45*time.Second {
		t.Errorf("RetryInfo delay %v, want 45s", got)
	}
	if got, want := first(res.header, "ratelimit"), `"`+check+`";r=0;t=45`; got != want {
		t.Errorf("refused: ratelimit %q, want %q", got, want)
	}
	if got := ts.served.Load(); got != 2 {
		t.Errorf("%d calls reached the handler, want 2", got)
	}
	// The budget is the method's and the address's.
	if d := l.Peek(check + "\x00127.0.0.1"); d.Remaining != 0 {
		t.Errorf("key %q has %d remaining, want 0", check+"\x00127.0.0.1", d.Remaining)
	}

	bob := ts.client(t, "127.0.0.2")
	if res := callCheck(t, bob); res.code != codes.OK {
		t.Errorf("another client: %v %s, want OK", res.code, res.msg)
	}
	clock.Advance(45 * time.Second)
	if res := callCheck(t, alice); res.code != codes.OK {
		t.Errorf("after the RetryInfo delay: %v %s, want OK", res.code, res.msg)
	}
}

// 50 concurrent calls from one client at a limit of 3 admit exactly 3.
func TestConcurrentCallsAdmitExactly(t *testing.T) {
	l, _ := manualLimiter(t, 3, time.Minute)
	ts := serve(t, mustNew(t, l))
	c := ts.client(t, "127.0.0.1")

	var wg sync.WaitGroup
	codesSeen := make([]codes.Code, 50)
	start := make(chan struct{})
	for i := range codesSeen {
		wg.Go(func() {
			<-start
			codesSeen[i] = callCheck(t, c).code
		})
	}
	close(start)
	wg.Wait()
	count := map[codes.Code]int{}
	for _, code := range codesSeen {
		count[code]++
	}
	if count[codes.OK] != 3 || count[codes.ResourceExhausted] != 47 {
		t.Errorf("outcomes %v, want 3 OK and 47 ResourceExhausted", count)
	}
	if got := ts.served.Load(); got != 3 {
		t.Errorf("%d calls reached the handler, want 3", got)
	}
}

// A stream is decided once, when it opens: the messages it then carries
// cost nothing, and a stream opened over the limit fails before its handler
// runs. Each method has its own budget.
func TestStreamDecidedOnOpen(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	counted := &countingBackend{Backend: l}
	ts := serve(t, mustNew(t, counted))
	c := ts.client(t, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Three messages: the initial status, then two changes.
	for i, next := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING, -1} {
		if _, err := s.Recv(); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
		if next >= 0 {
			ts.health.SetServingStatus("", next)
		}
	}
	h, err := s.Header()
	if err != nil {
		t.Fatal(err)
	}
	// countingBackend hides the Limiter's Policies: the policy,
	// window included, comes from the Decision.
	if got, want := first(h, "ratelimit-policy"), `"`+watch+`";q=1;w=60`; got != want {
		t.Errorf("stream ratelimit-policy %q, want %q", got, want)
	}
	if got := counted.calls.Load(); got != 1 {
		t.Errorf("backend asked %d times for one stream of three messages, want 1", got)
	}

	second, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	code, retry, msg := inspect(err)
	if code != codes.ResourceExhausted || retry == nil || retry.GetRetryDelay().AsDuration() != time.Minute {
		t.Errorf("second stream: %v %s, RetryInfo %v; want ResourceExhausted with a delay of 1m", code, msg, retry)
	}
	if got := ts.served.Load(); got != 1 {
		t.Errorf("%d streams reached the handler, want 1", got)
	}
	// Check has its own budget.
	if res := callCheck(t, c); res.code != codes.OK {
		t.Errorf("unary call on another method: %v %s, want OK", res.code, res.msg)
	}
}

// A backend that blocks past the time budget (and ignores its context)
// costs a call the budget and no more: FailOpen serves it with the policy
// alone, FailClosed fails it with Unavailable, and OnError hears of it.
func TestBlockingBackendOverBudget(t *testing.T) {
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		t.Run(fmt.Sprint("mode=", mode), func(t *testing.T) {
			b := newBlockingBackend(t)
			var errs []error
			var mu sync.Mutex
			ts := serve(t, mustNew(t, b,
				grpclimit.WithTimeBudget(20*time.Millisecond),
				grpclimit.WithFailureMode(mode),
				grpclimit.WithOnError(func(ev middleware.Event) {
					mu.Lock()
					defer mu.Unlock()
					errs = append(errs, ev.Err)
				})))
			res := callCheck(t, ts.client(t, "127.0.0.1"))

			want, served := codes.OK, int64(1)
			if mode == middleware.FailClosed {
				want, served = codes.Unavailable, 0
			}
			if res.code != want {
				t.Errorf("%v %s, want %v", res.code, res.msg, want)
			}
			if got := ts.served.Load(); got != served {
				t.Errorf("%d calls reached the handler, want %d", got, served)
			}
			if got := first(res.header, "ratelimit"); got != "" {
				t.Errorf("ratelimit %q without a decision, want none", got)
			}
			if mode == middleware.FailOpen {
				if got, want := first(res.header, "ratelimit-policy"), `"`+check+`";q=5;w=60`; got != want {
					t.Errorf("ratelimit-policy %q, want %q", got, want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) != 1 || !errors.Is(errs[0], middleware.ErrBudgetExceeded) || !errors.Is(errs[0], context.DeadlineExceeded) {
				t.Errorf("OnError got %v, want one error matching ErrBudgetExceeded and DeadlineExceeded", errs)
			}
		})
	}
}

// An error the call itself caused never lets it through, whatever the
// failure mode, and its text (which may name the key) is not sent.
func TestClientCausedErrorNeverServes(t *testing.T) {
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		t.Run(fmt.Sprint("mode=", mode), func(t *testing.T) {
			b := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
				return keyrate.Decision{}, fmt.Errorf("%w: %q", keyrate.ErrInvalidKey, key)
			})
			ts := serve(t, mustNew(t, b, grpclimit.WithFailureMode(mode)))
			res := callCheck(t, ts.client(t, "127.0.0.1"))
			if res.code != codes.InvalidArgument {
				t.Errorf("%v %s, want InvalidArgument", res.code, res.msg)
			}
			if strings.Contains(res.msg, "127.0.0.1") {
				t.Errorf("message %q names the key", res.msg)
			}
			if got := ts.served.Load(); got != 0 {
				t.Errorf("%d calls reached the handler, want 0", got)
			}
		})
	}
}

// Shadow mode serves what it would have refused, with the fields a refusal
// carries, and tells every hook it did.
func TestShadowServesRefusals(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	var decided, limited []middleware.Event
	ts := serve(t, mustNew(t, l, grpclimit.WithShadow(),
		grpclimit.WithOnDecision(func(ev middleware.Event) { decided = append(decided, ev) }),
		grpclimit.WithOnLimited(func(ev middleware.Event) { limited = append(limited, ev) })))
	c := ts.client(t, "127.0.0.1")

	callCheck(t, c)
	res := callCheck(t, c)
	if res.code != codes.OK {
		t.Fatalf("shadowed refusal: %v %s, want OK", res.code, res.msg)
	}
	if got, want := first(res.header, "ratelimit"), `"`+check+`";r=0;t=60`; got != want {
		t.Errorf("ratelimit %q, want %q", got, want)
	}
	if got := ts.served.Load(); got != 2 {
		t.Errorf("%d calls reached the handler, want 2", got)
	}
	if len(decided) != 2 || decided[0].Shadow || !decided[1].Shadow || decided[1].Decision.Allowed {
		t.Errorf("OnDecision events %+v, want an admission then a shadowed refusal", decided)
	}
	if len(limited) != 1 || !limited[0].Shadow {
		t.Errorf("OnLimited events %+v, want one shadowed refusal", limited)
	}
}

// A metadata key identifies the client when present, bounded in length; the
// peer address when absent.
func TestMetadataKeyIdentity(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	var mu sync.Mutex
	var ids []string
	ts := serve(t, mustNew(t, l, grpclimit.WithMetadataKey("X-Api-Key"),
		grpclimit.WithOnDecision(func(ev middleware.Event) {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, ev.Identity)
		})))
	c := ts.client(t, "127.0.0.1")
	long := strings.Repeat("k", 300)

	for _, tc := range []struct {
		md   []string
		want codes.Code
	}{
		{[]string{"x-api-key", "alice"}, codes.OK},
		{[]string{"x-api-key", "alice"}, codes.ResourceExhausted},
		{[]string{"x-api-key", "bob"}, codes.OK},
		{nil, codes.OK},                                      // the address, a budget of its own
		{[]string{"x-api-key", ""}, codes.ResourceExhausted}, // empty: the address again
		{[]string{"x-api-key", long}, codes.OK},
		{[]string{"x-api-key", long}, codes.ResourceExhausted},
		{[]string{"x-api-key", long + "x"}, codes.OK},
	} {
		if res := callCheck(t, c, tc.md...); res.code != tc.want {
			t.Errorf("metadata %q: %v %s, want %v", tc.md, res.code, res.msg, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if ids[0] != "x-api-key=alice" || ids[2] != "x-api-key=bob" || ids[3] != "127.0.0.1" || ids[4] != "127.0.0.1" {
		t.Errorf("identities %q", ids[:5])
	}
	for _, id := range ids[5:] {
		if !strings.HasPrefix(id, "sha256:") || len(id) != 50 {
			t.Errorf("identity for a 300-byte value: %q, want sha256:<digest of x-api-key=value>", id)
		}
	}
}

// WithMethod gives one method a backend of its own; the rest keep New's.
func TestPerMethodBackend(t *testing.T) {
	fallback, _ := manualLimiter(t, 1, time.Minute)
	checks, _ := manualLimiter(t, 3, 10*time.Second)
	ts := serve(t, mustNew(t, fallback, grpclimit.WithMethod(check, checks)))
	c := ts.client(t, "127.0.0.1")

	for i := range 4 {
		res := callCheck(t, c)
		want := codes.OK
		if i == 3 {
			want = codes.ResourceExhausted
		}
		if res.code != want {
			t.Errorf("call %d: %v %s, want %v", i+1, res.code, res.msg, want)
		}
		if got, want := first(res.header, "ratelimit-policy"), `"`+check+`";q=3;w=10`; got != want {
			t.Errorf("call %d: ratelimit-policy %q, want %q", i+1, got, want)
		}
	}
	if fallback.Len() != 0 || checks.Len() != 1 {
		t.Errorf("keys: %d in New's backend, %d in Check's; want 0 and 1", fallback.Len(), checks.Len())
	}
}

// WithWeight weighs calls; a weight of 0 is free, and one that can never fit
// fails with InvalidArgument and no RetryInfo.
func TestWeight(t *testing.T) {
	l, _ := manualLimiter(t, 3, time.Minute)
	cost := 2
	ts := serve(t, mustNew(t, l, grpclimit.WithWeight(func(ctx context.Context, method string, req any) int {
		if _, ok := req.(*healthpb.HealthCheckRequest); !ok || method != check {
			t.Errorf("WithWeight got %s, %T", method, req)
		}
		return cost
	})))
	c := ts.client(t, "127.0.0.1")

	for _, tc := range []struct {
		cost      int
		want      codes.Code
		remaining string
	}{
		{2, codes.OK, "r=1"},
		{0, codes.OK, "r=1"},
		{2, codes.ResourceExhausted, "r=1"},
		{4, codes.InvalidArgument, "r=1"},
		{-1, codes.InvalidArgument, "r=1"},
		{1, codes.OK, "r=0"},
	} {
		cost = tc.cost
		res := callCheck(t, c)
		if res.code != tc.want {
			t.Errorf("cost %d: %v %s, want %v", tc.cost, res.code, res.msg, tc.want)
		}
		if tc.want == codes.InvalidArgument && res.retry != nil {
			t.Errorf("cost %d: RetryInfo %v for a call that can never fit", tc.cost, res.retry)
		}
		if got := first(res.header, "ratelimit"); !strings.Contains(got, ";"+tc.remaining+";") {
			t.Errorf("cost %d: ratelimit %q, want %s", tc.cost, got, tc.remaining)
		}
	}
}

// Hooks and the Observer hear of every decision and error with the route,
// the key and the time the backend took.
func TestHooksAndObserver(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	obs := &recordingObserver{}
	var events []middleware.Event
	ts := serve(t, mustNew(t, l, grpclimit.WithObserver(obs),
		grpclimit.WithOnDecision(func(ev middleware.Event) { events = append(events, ev) })))
	c := ts.client(t, "127.0.0.1")
	callCheck(t, c)
	callCheck(t, c)

	if len(events) != 2 {
		t.Fatalf("%d events, want 2", len(events))
	}
	ev := events[0]
	if ev.Route != check || ev.Identity != "127.0.0.1" || ev.Key != check+"\x00127.0.0.1" || ev.Weight != 1 ||
		!ev.Decision.Allowed || ev.Duration <= 0 || ev.Context == nil {
		t.Errorf("first event %+v", ev)
	}
	if events[1].Decision.Allowed || events[1].Decision.RetryAfter != time.Minute {
		t.Errorf("second event's decision %+v, want a refusal for 1m", events[1].Decision)
	}
	if got := obs.String(); got != check+" allowed; "+check+" limited; " {
		t.Errorf("observer saw %q", got)
	}

	failing := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{}, errors.New("store down")
	})
	obs = &recordingObserver{}
	ts = serve(t, mustNew(t, failing, grpclimit.WithObserver(obs)))
	callCheck(t, ts.client(t, "127.0.0.1"))
	if got := obs.String(); got != check+" error store down; " {
		t.Errorf("observer saw %q", got)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	for name, tc := range map[string]struct {
		b    keyrate.Backend
		opts []grpclimit.Option
	}{
		"nil backend":               {nil, nil},
		"zero budget":               {l, []grpclimit.Option{grpclimit.WithTimeBudget(0)}},
		"unknown failure mode":      {l, []grpclimit.Option{grpclimit.WithFailureMode(7)}},
		"metadata key with a space": {l, []grpclimit.Option{grpclimit.WithMetadataKey("api key")}},
		"reserved metadata key":     {l, []grpclimit.Option{grpclimit.WithMetadataKey("grpc-timeout")}},
		"nil method backend":        {l, []grpclimit.Option{grpclimit.WithMethod(check, nil)}},
		"not a method name":         {l, []grpclimit.Option{grpclimit.WithMethod("Check", l)}},
	} {
		if _, err := grpclimit.New(tc.b, tc.opts...); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("%s: err %v, want keyrate.ErrConfig", name, err)
		}
	}
}

// A backend whose store is down but whose local fallback decides (as the
// Redis backend's WithLocalFallback does) returns decisions, not errors:
// in either failure mode the calls are served and refused like any other,
// and the Observer sees decisions with Fallback set, never an error.
func TestFallbackDecisionsAreDecisions(t *testing.T) {
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		t.Run(fmt.Sprint("mode=", mode), func(t *testing.T) {
			local, _ := manualLimiter(t, 2, time.Minute) // the fallback: a share of a limit of 4
			b := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
				d, err := local.TakeContext(ctx, key, n)
				d.Fallback = true
				return d, err
			})
			obs := &recordingObserver{}
			ts := serve(t, mustNew(t, b, grpclimit.WithFailureMode(mode), grpclimit.WithObserver(obs),
				grpclimit.WithOnError(func(ev middleware.Event) { t.Errorf("OnError(%v) for a fallback decision", ev.Err) })))
			c := ts.client(t, "127.0.0.1")
			var got []codes.Code
			for range 3 {
				got = append(got, callCheck(t, c).code)
			}
			if got[0] != codes.OK || got[1] != codes.OK || got[2] != codes.ResourceExhausted {
				t.Errorf("codes %v, want OK OK ResourceExhausted at the fallback's limit of 2", got)
			}
			if want := strings.Repeat(check+" allowed fallback; ", 2) + check + " limited fallback; "; obs.String() != want {
				t.Errorf("observer saw %q, want %q", obs.String(), want)
			}
		})
	}
}
