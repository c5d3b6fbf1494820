package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keyrate/keyrate"
	kbackend "github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/grpclimit"
)

var (
	perSecond = keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	perDay    = keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
)

// twoPolicies answers every call with the Decision its parts make, or with
// err when set, and lists the per-second and per-day policies as its own:
// a stand-in for a backend with several policies per key.
type twoPolicies struct {
	parts []keyrate.PolicyDecision
	err   error
}

func (b twoPolicies) TakeContext(context.Context, string, int) (keyrate.Decision, error) {
	if b.err != nil {
		return keyrate.Decision{}, b.err
	}
	return kbackend.Combine(b.parts...), nil
}
func (twoPolicies) Policies() []keyrate.Policy { return []keyrate.Policy{perSecond, perDay} }
func (twoPolicies) Tiered() bool               { return false }

func (twoPolicies) TimeBudget() time.Duration { return 0 }

// Under two policies the metadata lists both, named after the method and
// the policy, and a refusal by either carries a RetryInfo of exactly the
// Decision's RetryAfter: when the call fits every policy.
func TestTwoPoliciesInMetadata(t *testing.T) {
	type part = keyrate.PolicyDecision
	s := time.Second
	admittedSecond := part{Policy: perSecond, Allowed: true, Remaining: 4, RefillAfter: 200 * time.Millisecond, ResetAfter: s}
	admittedDay := part{Policy: perDay, Allowed: true, Remaining: 990, RefillAfter: 51840 * s, ResetAfter: 86000 * s}
	policy := `"second";q=10;w=1, "day";q=1000;w=86400`
	for _, c := range []struct {
		name      string
		parts     []part
		code      codes.Code
		rateLimit string
		retry     time.Duration // the RetryInfo delay; 0 for none
	}{
		{"admitted", []part{admittedSecond, admittedDay}, codes.OK,
			`"second";r=4;t=1, "day";r=990;t=51840`, 0},
		{"refused by the short one", []part{
			{Policy: perSecond, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond, ResetAfter: s}, admittedDay},
			codes.ResourceExhausted, `"second";r=0;t=1, "day";r=990;t=51840`, 300 * time.Millisecond},
		{"refused by the long one", []part{
			admittedSecond, {Policy: perDay, Remaining: 1, RetryAfter: 5*time.Hour + time.Millisecond, RefillAfter: time.Hour, ResetAfter: 86000 * s}},
			codes.ResourceExhausted, `"second";r=4;t=1, "day";r=1;t=18001`, 5*time.Hour + time.Millisecond},
		{"refused by both: the longer wait", []part{
			{Policy: perSecond, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond, ResetAfter: s},
			{Policy: perDay, RetryAfter: 2 * time.Hour, RefillAfter: time.Hour, ResetAfter: 86000 * s}},
			codes.ResourceExhausted, `"second";r=0;t=1, "day";r=0;t=7200`, 2 * time.Hour},
		{"can never fit the short one", []part{
			{Policy: perSecond, Remaining: 3, RefillAfter: 400 * time.Millisecond, ResetAfter: s}, admittedDay},
			codes.InvalidArgument, `"second";r=3;t=1, "day";r=990;t=51840`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := serve(t, mustNew(t, twoPolicies{parts: c.parts}))
			res := callCheck(t, ts.client(t, "127.0.0.1"))
			if res.code != c.code {
				t.Fatalf("%v %s, want %v", res.code, res.msg, c.code)
			}
			if got := res.header.Get("ratelimit-policy"); len(got) != 1 || got[0] != policy {
				t.Errorf("ratelimit-policy %q, want %q", got, policy)
			}
			if got, want := res.header.Get("ratelimit"), c.rateLimit; len(got) != 1 || got[0] != want {
				t.Errorf("ratelimit %q, want %q", got, want)
			}
			switch {
			case c.retry == 0 && res.retry != nil:
				t.Errorf("RetryInfo %v, want none", res.retry)
			case c.retry != 0 && (res.retry == nil || res.retry.GetRetryDelay().AsDuration() != c.retry):
				t.Errorf("RetryInfo %v, want a delay of %v", res.retry, c.retry)
			}
		})
	}
}

// A call served while the store is unavailable carries the backend's
// policies, both of them, and no ratelimit, which only a decision fills.
func TestFailOpenListsEveryPolicy(t *testing.T) {
	ts := serve(t, mustNew(t, twoPolicies{err: errors.New("store unavailable")}))
	res := callCheck(t, ts.client(t, "127.0.0.1"))
	want := `"second";q=10;w=1, "day";q=1000;w=86400`
	if res.code != codes.OK || first(res.header, "ratelimit-policy") != want || first(res.header, "ratelimit") != "" {
		t.Errorf("%v ratelimit-policy %q ratelimit %q, want OK, %q and no ratelimit", res.code,
			first(res.header, "ratelimit-policy"), first(res.header, "ratelimit"), want)
	}
	// A method with a backend of its own writes its value once, in New.
	lim := mustNew(t, twoPolicies{}, grpclimit.WithMethod(check, twoPolicies{err: errors.New("down")}))
	if res := callCheck(t, serve(t, lim).client(t, "127.0.0.1")); first(res.header, "ratelimit-policy") != want {
		t.Errorf("WithMethod: ratelimit-policy %q, want %q", first(res.header, "ratelimit-policy"), want)
	}
}
