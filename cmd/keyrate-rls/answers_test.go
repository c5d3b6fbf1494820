package main

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyrate/keyrate"
)

// newHarnessOpts returns a service on a manual clock with opts.
func newHarnessOpts(t *testing.T, config string, opts serviceOptions) *harness {
	t.Helper()
	clock := keyrate.NewManualClock(t0)
	st, err := newLimiterStore(0, clock, minMaxWindow)
	require.NoError(t, err)
	opts.clock = clock
	h := newHarnessWith(t, st, config, opts)
	h.clock = clock
	return h
}

// A request is refused by its quota_mode descriptors only when every one
// of them is over its limit; let through, it counts against those with
// room. A descriptor in no such mode refuses as always.
func TestQuotaMode(t *testing.T) {
	h := newHarness(t, "quota.yaml")
	plans := request("quota", desc("plan", "free"), desc("plan", "team"))
	h.trace(t, []step{
		{0, plans, "OK | OK 0/1 MINUTE t=1m0s | OK 1/2 MINUTE t=1m0s"},
		{time.Second, plans, "OK | OVER_LIMIT 0/1 MINUTE t=59s | OK 0/2 MINUTE t=59s"},
		{2 * time.Second, plans, "OVER_LIMIT | OVER_LIMIT 0/1 MINUTE t=58s | OVER_LIMIT 0/2 MINUTE t=58s"},
		// The one quota descriptor is over: refused, and the route counts
		// nothing.
		{3 * time.Second, request("quota", desc("route", "r"), desc("plan", "free")), "OVER_LIMIT | OK 3/3 MINUTE route t=0s | OVER_LIMIT 0/1 MINUTE t=57s"},
		// A minute on, the first hits have left; team's second has not.
		{time.Minute, plans, "OK | OK 0/1 MINUTE t=1m0s | OK 0/2 MINUTE t=1s"},
	})
}

// QUOTA_MODE puts every descriptor in quota mode.
func TestGlobalQuotaMode(t *testing.T) {
	h := newHarnessOpts(t, fivePerMinute, serviceOptions{quota: true})
	heavy := desc("k", "x")
	heavy.HitsAddend = wrapperspb.UInt64(6)
	h.trace(t, []step{
		// A weight above the limit: the reset is the window, never 0.
		{0, request("d", heavy), "OVER_LIMIT | OVER_LIMIT 5/5 MINUTE t=1m0s"},
		{0, request("d", heavy, desc("k", "y")), "OK | OVER_LIMIT 5/5 MINUTE t=1m0s | OK 4/5 MINUTE t=1m0s"},
	})
}

// SHADOW_MODE answers OK overall whatever the descriptors say, and counts
// as if it enforced: a refusal still records nothing.
func TestGlobalShadowMode(t *testing.T) {
	h := newHarnessOpts(t, fivePerMinute, serviceOptions{shadow: true})
	r := request("d", desc("k", "x"))
	for range 5 {
		h.ask(t, r)
	}
	h.trace(t, []step{
		{0, r, "OK | OVER_LIMIT 0/5 MINUTE t=1m0s"},
		// Only the five admitted counted: a minute on, all have left.
		{time.Minute, r, "OK | OK 4/5 MINUTE t=1m0s"},
	})
	assert.Equal(t, 1.0, testutil.ToFloat64(h.m.globalShadow))
}

// LIMIT_RESPONSE_HEADERS_ENABLED adds envoyproxy/ratelimit's three headers
// for the descriptor closest to its limit, the one that refused when one
// did; -ratelimit-fields adds the IETF fields, a member per limit.
func TestResponseHeaders(t *testing.T) {
	const config = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5}
      - {name: daily, unit: day, requests_per_unit: 100}
`
	peer := responseHeaders{limit: "X-Limit", remaining: "X-Remaining", reset: "X-Reset"}
	h := newHarnessOpts(t, config, serviceOptions{headers: responseHeaders{limit: peer.limit, remaining: peer.remaining, reset: peer.reset, fields: true}})
	ask := func(at time.Duration) []*corev3.HeaderValue {
		h.clock.Set(t0.Add(at))
		resp, err := h.svc.ShouldRateLimit(context.Background(), request("d", desc("a", "x"), desc("b", "y")))
		require.NoError(t, err)
		return resp.GetResponseHeadersToAdd()
	}
	headers := func(kv ...string) []*corev3.HeaderValue {
		var hs []*corev3.HeaderValue
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, &corev3.HeaderValue{Key: kv[i], Value: kv[i+1]})
		}
		return hs
	}
	equal := func(want, got []*corev3.HeaderValue) {
		t.Helper()
		require.Len(t, got, len(want))
		for i := range want {
			assert.Equal(t, want[i].GetKey(), got[i].GetKey())
			assert.Equal(t, want[i].GetValue(), got[i].GetValue(), want[i].GetKey())
		}
	}
	equal(headers("X-Limit", "2", "X-Remaining", "1", "X-Reset", "60",
		"RateLimit-Policy", `"a";q=2;w=60, "burst";q=5;w=1, "daily";q=100;w=86400`,
		"RateLimit", `"a";r=1;t=60, "burst";r=4;t=1, "daily";r=99;t=86400`), ask(0))
	ask(10 * time.Second)
	equal(headers("X-Limit", "2", "X-Remaining", "0", "X-Reset", "40",
		"RateLimit-Policy", `"a";q=2;w=60, "burst";q=5;w=1, "daily";q=100;w=86400`,
		"RateLimit", `"a";r=0;t=40, "burst";r=5, "daily";r=98;t=86380`), ask(20*time.Second))
}

// RESPONSE_DYNAMIC_METADATA returns the request and the metadata of the
// rules whose descriptors passed, merged, as envoyproxy/ratelimit does.
func TestDynamicMetadata(t *testing.T) {
	h := newHarnessOpts(t, "quota.yaml", serviceOptions{dynamicMetadata: true})
	req := request("quota", desc("plan", "free"), desc("plan", "team"))
	req.HitsAddend = 1
	resp, err := h.svc.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	want, err := structpb.NewStruct(map[string]any{
		"domain": "quota",
		"descriptors": []any{
			map[string]any{"entries": []any{"plan=free"}},
			map[string]any{"entries": []any{"plan=team"}},
		},
		"hitsAddend": 1,
		"metadata":   map[string]any{"quota": map[string]any{"plan": "free", "seats": 10}},
	})
	require.NoError(t, err)
	assert.Equal(t, want.AsMap(), resp.GetDynamicMetadata().AsMap())

	// free is over now: only team's metadata.
	resp, err = h.svc.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	assert.Equal(t, map[string]any{"quota": map[string]any{"plan": "team", "seats": 10.0}},
		resp.GetDynamicMetadata().AsMap()["metadata"])
}
