package backend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// The package hands on the core's own implementations: each answers as the
// core does.
func TestTheCoresImplementations(t *testing.T) {
	if err := backend.CheckPolicies("policies", nil); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("CheckPolicies of none: %v, want ErrConfig", err)
	}
	if err := backend.CheckPolicies("", []keyrate.Policy{{Limit: 1, Window: time.Second}}); err != nil {
		t.Errorf("CheckPolicies of a valid policy: %v", err)
	}
	p := keyrate.PolicyDecision{Policy: keyrate.Policy{Limit: 3, Window: time.Second}, Allowed: true, Remaining: 2}
	if d := backend.Combine(p); !d.Allowed || d.Remaining != 2 || len(d.Policies()) != 1 {
		t.Errorf("Combine of one part: %+v", d)
	}
	if d := backend.Combine(); d.Allowed || len(d.Policies()) != 0 {
		t.Errorf("Combine of none: %+v, want the zero Decision", d)
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := backend.NewReceipt(at, 3, 42)
	if !backend.ReceiptAt(r).Equal(at) || r.N() != 3 || backend.ReceiptID(r) != 42 {
		t.Errorf("a Receipt reads %v, %d, %d; want %v, 3, 42", backend.ReceiptAt(r), r.N(), backend.ReceiptID(r), at)
	}
	start, end := backend.Period(keyrate.Daily(time.UTC), at.Add(time.Hour))
	if !start.Equal(at) || !end.Equal(at.AddDate(0, 0, 1)) {
		t.Errorf("Period: [%v, %v), want the day of %v", start, end, at)
	}
	if field, err := backend.TierField("pro", false); field != "" || !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("TierField without tiers: %q, %v", field, err)
	}
	ctx := backend.ContextWithIdentity(context.Background(), "pro-1")
	if id, ok := backend.IdentityFromContext(ctx); id != "pro-1" || !ok {
		t.Errorf("IdentityFromContext: %q, %v", id, ok)
	}
	plan := func(key string) string { return key[:3] }
	if got := backend.TierOf(ctx, plan, "key"); got != "pro" {
		t.Errorf("TierOf reads the identity: %q, want pro", got)
	}
	if got := backend.TierOf(context.Background(), func(string) string { panic("no") }, "key"); got != "" {
		t.Errorf("TierOf of a panicking tier function: %q, want the default", got)
	}
}
