package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// discard is a ResponseWriter that keeps nothing but its header map, cleared
// between requests, so that allocations counted are the handler's own.
type discard struct{ h http.Header }

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
func (w *discard) WriteHeader(int)             {}

var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// requests returns n requests from n distinct client addresses.
func requests(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		rs[i] = httptest.NewRequest("GET", "/api/search", nil)
		rs[i].RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", i/256, i%256)
	}
	return rs
}

func serve(b *testing.B, h http.Handler, rs []*http.Request) {
	w := &discard{h: make(http.Header)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		clear(w.h)
		h.ServeHTTP(w, rs[i%len(rs)])
	}
}

// allowAll is a free backend that never waits (Bounded, with a budget of
// 0): what it costs is the middleware's own overhead and nothing of a
// limiter's.
type allowAll struct{}

func (allowAll) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return keyrate.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: time.Minute}, nil
}
func (allowAll) Policies() []keyrate.Policy {
	return []keyrate.Policy{{Limit: 100, Window: time.Minute}}
}

func (allowAll) Tiered() bool              { return false }
func (allowAll) TimeBudget() time.Duration { return 0 }

// blockingAllowAll is allowAll but not Bounded: every call pays for the
// goroutine and timer of the time budget.
type blockingAllowAll struct{}

func (blockingAllowAll) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return allowAll{}.TakeContext(ctx, key, n)
}
func (blockingAllowAll) Policies() []keyrate.Policy { return allowAll{}.Policies() }
func (blockingAllowAll) Tiered() bool               { return false }

func mustNew(b *testing.B, backend keyrate.Backend, opts ...httplimit.Option) http.Handler {
	m, err := httplimit.New(backend, append(opts, httplimit.WithRoute("search"))...)
	if err != nil {
		b.Fatal(err)
	}
	return m.Handler(bare)
}

// BenchmarkMiddleware compares the bare handler with the same handler behind
// the middleware, over 1024 client addresses.
//
//   - bare: the handler alone, the baseline.
//   - overhead: a free backend, so the difference from bare is the
//     middleware's own cost: identity, key, fields.
//   - local: the in-process keyrate.Limiter (admitting every request).
//   - local-apikey: the same, identified by an X-API-Key header, as the
//     demo does: the identity is a string of its own before the key.
//   - local-refused: every request refused, 429 with a problem body.
//   - blocking: the free backend, not Bounded, for the cost
//     of the budget's goroutine and timer a networked backend pays.
//   - overhead-1-policy, overhead-2-policies: a free backend answering
//     Decisions made by backend.Combine of one and of two policies, for
//     what listing every policy in the fields costs.
func BenchmarkMiddleware(b *testing.B) {
	rs := requests(1024)
	b.Run("bare", func(b *testing.B) { serve(b, bare, rs) })
	b.Run("overhead", func(b *testing.B) { serve(b, mustNew(b, allowAll{}), rs) })
	b.Run("local", func(b *testing.B) {
		// A window short enough that logs stay small whatever b.N is, and a
		// limit high enough that nothing is refused.
		l, _ := keyrate.New(1<<20, time.Millisecond)
		defer l.Close()
		serve(b, mustNew(b, l), rs)
	})
	b.Run("local-cost", func(b *testing.B) {
		// A reserved cost, the same weight as local-tokens, on one budget.
		l, _ := keyrate.New(1<<30, time.Millisecond)
		defer l.Close()
		serve(b, mustNew(b, l, httplimit.WithWeight(func(*http.Request) int { return 100 })), rs)
	})
	b.Run("local-tokens", func(b *testing.B) {
		// A token budget: both budgets in one TakeAll, and the six model-API
		// fields beside the draft's.
		l, _ := keyrate.NewPolicies([]keyrate.Policy{{Name: "rpm", Limit: 1 << 20, Window: time.Millisecond}},
			keyrate.WithTiers(middleware.TokenTier, map[string][]keyrate.Policy{
				middleware.TokensTier: {{Name: "tpm", Limit: 1 << 30, Window: time.Millisecond}},
			}))
		defer l.Close()
		serve(b, mustNew(b, l, httplimit.WithWeight(func(*http.Request) int { return 100 }), httplimit.WithTokenBudget(),
			httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.TokenHeaders)), rs)
	})
	b.Run("local-apikey", func(b *testing.B) {
		l, _ := keyrate.New(1<<20, time.Millisecond)
		defer l.Close()
		keyed := make([]*http.Request, len(rs))
		for i, r := range rs {
			keyed[i] = r.Clone(r.Context())
			keyed[i].Header.Set("X-API-Key", fmt.Sprintf("key-%d", i))
		}
		serve(b, mustNew(b, l, httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil))), keyed)
	})
	b.Run("local-refused", func(b *testing.B) {
		l, _ := keyrate.New(1, time.Hour)
		defer l.Close()
		h := mustNew(b, l)
		for _, r := range rs {
			h.ServeHTTP(&discard{h: make(http.Header)}, r)
		}
		serve(b, h, rs)
	})
	b.Run("blocking", func(b *testing.B) { serve(b, mustNew(b, blockingAllowAll{}), rs) })
	second := keyrate.PolicyDecision{Policy: perSecond, Allowed: true, Remaining: 9, RefillAfter: time.Second, ResetAfter: time.Second}
	day := keyrate.PolicyDecision{Policy: perDay, Allowed: true, Remaining: 999, RefillAfter: 24 * time.Hour, ResetAfter: 24 * time.Hour}
	b.Run("overhead-1-policy", func(b *testing.B) {
		serve(b, mustNew(b, combined{policies: []keyrate.Policy{perSecond}, parts: []keyrate.PolicyDecision{second}}), rs)
	})
	b.Run("overhead-2-policies", func(b *testing.B) {
		serve(b, mustNew(b, combined{policies: []keyrate.Policy{perSecond, perDay}, parts: []keyrate.PolicyDecision{second, day}}), rs)
	})
}
