package grpclimit_test

import (
	"context"
	"errors"
	"github.com/keyrate/keyrate/middleware/adapter"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
	"github.com/keyrate/keyrate/middleware"
)

const generate = "/llm.Model/Generate"

// tokenBudget is the recipe's backend: requests a minute in the default
// tier, tokens a minute in middleware.TokensTier.
func tokenBudget(t *testing.T, requests, tokens int) *keyrate.Limiter {
	t.Helper()
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "rpm", Limit: requests, Window: time.Minute}},
		keyrate.WithClock(keyrate.NewManualClock(t0)),
		keyrate.WithTiers(middleware.TokenTier, map[string][]keyrate.Policy{
			middleware.TokensTier: {{Name: "tpm", Limit: tokens, Window: time.Minute}},
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// headerStream is a server stream that keeps the header metadata set on it.
type headerStream struct {
	grpc.ServerStream
	ctx context.Context
	md  metadata.MD
}

func (s *headerStream) Context() context.Context       { return s.ctx }
func (s *headerStream) SetHeader(md metadata.MD) error { s.md = md; return nil }

type tokensKey struct{}

// TestTokenBudget: a call counts against both budgets or neither, a
// reported cost gives back tokens alone, and the metadata carries both
// budgets, the RateLimit members and the model-API keys.
func TestTokenBudget(t *testing.T) {
	l := tokenBudget(t, 2, 1000)
	g, err := grpclimit.New(l, grpclimit.WithTokenBudget(), grpclimit.WithWeight(func(ctx context.Context, _ string, _ any) int {
		return ctx.Value(tokensKey{}).(int)
	}))
	if err != nil {
		t.Fatal(err)
	}
	base := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	key := generate + "\x00192.0.2.1"
	held := func() (int, int) {
		r, k := l.Peek(key+adapter.RequestsSuffix), l.Peek(key+adapter.TokensSuffix)
		return r.Remaining + 1, k.Remaining + 1
	}
	call := func(tokens, used int) (*headerStream, error) {
		ss := &headerStream{ctx: context.WithValue(base, tokensKey{}, tokens)}
		err := g.Stream()(nil, ss, &grpc.StreamServerInfo{FullMethod: generate}, func(_ any, ss grpc.ServerStream) error {
			return middleware.ReportWeight(ss.Context(), used)
		})
		return ss, err
	}

	ss, err := call(600, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r, k := held(); r != 1 || k != 900 {
		t.Errorf("after a call of 600 that used 100: %d requests and %d tokens left, want 1 and 900", r, k)
	}
	for k, want := range map[string]string{
		"ratelimit":                      `"rpm";r=1;t=60, "tpm";r=400;t=60`, // sent before the settle: what was reserved
		"ratelimit-policy":               `"rpm";q=2;w=60, "tpm";q=1000;w=60`,
		"x-ratelimit-limit-requests":     "2",
		"x-ratelimit-remaining-requests": "1",
		"x-ratelimit-reset-requests":     "1m0s",
		"x-ratelimit-limit-tokens":       "1000",
		"x-ratelimit-remaining-tokens":   "400",
		"x-ratelimit-reset-tokens":       "1m0s",
	} {
		if got := ss.md.Get(k); len(got) != 1 || got[0] != want {
			t.Errorf("metadata %s: %q, want %q", k, got, want)
		}
	}

	if _, err := call(901, 0); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call over the tokens left: %v, want ResourceExhausted", err)
	}
	if r, k := held(); r != 1 || k != 900 {
		t.Errorf("after a call the tokens refused: %d requests and %d tokens left, want 1 and 900", r, k)
	}
	if _, err := call(50, 50); err != nil {
		t.Fatal(err)
	}
	if _, err := call(50, 50); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third call in the minute: %v, want ResourceExhausted", err)
	}
	if d := l.Peek(key + adapter.TokensSuffix); d.Remaining+1 != 850 {
		t.Errorf("after a call the requests refused: %d tokens left, want 850", d.Remaining+1)
	}
}

// TestTokenBudgetNeedsTakeAll: every backend must take all.
func TestTokenBudgetNeedsTakeAll(t *testing.T) {
	plain := backendFunc(func(context.Context, string, int) (keyrate.Decision, error) {
		return keyrate.Decision{Allowed: true}, nil
	})
	if _, err := grpclimit.New(plain, grpclimit.WithTokenBudget()); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("a backend without TakeAll: %v, want ErrConfig", err)
	}
	l := tokenBudget(t, 1, 1)
	if _, err := grpclimit.New(l, grpclimit.WithTokenBudget(), grpclimit.WithMethod(generate, plain)); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("a method's backend without TakeAll: %v, want ErrConfig", err)
	}
}
