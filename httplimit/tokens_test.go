package httplimit_test

import (
	"context"
	"errors"
	"github.com/keyrate/keyrate/middleware/adapter"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// tokenBudget is the recipe's backend: requests per minute in the default
// tier, tokens per minute in middleware.TokensTier, picked by
// middleware.TokenTier.
func tokenBudget(t *testing.T, requests, tokens int, clock keyrate.Clock) *keyrate.Limiter {
	t.Helper()
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "rpm", Limit: requests, Window: time.Minute}},
		keyrate.WithClock(clock),
		keyrate.WithTiers(middleware.TokenTier, map[string][]keyrate.Policy{
			middleware.TokensTier: {{Name: "tpm", Limit: tokens, Window: time.Minute}},
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// maxTokens is the routes' cost: the max_tokens of the query.
func maxTokens(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("max_tokens"))
	if err != nil {
		return -1
	}
	return n
}

// generating reports the query's used (when it has one) and answers 200.
var generating = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query(); q.Has("used") {
		used, _ := strconv.Atoi(q.Get("used"))
		if err := middleware.ReportWeight(r.Context(), used); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Write([]byte("generated"))
})

func clockAt() *keyrate.ManualClock {
	return keyrate.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

func newTokenRoute(t *testing.T, b keyrate.Backend, opts ...httplimit.Option) http.Handler {
	t.Helper()
	opts = append([]httplimit.Option{
		httplimit.WithRoute("generate"),
		httplimit.WithKeyFunc(func(*http.Request) (string, error) { return "alice", nil }),
		httplimit.WithWeight(maxTokens),
		httplimit.WithTokenBudget(),
	}, opts...)
	m, err := httplimit.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Handler(generating)
}

func send(h http.Handler, query string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/generate?"+query, nil))
	return rec
}

const (
	requestsKey = "generate\x00alice" + adapter.RequestsSuffix
	tokensKey   = "generate\x00alice" + adapter.TokensSuffix
)

// left returns what each budget of alice's holds now.
func left(l *keyrate.Limiter) (requests, tokens int) {
	return held(l.Peek(requestsKey)), held(l.Peek(tokensKey))
}

// held returns what a budget holds, from Peek's decision (a weight of 1).
func held(d keyrate.Decision) int {
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1
}

// TestTokenBudgetAllOrNothing: a request counts against both budgets or
// neither. One the tokens refuse records no request; one the requests
// refuse records no tokens; the answer is the refusing budget's.
func TestTokenBudgetAllOrNothing(t *testing.T) {
	l := tokenBudget(t, 3, 100, clockAt())
	h := newTokenRoute(t, l)

	if rec := send(h, "max_tokens=80"); rec.Code != http.StatusOK {
		t.Fatalf("the first request of 80 tokens: %d", rec.Code)
	}
	if r, k := left(l); r != 2 || k != 20 {
		t.Fatalf("after one request of 80: %d requests and %d tokens left, want 2 and 20", r, k)
	}
	rec := send(h, "max_tokens=30")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("30 tokens over the 20 left: %d, Retry-After %q; want 429 after 60", rec.Code, rec.Header().Get("Retry-After"))
	}
	if !strings.Contains(rec.Body.String(), `"violated-policies":["tpm"]`) {
		t.Errorf("the refusal names %s, want tpm alone", rec.Body.String())
	}
	if r, k := left(l); r != 2 || k != 20 {
		t.Fatalf("after a request the tokens refused: %d requests and %d tokens left, want 2 and 20 (nothing recorded)", r, k)
	}
	for range 2 {
		if rec := send(h, "max_tokens=1"); rec.Code != http.StatusOK {
			t.Fatalf("a request of 1 token: %d", rec.Code)
		}
	}
	rec = send(h, "max_tokens=5")
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `"violated-policies":["rpm"]`) {
		t.Fatalf("a fourth request in the minute: %d %s, want 429 naming rpm", rec.Code, rec.Body.String())
	}
	if r, k := left(l); r != 0 || k != 18 {
		t.Fatalf("after a request the requests refused: %d requests and %d tokens left, want 0 and 18 (no tokens recorded)", r, k)
	}
	if rec := send(h, "max_tokens=101"); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("101 tokens, over the limit of 100: %d, want 413", rec.Code)
	}
}

