package grpclimit_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// WithFieldRevision changes the ratelimit metadata's parameters and
// nothing else: Proposal166's a, w and c (the call's weight when admitted,
// 0 when refused) over a real connection, ratelimit-policy and the refusal
// as by default.
func TestFieldRevision(t *testing.T) {
	l, clock := manualLimiter(t, 2, time.Minute)
	ts := serve(t, mustNew(t, l, grpclimit.WithFieldRevision(ratelimitfield.Proposal166)))
	alice := ts.client(t, "127.0.0.1")
	for i, want := range []string{`"` + check + `";a=1;w=60;c=1`, `"` + check + `";a=0;w=50;c=1`} {
		res := callCheck(t, alice)
		if res.code != codes.OK || first(res.header, "ratelimit") != want || first(res.header, "ratelimit-policy") != `"`+check+`";q=2;w=60` {
			t.Errorf("call %d: %v, ratelimit %q, ratelimit-policy %q; want OK and %q", i+1, res.code, first(res.header, "ratelimit"), first(res.header, "ratelimit-policy"), want)
		}
		clock.Advance(10 * time.Second)
	}
	res := callCheck(t, alice)
	if want := `"` + check + `";a=0;w=40;c=0`; res.code != codes.ResourceExhausted || first(res.header, "ratelimit") != want {
		t.Errorf("refused: %v, ratelimit %q; want ResourceExhausted and %q", res.code, first(res.header, "ratelimit"), want)
	}
	if res.retry == nil || res.retry.GetRetryDelay().AsDuration() != 40*time.Second {
		t.Errorf("refused: RetryInfo %v, want 40s", res.retry)
	}

	if _, err := grpclimit.New(l, grpclimit.WithFieldRevision(ratelimitfield.Revision(5))); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("an unknown revision: %v, want keyrate.ErrConfig", err)
	}
}
