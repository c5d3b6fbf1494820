package grpclimit

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	kbackend "github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/ratelimitfield"
)

var (
	perSecond = keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	perDay    = keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
)

func TestFields(t *testing.T) {
	const m = "/pkg.S/M"
	type part = keyrate.PolicyDecision
	s := time.Second
	quota := func(limit int, window time.Duration) *backend {
		p := []keyrate.Policy{{Limit: limit, Window: window}}
		return &backend{policies: p, window: window}
	}
	known := quota(2, time.Minute)
	two := &backend{policies: []keyrate.Policy{perSecond, perDay}, window: time.Second}
	for _, tc := range []struct {
		name           string
		b              *backend
		d              keyrate.Decision
		policy, fields string
	}{
		{"admitted: t is the refill, rounded up", known,
			keyrate.Decision{Allowed: true, Limit: 2, Remaining: 1, RefillAfter: 2100 * time.Millisecond, ResetAfter: time.Minute},
			`"/pkg.S/M";q=2;w=60`, `"/pkg.S/M";r=1;t=3`},
		{"refused: t is the retry, rounded up", known,
			keyrate.Decision{Limit: 2, RetryAfter: 44200 * time.Millisecond, RefillAfter: 44200 * time.Millisecond, ResetAfter: 50 * time.Second},
			`"/pkg.S/M";q=2;w=60`, `"/pkg.S/M";r=0;t=45`},
		{"never fits: t is the refill", known,
			keyrate.Decision{Limit: 2, Remaining: 1, RefillAfter: 10 * time.Second},
			`"/pkg.S/M";q=2;w=60`, `"/pkg.S/M";r=1;t=10`},
		{"remaining below zero reads 0", known,
			keyrate.Decision{Limit: 2, Remaining: -3, RetryAfter: time.Second},
			`"/pkg.S/M";q=2;w=60`, `"/pkg.S/M";r=0;t=1`},
		{"window not whole seconds: no w", quota(5, 1500*time.Millisecond),
			keyrate.Decision{Allowed: true, Limit: 5, Remaining: 4, RefillAfter: 1500 * time.Millisecond},
			`"/pkg.S/M";q=5`, `"/pkg.S/M";r=4;t=2`},
		{"no quota: the decision's limit, no w; nothing held, no t", &backend{},
			keyrate.Decision{Allowed: true, Limit: 7, Remaining: 6},
			`"/pkg.S/M";q=7`, `"/pkg.S/M";r=6`},
		{"no limit known at all: no policy", &backend{},
			keyrate.Decision{Allowed: true},
			``, `"/pkg.S/M";r=0`},
		{"two policies, admitted", two,
			kbackend.Combine(
				part{Policy: perSecond, Allowed: true, Remaining: 9, RefillAfter: s, ResetAfter: s},
				part{Policy: perDay, Allowed: true, Remaining: 990, RefillAfter: 51840 * s, ResetAfter: 86000 * s}),
			`"second";q=10;w=1, "day";q=1000;w=86400`, `"second";r=9;t=1, "day";r=990;t=51840`},
		{"two policies, refused by the long one: its t is the retry", two,
			kbackend.Combine(
				part{Policy: perSecond, Allowed: true, Remaining: 4, RefillAfter: 200 * time.Millisecond, ResetAfter: s},
				part{Policy: perDay, Remaining: 1, RetryAfter: 5*time.Hour + time.Millisecond, RefillAfter: time.Hour, ResetAfter: 86000 * s}),
			`"second";q=10;w=1, "day";q=1000;w=86400`, `"second";r=4;t=1, "day";r=1;t=18001`},
		{"a tier's policies, not the backend's", two,
			kbackend.Combine(part{Policy: keyrate.Policy{Name: "pro", Limit: 100, Window: time.Minute}, Allowed: true, Remaining: 99, RefillAfter: time.Minute}),
			`"pro";q=100;w=60`, `"pro";r=99;t=60`},
	} {
		for _, kept := range []bool{true, false} {
			md := newRoute(m, tc.b, kept).fields(&tc.d, ratelimitfield.Draft10, 1)
			if got := md.Get(mdPolicy); tc.policy == "" && len(got) != 0 || tc.policy != "" && (len(got) != 1 || got[0] != tc.policy) {
				t.Errorf("%s (kept %v): ratelimit-policy %q, want %q", tc.name, kept, got, tc.policy)
			}
			if got := md.Get(mdRateLimit); len(got) != 1 || got[0] != tc.fields {
				t.Errorf("%s (kept %v): ratelimit %q, want %q", tc.name, kept, got, tc.fields)
			}
		}
	}
}

// TestCalendarPolicyField: a calendar policy's w is its current period's
// length, which a kept route cannot write ahead: each decision writes its
// own.
func TestCalendarPolicyField(t *testing.T) {
	month := keyrate.Policy{Name: "month", Limit: 100, Calendar: keyrate.Monthly(1, time.UTC)}
	b := &backend{policies: []keyrate.Policy{month}}
	d := kbackend.Combine(keyrate.PolicyDecision{Policy: month, Allowed: true, Remaining: 99,
		Period: 28 * 24 * time.Hour, ResetAfter: time.Hour, RefillAfter: time.Hour})
	for _, kept := range []bool{true, false} {
		md := newRoute("/pkg.S/M", b, kept).fields(&d, ratelimitfield.Draft10, 1)
		if got, want := md.Get(mdPolicy), `"month";q=100;w=2419200`; len(got) != 1 || got[0] != want {
			t.Errorf("kept %v: ratelimit-policy %q, want %q", kept, got, want)
		}
	}
}

// Method names come from clients behind grpc.UnknownServiceHandler: bytes
// a structured-field string cannot hold are written as '?'.
func TestMethodNameInFields(t *testing.T) {
	for in, want := range map[string]string{
		"/pkg.S/M":      `"/pkg.S/M";r=0`,
		`/a"b\c/M`:      `"/a\"b\\c/M";r=0`,
		"/a\x00b/\xffM": `"/a?b/?M";r=0`,
	} {
		d := keyrate.Decision{Allowed: true}
		if got := newRoute(in, &backend{}, false).fields(&d, ratelimitfield.Draft10, 1).Get(mdRateLimit); len(got) != 1 || got[0] != want {
			t.Errorf("method %q: ratelimit %q, want %s", in, got, want)
		}
	}
}