// TestTokenBudgetSettle: middleware.ReportWeight gives back the unused
// tokens from the tokens budget alone, and the fields sent say what the
// request left; WithRefund gives back both budgets.
func TestTokenBudgetSettle(t *testing.T) {
	l := tokenBudget(t, 10, 1000, clockAt())
	h := newTokenRoute(t, l, httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.TokenHeaders),
		httplimit.WithRefund(func(status int) bool { return status >= 500 }))

	rec := send(h, "max_tokens=400&used=120")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if r, k := left(l); r != 9 || k != 880 {
		t.Fatalf("after reserving 400 and using 120: %d requests and %d tokens left, want 9 and 880", r, k)
	}
	if got, want := rec.Header().Get("RateLimit"), `"rpm";r=9;t=60, "tpm";r=880;t=60`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	if got := rec.Header().Get("X-Ratelimit-Remaining-Tokens"); got != "880" {
		t.Errorf("x-ratelimit-remaining-tokens %q, want 880", got)
	}
	if got := rec.Header().Get("X-Ratelimit-Remaining-Requests"); got != "9" {
		t.Errorf("x-ratelimit-remaining-requests %q, want 9", got)
	}

	// A used above max_tokens is no cost middleware.ReportWeight takes: the
	// handler answers 500, which WithRefund gives back whole, both budgets.
	if rec := send(h, "max_tokens=100&used=101"); rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want the handler's 500", rec.Code)
	}
	if r, k := left(l); r != 9 || k != 880 {
		t.Fatalf("after a request given back: %d requests and %d tokens left, want 9 and 880", r, k)
	}
}

// TestTokenHeaders checks the six fields of model-API clients, values and
// format, for an admission and for a refusal by each budget.
func TestTokenHeaders(t *testing.T) {
	clock := clockAt()
	l := tokenBudget(t, 2, 1000, clock)
	h := newTokenRoute(t, l, httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.TokenHeaders))
	fields := func(rec *httptest.ResponseRecorder) string {
		var b strings.Builder
		for _, k := range []string{"requests", "tokens"} {
			for _, f := range []string{"limit", "remaining", "reset"} {
				b.WriteString(rec.Header().Get("x-ratelimit-"+f+"-"+k) + " ")
			}
		}
		return strings.TrimSpace(b.String())
	}
	for _, c := range []struct {
		advance time.Duration
		query   string
		status  int
		want    string // limit, remaining, reset of requests, then of tokens
	}{
		{0, "max_tokens=600", 200, "2 1 1m0s 1000 400 1m0s"},
		{1500*time.Millisecond + 12345*time.Microsecond, "max_tokens=300", 200, "2 0 1m0s 1000 100 1m0s"},
		// The requests refuse, the tokens stand as they are: both windows
		// empty 15.0124s later, rounded up to the millisecond.
		{44987600 * time.Microsecond, "max_tokens=50", 429, "2 0 15.013s 1000 100 15.013s"},
		// The first request has left: the tokens, 700, refuse 800.
		{14000055 * time.Microsecond, "max_tokens=800", 429, "2 1 1.013s 1000 700 1.013s"},
	} {
		clock.Advance(c.advance)
		rec := send(h, c.query)
		if got := fields(rec); rec.Code != c.status || got != c.want {
			t.Errorf("%s after %v: %d %q, want %d %q", c.query, c.advance, rec.Code, got, c.status, c.want)
		}
	}
}

// TestTokenBudgetConfig: the option needs a backend that takes all, and
// TokenHeaders need the option.
func TestTokenBudgetConfig(t *testing.T) {
	plain := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{Allowed: true}, nil
	})
	if _, err := httplimit.New(plain, httplimit.WithTokenBudget()); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("a backend without TakeAll: %v, want ErrConfig", err)
	}
	l := tokenBudget(t, 1, 1, clockAt())
	if _, err := httplimit.New(l, httplimit.WithHeaders(httplimit.TokenHeaders)); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("TokenHeaders without a token budget: %v, want ErrConfig", err)
	}
}

// TestTokenBudgetConcurrency: the in-flight cap stands beside both budgets; a
// request refused for want of a slot spends neither.
func TestTokenBudgetConcurrency(t *testing.T) {
	l := tokenBudget(t, 10, 1000, clockAt())
	running, err := keyrate.NewConcurrency(1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(l, httplimit.WithRoute("generate"),
		httplimit.WithKeyFunc(func(*http.Request) (string, error) { return "alice", nil }),
		httplimit.WithWeight(maxTokens), httplimit.WithTokenBudget(), httplimit.WithConcurrency(running, 0))
	if err != nil {
		t.Fatal(err)
	}
	inside := make(chan struct{})
	release := make(chan struct{})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("hold") {
			close(inside)
			<-release
		}
		middleware.ReportWeight(r.Context(), 10)
	}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- send(h, "max_tokens=100&hold") }()
	<-inside
	if rec := send(h, "max_tokens=100"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("a second request in flight: %d, want 429", rec.Code)
	}
	if r, k := left(l); r != 9 || k != 900 {
		t.Errorf("with one request in flight and one refused for its slot: %d requests and %d tokens left, want 9 and 900", r, k)
	}
	close(release)
	if rec := <-done; rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != `"rpm";r=9;t=60, "tpm";r=990;t=60` {
		t.Errorf("the request held: %d, RateLimit %q", rec.Code, rec.Header().Get("RateLimit"))
	}
	if rec := send(h, "max_tokens=100"); rec.Code != http.StatusOK {
		t.Errorf("once the slot is back: %d", rec.Code)
	}
	if r, k := left(l); r != 8 || k != 980 {
		t.Errorf("after two settled requests: %d requests and %d tokens left, want 8 and 980", r, k)
	}
}
