package grpclimit

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

func TestFields(t *testing.T) {
	const m = "/pkg.S/M"
	known := &backend{limit: 2, window: time.Minute}
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
		{"window not whole seconds: no w", &backend{limit: 5, window: 1500 * time.Millisecond},
			keyrate.Decision{Allowed: true, Limit: 5, Remaining: 4, RefillAfter: 1500 * time.Millisecond},
			`"/pkg.S/M";q=5`, `"/pkg.S/M";r=4;t=2`},
		{"no quota: the decision's limit, no w", &backend{},
			keyrate.Decision{Allowed: true, Limit: 7, Remaining: 6},
			`"/pkg.S/M";q=7`, `"/pkg.S/M";r=6;t=0`},
		{"no limit known at all: no policy", &backend{},
			keyrate.Decision{Allowed: true},
			``, `"/pkg.S/M";r=0;t=0`},
	} {
		md := newRoute(m, tc.b).fields(tc.d)
		if got := md.Get(mdPolicy); tc.policy == "" && len(got) != 0 || tc.policy != "" && (len(got) != 1 || got[0] != tc.policy) {
			t.Errorf("%s: ratelimit-policy %q, want %q", tc.name, got, tc.policy)
		}
		if got := md.Get(mdRateLimit); len(got) != 1 || got[0] != tc.fields {
			t.Errorf("%s: ratelimit %q, want %q", tc.name, got, tc.fields)
		}
	}
}

func TestSfString(t *testing.T) {
	for in, want := range map[string]string{
		"/pkg.S/M":      `"/pkg.S/M"`,
		`/a"b\c/M`:      `"/a\"b\\c/M"`,
		"/a\x00b/\xffM": `"/a?b/?M"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}
