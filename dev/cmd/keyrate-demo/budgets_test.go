package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modelFields returns the six fields a model-API client reads, as
// "limit remaining reset" for the requests, then for the tokens.
func modelFields(rec *httptest.ResponseRecorder) [2]string {
	var out [2]string
	for i, b := range []string{"requests", "tokens"} {
		h := rec.Header()
		out[i] = h.Get("X-Ratelimit-Limit-"+b) + " " + h.Get("X-Ratelimit-Remaining-"+b) + " " + h.Get("X-Ratelimit-Reset-"+b)
	}
	return out
}

// checkAllOrNothing drives /api/generate's two budgets, 20 requests and
// 10,000 tokens a minute, on a and b (the same server, or two replicas of
// one Redis): a request refused by the requests spends no tokens, and one
// refused by the tokens no request.
func checkAllOrNothing(t *testing.T, a, b http.Handler) {
	t.Helper()
	for i := range 20 {
		rec := generate([]http.Handler{a, b}[i%2], "max_tokens=100&used=50", "X-API-Key", "bob")
		require.Equal(t, 200, rec.Code, "request %d: %s", i+1, rec.Body)
		assert.Equal(t, [2]string{"20 " + strconv.Itoa(19-i) + " 1m0s", "10000 " + strconv.Itoa(9950-50*i) + " 1m0s"}, modelFields(rec),
			"request %d, settled before its status went out", i+1)
	}
	rec := generate(b, "max_tokens=100&used=50", "X-API-Key", "bob")
	require.Equal(t, 429, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"violated-policies":["generate-requests"]`)
	h := rec.Header()
	assert.Equal(t, "0", h.Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, "9000", h.Get("X-Ratelimit-Remaining-Tokens"), "the 20 requests kept 50 each; the refused one reserved nothing")
	assert.Equal(t, `"tokens-minute";r=9000;t=60`, member(h, "RateLimit", "tokens-minute"))

	rec = generate(a, "max_tokens=10000&used=10000", "X-API-Key", "carol")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	rec = generate(b, "max_tokens=1", "X-API-Key", "carol")
	require.Equal(t, 429, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"violated-policies":["tokens-minute"]`)
	assert.Equal(t, "19", rec.Header().Get("X-Ratelimit-Remaining-Requests"), "the tokens refused it: it counts as no request")
	assert.Equal(t, `"generate-requests";r=19;t=60`, member(rec.Header(), "RateLimit", "generate-requests"))
}

// /api/generate counts each request against its client's requests a
// minute and tokens a minute at once, or against neither, in process.
func TestGenerateBudgetsAllOrNothing(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, _ := newTestServer(t, config{Clock: clock})
	checkAllOrNothing(t, h, h)
}

// On Redis the two budgets are decided in one script run, shared by the
// replicas: all or nothing there too.
func TestRedisGenerateBudgetsAllOrNothing(t *testing.T) {
	client, _ := startRedis(t)
	a, _ := newTestServer(t, config{Redis: client})
	b, _ := newTestServer(t, config{Redis: client})
	checkAllOrNothing(t, a, b)
}

// The fields list the in-flight limit and both budgets, and the page gets
// each budget with every decision and every settle: requests, tokens, and
// the slots in flight, this request's among them.
func TestGenerateBudgetsPublished(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, seen := newTestServer(t, config{Clock: clock})
	rec := generate(h, "max_tokens=2000&used=500", "X-API-Key", "pro-dana")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, []string{`"generate-inflight";q=4;qu="concurrent-requests"`, `"generate-requests";q=20;w=60, "tokens-minute";q=50000;w=60, "tokens-day";q=1000000;w=86400, "tokens-month";q=10000000;w=2678400`},
		rec.Header().Values("RateLimit-Policy"), "a pro key's tokens, the same requests")
	assert.Equal(t, `"generate-requests";r=19;t=60, "tokens-minute";r=49500;t=60, "tokens-day";r=999500;t=86400, "tokens-month";r=9999500;t=1209600`, rec.Header().Get("RateLimit"))
	assert.Equal(t, [2]string{"20 19 1m0s", "50000 49500 1m0s"}, modelFields(rec), "settled before the status went out")

	require.Len(t, *seen, 2)
	d, s := (*seen)[0], (*seen)[1]
	assert.Equal(t, []live.Budget{
		{Name: "requests", Unit: "requests", Limit: 20, Remaining: 19, Allowed: true, WindowMs: 60_000, ResetAfterMs: 60_000},
		{Name: "tokens", Unit: "tokens", Limit: 50_000, Remaining: 48_000, Allowed: true, WindowMs: 60_000, ResetAfterMs: 60_000},
		// 2025-01-01 00:00 UTC: a whole day ahead, and the month from
		// December 15 to January 15, its turn 14 days off.
		{Name: "tokens-day", Unit: "tokens", Limit: 1_000_000, Remaining: 998_000, Allowed: true, WindowMs: 86_400_000, ResetAfterMs: 86_400_000},
		{Name: "tokens-month", Unit: "tokens", Limit: 10_000_000, Remaining: 9_998_000, Allowed: true, WindowMs: 31 * 86_400_000, ResetAfterMs: 14 * 86_400_000},
		{Name: "in flight", Unit: "requests", Limit: 4, Remaining: 3, Allowed: true},
	}, d.Budgets)
	assert.Equal(t, 48_000, d.Decision.Remaining, "the page's lane is the tokens budget's")
	require.NotNil(t, s.Refund)
	assert.Equal(t, 1500, s.Given)
	assert.Equal(t, []live.Budget{
		{Name: "requests", Unit: "requests", Limit: 20, Remaining: 19, Allowed: true, WindowMs: 60_000, ResetAfterMs: 60_000},
		{Name: "tokens", Unit: "tokens", Limit: 50_000, Remaining: 49_500, Allowed: true, WindowMs: 60_000, ResetAfterMs: 60_000},
		{Name: "tokens-day", Unit: "tokens", Limit: 1_000_000, Remaining: 999_500, Allowed: true, WindowMs: 86_400_000, ResetAfterMs: 86_400_000},
		{Name: "tokens-month", Unit: "tokens", Limit: 10_000_000, Remaining: 9_999_500, Allowed: true, WindowMs: 31 * 86_400_000, ResetAfterMs: 14 * 86_400_000},
	}, s.Budgets)
}
