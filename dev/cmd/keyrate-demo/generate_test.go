package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// generate posts the form body to /api/generate, with header name and
// value pairs.
func generate(h http.Handler, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/generate", strings.NewReader(body))
	r.Header.Set("Content-Type", form)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// member returns the member of the list field named name on h, as
// /api/generate writes both budgets' (and the in-flight limit's) in one.
func member(h http.Header, field, name string) string {
	for _, m := range strings.Split(strings.Join(h.Values(field), ", "), ", ") {
		if strings.HasPrefix(m, strconv.Quote(name)+";") {
			return m
		}
	}
	return ""
}

// generated is /api/generate's answer.
type generated struct {
	Reserved, Used int
	Settled        bool
}

func answer(t *testing.T, rec *httptest.ResponseRecorder) generated {
	t.Helper()
	var g generated
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &g), "body %s", rec.Body)
	return g
}

// /api/generate reserves max_tokens of 10,000 tokens a minute and keeps
// what the request used: the RateLimit fields sent say what it left, the
// next request finds the tokens given back, and the budget is exact at its
// edge. A used above max_tokens counts as max_tokens, a used of 0 gives
// the whole reservation back; the trace runs on a manual clock.
func TestGenerateSettles(t *testing.T) {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, seen := newTestServer(t, config{Clock: clock})
	for _, step := range []struct {
		body      string
		code      int
		rateLimit string
		want      generated
	}{
		{"max_tokens=2000&used=500", 200, `"tokens-minute";r=9500;t=60`, generated{2000, 500, true}},
		{"max_tokens=9500", 200, `"tokens-minute";r=7125;t=60`, generated{9500, 2375, true}}, // a quarter of it, by default
		{"max_tokens=7126&used=1", 429, `"tokens-minute";r=7125;t=60`, generated{}},          // one over what is left
		{"max_tokens=7125&used=7125", 200, `"tokens-minute";r=0;t=60`, generated{7125, 7125, true}},
		{"max_tokens=1", 429, `"tokens-minute";r=0;t=60`, generated{}},
	} {
		rec := generate(h, step.body)
		require.Equal(t, step.code, rec.Code, "%s: %s", step.body, rec.Body)
		assert.Equal(t, `"tokens-minute";q=10000;w=60`, member(rec.Header(), "RateLimit-Policy", "tokens-minute"), step.body)
		assert.Equal(t, step.rateLimit, member(rec.Header(), "RateLimit", "tokens-minute"), step.body)
		if step.code == 200 {
			assert.Equal(t, step.want, answer(t, rec), step.body)
		} else {
			assert.Equal(t, "60", rec.Header().Get("Retry-After"), step.body)
		}
	}

	// The first request's decision, then its settle, published: 2,000
	// reserved, 1,500 given back from its own receipt.
	require.GreaterOrEqual(t, len(*seen), 2)
	d, s := (*seen)[0], (*seen)[1]
	assert.True(t, d.Decision.Allowed)
	assert.Equal(t, 2000, d.Cost)
	assert.Equal(t, 8000, d.Decision.Remaining)
	assert.Nil(t, d.Refund)
	require.NotNil(t, s.Refund)
	assert.Equal(t, d.Decision.Receipt, *s.Refund)
	assert.Equal(t, 1500, s.Given)
	assert.True(t, s.Settle)
	assert.Equal(t, 9500, s.Decision.Remaining)
	var log strings.Builder
	decisionLogger(&log)(s)
	assert.Contains(t, log.String(), `generate "192.0.2.1"            settled  remaining=9500 (gave back 1500 of 2000: it cost 500)`)

	clock.Advance(time.Minute)
	rec := generate(h, "max_tokens=100&used=500")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, generated{100, 100, true}, answer(t, rec), "a used above max_tokens counts as max_tokens")
	assert.Equal(t, `"tokens-minute";r=9900;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"))

	n := len(*seen)
	rec = generate(h, "max_tokens=3000&used=0")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, generated{3000, 0, true}, answer(t, rec))
	assert.Equal(t, `"tokens-minute";r=9900;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"), "a request that used nothing costs nothing")
	require.Len(t, *seen, n+2)
	whole := (*seen)[n+1]
	require.NotNil(t, whole.Refund)
	assert.Equal(t, 3000, whole.Refund.N())
	assert.Equal(t, 3000, whole.Given, "given back whole")
}

// A max_tokens that cannot be read (missing, not a whole number, below 1,
// in a body over 4 KiB) weighs what can never be admitted: 413 saying what
// is wrong, and nothing reserved; one above the client's limit gets
// httplimit's 413, and fits a pro key's. A used that cannot be read gets
// 400, and the request keeps all it reserved.
func TestGenerateRefusesWhatItCannotRead(t *testing.T) {
	h, seen := newTestServer(t, config{})
	for _, body := range []string{
		"", "used=5", "max_tokens=", "max_tokens=abc", "max_tokens=0", "max_tokens=-5", "max_tokens=2.5", "max_tokens=1e3",
		"max_tokens=99999999999999999999", "max_tokens=100&pad=" + strings.Repeat("x", maxGenerateBody),
	} {
		rec := generate(h, body)
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, "%.40q: %s", body, rec.Body)
		assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		assert.Contains(t, rec.Body.String(), "max_tokens must be a whole number", body)
		assert.Empty(t, rec.Header().Get("Retry-After"), "no wait would help")
	}
	var log strings.Builder
	decisionLogger(&log)((*seen)[0])
	assert.Contains(t, log.String(), "refused  remaining=10000, a cost that can never fit")
	rec := generate(h, "max_tokens=10001")
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "costs more than the limit of 10000")
	rec = generate(h, "max_tokens=10001&used=1", "X-API-Key", "pro-alice")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, `"tokens-minute";q=50000;w=60`, member(rec.Header(), "RateLimit-Policy", "tokens-minute"))
	assert.Equal(t, `"tokens-minute";r=49999;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"))

	for i, used := range []string{"x", "-1", "1.5"} {
		rec := generate(h, "max_tokens=100&used="+used)
		require.Equal(t, http.StatusBadRequest, rec.Code, "used=%s: %s", used, rec.Body)
		assert.Contains(t, rec.Body.String(), "used must be a whole number")
		assert.Equal(t, `"tokens-minute";r=`+[]string{"9900", "9800", "9700"}[i]+`;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"),
			"used=%s keeps its 100 reserved, and the 413s before reserved nothing", used)
	}
}

