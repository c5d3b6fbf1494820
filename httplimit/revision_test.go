package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// WithFieldRevision changes RateLimit's parameters and nothing else:
// RateLimit-Policy, Retry-After and the refusal are those of the default.
// Under Proposal166, c is the request's weight when admitted, 0 when
// refused.
func TestFieldRevision(t *testing.T) {
	run := func(opts ...httplimit.Option) []http.Header {
		l, clock := newLimiter(t, 5, time.Minute)
		h := newHandler(t, l, append([]httplimit.Option{httplimit.WithRoute("status"),
			httplimit.WithWeight(func(*http.Request) int { return 2 })}, opts...)...)
		var got []http.Header
		for range 3 {
			rec := get(h, "/")
			rec.Header().Set("X-Status", http.StatusText(rec.Code))
			got = append(got, rec.Header())
			clock.Advance(10 * time.Second)
		}
		return got
	}
	draft, proposal := run(), run(httplimit.WithFieldRevision(ratelimitfield.Proposal166))
	assert.Equal(t, draft, run(httplimit.WithFieldRevision(ratelimitfield.Draft10)), "Draft10 is the default")
	wantDraft := []string{`"status";r=3;t=60`, `"status";r=1;t=50`, `"status";r=1;t=40`}
	wantProposal := []string{`"status";a=3;w=60;c=2`, `"status";a=1;w=50;c=2`, `"status";a=1;w=40;c=0`}
	for i := range draft {
		assert.Equal(t, wantDraft[i], draft[i].Get("RateLimit"), "draft, request %d", i)
		assert.Equal(t, wantProposal[i], proposal[i].Get("RateLimit"), "proposal, request %d", i)
		for _, k := range []string{"RateLimit-Policy", "Retry-After", "X-Status", "Content-Type"} {
			assert.Equal(t, draft[i].Get(k), proposal[i].Get(k), "%s, request %d", k, i)
		}
	}
	assert.Equal(t, `"status";q=5;w=60`, proposal[0].Get("RateLimit-Policy"))
	assert.Equal(t, "Too Many Requests", proposal[2].Get("X-Status"))
}

func TestFieldRevisionUnknown(t *testing.T) {
	l, _ := newLimiter(t, 5, time.Minute)
	_, err := httplimit.New(l, httplimit.WithFieldRevision(ratelimitfield.Revision(7)))
	require.ErrorIs(t, err, keyrate.ErrConfig)
	assert.ErrorContains(t, err, "revision(7)")
}

// Nested middlewares of different revisions each append their own members.
func TestFieldRevisionNested(t *testing.T) {
	global, _ := newLimiter(t, 100, time.Hour)
	route, _ := newLimiter(t, 5, time.Minute)
	outer, err := httplimit.New(global, httplimit.WithRoute("global"))
	require.NoError(t, err)
	inner, err := httplimit.New(route, httplimit.WithRoute("search"), httplimit.WithFieldRevision(ratelimitfield.Proposal166))
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	outer.Handler(inner.Handler(okHandler)).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, []string{`"global";r=99;t=3600`, `"search";a=4;w=60;c=1`}, rec.Header().Values("RateLimit"))
}
