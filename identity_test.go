package keyrate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate/internal/identity"
)

// plan is the README's tier function: keys that start with "pro-" are pro.
func plan(key string) string {
	if strings.HasPrefix(key, "pro-") {
		return "pro"
	}
	return ""
}

// The tier function sees the identity a context carries, in TakeContext
// and WaitN, and the key everywhere else; the budget is the key's either
// way.
func TestTierSeesContextIdentity(t *testing.T) {
	l, _ := newPolicies(t, []Policy{{Name: "minute", Limit: 2, Window: time.Minute}},
		WithTiers(plan, map[string][]Policy{"pro": {{Name: "minute", Limit: 5, Window: time.Minute}}}))
	const search, status = "search\x00x-api-key=pro-42", "status\x00x-api-key=pro-42"
	pro := identity.With(context.Background(), "pro-42")

	d, err := l.TakeContext(pro, search, 1)
	if err != nil || d.Limit != 5 || d.Remaining != 4 {
		t.Fatalf("TakeContext with the identity: %+v, %v; want the pro limit of 5, 4 left", d, err)
	}
	// A context derived from it, as a time budget makes, still carries it.
	budget, cancel := context.WithTimeout(pro, time.Minute)
	defer cancel()
	if d, _ := l.TakeContext(budget, search, 1); d.Limit != 5 || d.Remaining != 3 {
		t.Errorf("TakeContext under a derived context: %+v, want the pro limit, 3 left", d)
	}
	// Without it, the key decides, and this key does not start with "pro-".
	if d, _ := l.TakeContext(context.Background(), search, 1); d.Limit != 2 || d.Allowed {
		t.Errorf("TakeContext without the identity: %+v, want refused under the free limit of 2", d)
	}
	if d := l.Take(search, 1); d.Limit != 2 {
		t.Errorf("Take: %+v, want the free limit of 2", d)
	}
	// Another key with the same identity is another budget.
	if d, _ := l.TakeContext(pro, status, 1); d.Limit != 5 || d.Remaining != 4 {
		t.Errorf("another key with the same identity: %+v, want a fresh pro budget", d)
	}
	// WaitN: a weight of 4 fits the pro limit alone.
	if err := l.WaitN(pro, "export", 4); err != nil {
		t.Errorf("WaitN(4) with the pro identity: %v", err)
	}
	if err := l.WaitN(context.Background(), "export", 4); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("WaitN(4) without it: %v, want ErrExceedsLimit", err)
	}
}

// A limiter without tiers decides by the key alone: an identity changes
// nothing.
func TestUntieredIgnoresIdentity(t *testing.T) {
	l, _ := newPolicies(t, []Policy{{Name: "minute", Limit: 2, Window: time.Minute}})
	pro := identity.With(context.Background(), "pro-42")
	for i, want := range []bool{true, true, false} {
		if d, err := l.TakeContext(pro, "k", 1); err != nil || d.Allowed != want || d.Limit != 2 {
			t.Fatalf("call %d: %+v, %v; want allowed %v under the limit of 2", i, d, err, want)
		}
	}
}

func TestIdentityFrom(t *testing.T) {
	if id, ok := identity.From(context.Background()); ok || id != "" {
		t.Errorf("a bare context: %q, %v; want none", id, ok)
	}
	ctx := identity.With(context.Background(), "")
	if id, ok := identity.From(ctx); !ok || id != "" {
		t.Errorf("an empty identity: %q, %v; want it, present", id, ok)
	}
	type other struct{}
	ctx = context.WithValue(identity.With(ctx, "alice"), other{}, "v")
	if id, ok := identity.From(ctx); !ok || id != "alice" || ctx.Value(other{}) != "v" {
		t.Errorf("under a value: %q, %v; want the nearer identity, alice", id, ok)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if <-cctx.Done(); cctx.Err() != context.Canceled || ctx.Err() != nil {
		t.Errorf("cancellation crossed the identity the wrong way")
	}
}