// The page's configuration says that generate weighs its requests in
// tokens and offers a burst of 5, and its stream carries a request's
// decision with its weight, then its settle: the decision's receipt, what
// it held, what it gave back, and what it still holds.
func TestGenerateOnThePage(t *testing.T) {
	srv, client := startLiveDemo(t)

	resp, err := client.Get(srv.URL + "/live/config")
	require.NoError(t, err)
	var cfg struct {
		Routes []struct {
			Name, Method, Path, Note, Unit string
			Refunds                        bool
			Burst                          int
			Form                           map[string]string
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	require.NoError(t, err)
	found := false
	for _, r := range cfg.Routes {
		if r.Name != "generate" {
			continue
		}
		found = true
		assert.Equal(t, "POST", r.Method)
		assert.Equal(t, "/api/generate", r.Path)
		assert.Equal(t, "tokens", r.Unit)
		assert.Equal(t, 5, r.Burst)
		assert.True(t, r.Refunds, "a request that used nothing is given back whole")
		assert.Equal(t, map[string]string{"max_tokens": "2000", "used": "500"}, r.Form)
		assert.Contains(t, r.Note, "reserves its max_tokens")
		assert.NotContains(t, r.Note, "cannot give part")
	}
	require.True(t, found, "the page has no generate route")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/live/events", nil)
	stream, err := client.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	lines := bufio.NewScanner(stream.Body)

	resp, err = client.Post(srv.URL+"/api/generate", form, strings.NewReader("max_tokens=2000&used=500"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"tokens-minute";r=9500;t=60`, member(resp.Header, "RateLimit", "tokens-minute"))

	events := liveEvents(t, lines, 2)
	require.Len(t, events, 2, "stream ended: %v", lines.Err())
	d, s := events[0], events[1]
	assert.Equal(t, liveEvent{name: "decision", Route: "generate", Receipt: d.Receipt, Allowed: true, Limit: 10_000, Remaining: 8000, Weight: 2000}, d)
	assert.NotEmpty(t, d.Receipt)
	assert.Equal(t, liveEvent{name: "refund", Route: "generate", Receipt: d.Receipt, Rest: s.Rest, Allowed: true, Limit: 10_000, Remaining: 9500, Weight: 2000, Given: 1500}, s)
	assert.NotEmpty(t, s.Rest)
	assert.NotEqual(t, d.Receipt, s.Rest, "what the decision still holds is named anew")
}

// On Redis the tokens a request did not use go back in Redis, so that
// replicas share what is left.
func TestRedisGenerateSettles(t *testing.T) {
	client, _ := startRedis(t)
	a, seen := newTestServer(t, config{Redis: client})
	b, _ := newTestServer(t, config{Redis: client})
	hub, err := newLive(config{Redis: client})
	require.NoError(t, err)
	t.Cleanup(hub.Close)
	rec := httptest.NewRecorder()
	hub.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/live/config", nil))
	var cfg struct{ Routes []struct{ Name, Note string } }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &cfg))
	note := ""
	for _, r := range cfg.Routes {
		if r.Name == "generate" {
			note = r.Note
		}
	}
	hint := hints("http://127.0.0.1:8080", config{Redis: client})

	rec = generate(a, "max_tokens=2000&used=500", "X-API-Key", "alice")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, generated{2000, 500, true}, answer(t, rec))
	assert.Equal(t, `"tokens-minute";r=9500;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"))
	assert.NotContains(t, note, "cannot give part")
	assert.Contains(t, hint, "/api/generate 10000 tokens per 60s (tokens-minute) and 200000 tokens daily in UTC (tokens-day) and 2000000 tokens monthly on day 15 in UTC (tokens-month); 50000 tokens per 60s (tokens-minute) and 1000000 tokens daily in UTC (tokens-day) and 10000000 tokens monthly on day 15 in UTC (tokens-month) for a key starting with pro-, reserved and then settled")
	require.Len(t, *seen, 2)
	s := (*seen)[1]
	require.NotNil(t, s.Refund)
	assert.Equal(t, 2000, s.Refund.N())
	assert.Equal(t, 1500, s.Given)
	assert.Equal(t, 9500, s.Decision.Remaining)

	// The other replica finds the 1,500 given back, and a request there
	// that used nothing is given back whole.
	rec = generate(b, "max_tokens=3000&used=0", "X-API-Key", "alice")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, `"tokens-minute";r=9500;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"))
	rec = generate(b, "max_tokens=9500&used=9500", "X-API-Key", "alice")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, `"tokens-minute";r=0;t=60`, member(rec.Header(), "RateLimit", "tokens-minute"))
	rec = generate(a, "max_tokens=1", "X-API-Key", "alice")
	assert.Equal(t, 429, rec.Code, "the budget is spent, on both replicas")
}
