package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyrate/keyrate"
)

// step is one call of a trace: at the clock's offset from t0, ask req and
// expect the summary want.
type step struct {
	at   time.Duration
	req  *rlspb.RateLimitRequest
	want string
}

func (h *harness) trace(t *testing.T, steps []step) {
	t.Helper()
	for i, s := range steps {
		h.clock.Set(t0.Add(s.at))
		if got := h.ask(t, s.req); got != s.want {
			t.Errorf("step %d at %v:\n got %s\nwant %s", i, s.at, got, s.want)
		}
	}
}

// Each phone number has its own budgets, nested and flat, with exact
// limit_remaining; a refusal by the nested rule records nothing against the
// flat one.
func TestPerValueBudgets(t *testing.T) {
	h := newHarness(t, "messaging.yaml")
	marketing := func(number string) *rlspb.RateLimitRequest {
		return request("messaging", desc("message_type", "marketing", "to_number", number), desc("to_number", number))
	}
	h.trace(t, []step{
		{0, marketing("2061111111"), "OK | OK 4/5 DAY t=24h0m0s | OK 99/100 DAY t=24h0m0s"},
		{time.Hour, marketing("2061111111"), "OK | OK 3/5 DAY t=23h0m0s | OK 98/100 DAY t=23h0m0s"},
		{time.Hour, marketing("2061111111"), "OK | OK 2/5 DAY t=23h0m0s | OK 97/100 DAY t=23h0m0s"},
		{time.Hour, marketing("2061111111"), "OK | OK 1/5 DAY t=23h0m0s | OK 96/100 DAY t=23h0m0s"},
		{time.Hour, marketing("2061111111"), "OK | OK 0/5 DAY t=23h0m0s | OK 95/100 DAY t=23h0m0s"},
		{time.Hour, marketing("2061111111"), "OVER_LIMIT | OVER_LIMIT 0/5 DAY t=23h0m0s | OK 95/100 DAY t=23h0m0s"},
		{time.Hour, request("messaging", desc("to_number", "2061111111")), "OK | OK 94/100 DAY t=23h0m0s"},
		{time.Hour, marketing("2062222222"), "OK | OK 4/5 DAY t=24h0m0s | OK 99/100 DAY t=24h0m0s"},
		// The first message leaves the windows a day after it was sent,
		// and the next ones (at 1h) an hour later.
		{24 * time.Hour, marketing("2061111111"), "OK | OK 0/5 DAY t=1h0m0s | OK 94/100 DAY t=1h0m0s"},
	})
}

// A descriptor matches a rule only at the rule's own depth, entry by entry.
func TestNestedDescriptors(t *testing.T) {
	h := newHarness(t, "example4.yaml")
	h.trace(t, []step{
		{0, request("example4", desc("key", "value", "subkey", "a")), "OK | OK 299/300 SECOND t=1s"},
		{0, request("example4", desc("key", "value", "subkey", "b")), "OK | OK 299/300 SECOND t=1s"},
		{0, request("example4", desc("key", "value")), "OK | OK"},
		{0, request("example4", desc("key", "value", "subkey", "a", "more", "x")), "OK | OK"},
		{0, request("example4", desc("key", "other", "subkey", "a")), "OK | OK"},
		{0, request("example4", desc("subkey", "a")), "OK | OK"},
	})
}

// A key with a value is matched before the key alone; a limit of 0 refuses
// every request, and a request it refuses counts against nothing else.
func TestMostSpecificMatch(t *testing.T) {
	h := newHarness(t, "edge_proxy_per_ip.yaml")
	ip := func(a string) *rlv3.RateLimitDescriptor { return desc("remote_address", a) }
	h.trace(t, []step{
		{0, request("edge_proxy_per_ip", ip("50.0.0.1")), "OK | OK 9/10 SECOND t=1s"},
		{0, request("edge_proxy_per_ip", ip("50.0.0.5")), "OVER_LIMIT | OVER_LIMIT 0/0 SECOND"},
		{0, request("edge_proxy_per_ip", ip("50.0.0.1"), ip("50.0.0.5")), "OVER_LIMIT | OK 9/10 SECOND t=1s | OVER_LIMIT 0/0 SECOND"},
		{0, request("edge_proxy_per_ip", ip("50.0.0.1")), "OK | OK 8/10 SECOND t=1s"},
	})
	if got := h.counter("over_limit", "edge_proxy_per_ip", "remote_address_50.0.0.5"); got != 2 {
		t.Errorf("over_limit of the refused address = %v, want 2", got)
	}
}

// A request no rule matches is OK with no limit.
func TestNoMatch(t *testing.T) {
	h := newHarness(t, "messaging.yaml")
	h.trace(t, []step{
		{0, request("elsewhere", desc("to_number", "1")), "OK | OK"},
		{0, request("messaging", desc("from_number", "1")), "OK | OK"},
		{0, request("messaging", desc()), "OK | OK"},
		{0, request("messaging", desc("message_type", "marketing")), "OK | OK"},
		{0, request("messaging", desc("message_type", "transactional", "to_number", "1")), "OK | OK"},
	})
}

// An unlimited descriptor is OK with the largest remaining, and never
// reaches the store.
func TestUnlimited(t *testing.T) {
	h := newHarness(t, "internal.yaml")
	h.trace(t, []step{
		{0, request("internal", desc("ldap", "x")), "OK | OK r=4294967295"},
		{0, request("internal", desc("azure", "x")), "OK | OK 99/100 MINUTE t=1m0s"},
		{0, request("internal", desc("ldap", "x"), desc("azure", "x")), "OK | OK r=4294967295 | OK 98/100 MINUTE t=1m0s"},
	})
	if n := h.svc.store.(*limiterStore).l.Len(); n != 1 {
		t.Errorf("the store tracks %d keys, want 1 (azure's)", n)
	}
}

// A rule in shadow mode is decided and counted, but never refuses: its
// status says OK with what is left, and its metrics tell.
func TestShadowMode(t *testing.T) {
	h := newHarness(t, "example6.yaml")
	user := func(u string) *rlspb.RateLimitRequest { return request("example6", desc("service", "auth", "user", u)) }
	for range 10 {
		h.ask(t, user("user-a"))
	}
	for range 20 {
		h.ask(t, user("user-b"))
	}
	h.trace(t, []step{
		{0, user("user-a"), "OK | OK 0/10 SECOND t=1s"},
		{0, user("user-b"), "OVER_LIMIT | OVER_LIMIT 0/20 SECOND t=1s"},
	})
	for _, c := range []struct {
		name, rule string
		want       float64
	}{
		{"total_hits", "service.user_user-a", 11},
		{"within_limit", "service.user_user-a", 10},
		{"over_limit", "service.user_user-a", 1},
		{"shadow_mode", "service.user_user-a", 1},
		{"over_limit", "service.user_user-b", 1},
		{"shadow_mode", "service.user_user-b", 0},
	} {
		if got := h.counter(c.name, "example6", c.rule); got != c.want {
			t.Errorf("%s{rule=%q} = %v, want %v", c.name, c.rule, got, c.want)
		}
	}
}

// When only a shadow rule refuses, the request goes through and counts
// against the enforced descriptors.
func TestShadowRefusalRecordsEnforced(t *testing.T) {
	h := newHarness(t, "example6.yaml")
	a, b := desc("service", "auth", "user", "user-a"), desc("service", "auth", "user", "user-b")
	for range 10 {
		h.ask(t, request("example6", a))
	}
	h.trace(t, []step{
		{0, request("example6", a, b), "OK | OK 0/10 SECOND t=1s | OK 19/20 SECOND t=1s"},
		{0, request("example6", a, b), "OK | OK 0/10 SECOND t=1s | OK 18/20 SECOND t=1s"},
		{time.Second, request("example6", a, b), "OK | OK 9/10 SECOND t=1s | OK 19/20 SECOND t=1s"},
	})
}

const fivePerMinute = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// The request's hits_addend is its weight; 0 means 1; a request that does
// not fit records nothing.
func TestHitsAddend(t *testing.T) {
	h := newHarness(t, fivePerMinute)
	hits := func(n uint32, value string) *rlspb.RateLimitRequest {
		r := request("d", desc("k", value))
		r.HitsAddend = n
		return r
	}
	h.trace(t, []step{
		{0, hits(3, "x"), "OK | OK 2/5 MINUTE t=1m0s"},
		{0, hits(3, "x"), "OVER_LIMIT | OVER_LIMIT 2/5 MINUTE t=1m0s"},
		{0, hits(0, "x"), "OK | OK 1/5 MINUTE t=1m0s"},
		{0, hits(2, "x"), "OVER_LIMIT | OVER_LIMIT 1/5 MINUTE t=1m0s"},
		{0, hits(1, "x"), "OK | OK 0/5 MINUTE t=1m0s"},
		{0, hits(6, "y"), "OVER_LIMIT | OVER_LIMIT 5/5 MINUTE t=1m0s"},
	})
	for name, want := range map[string]float64{"total_hits": 3 + 3 + 1 + 2 + 1 + 6, "within_limit": 5, "over_limit": 11} {
		if got := h.counter(name, "d", "k"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// A weight above a descriptor's limit never fits: on an empty window its
// status and the reset header say the window's length, not 0 ("now"),
// in quota mode as outside it, whether the request goes through or not.
func TestWeightAboveLimitReset(t *testing.T) {
	h := newHarness(t, `
domain: q
descriptors:
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: room
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	h.svc.opts.headers = responseHeaders{limit: "x-ratelimit-limit", remaining: "x-ratelimit-remaining", reset: "x-ratelimit-reset"}
	heavy := func(key string) *rlv3.RateLimitDescriptor {
		d := desc(key, "v")
		d.HitsAddend = wrapperspb.UInt64(6)
		return d
	}
	for _, c := range []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{request("q", heavy("quota")), "OVER_LIMIT | OVER_LIMIT 5/5 MINUTE t=1m0s"},
		{request("q", heavy("plain")), "OVER_LIMIT | OVER_LIMIT 5/5 MINUTE t=1m0s"},
		// Let through: the other quota descriptor has room.
		{request("q", heavy("quota"), desc("room", "v")), "OK | OVER_LIMIT 5/5 MINUTE t=1m0s | OK 99/100 HOUR t=1h0m0s"},
	} {
		resp, err := h.svc.ShouldRateLimit(context.Background(), c.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(resp); got != c.want {
			t.Errorf("got %s, want %s", got, c.want)
		}
		for _, hv := range resp.GetResponseHeadersToAdd() {
			if hv.GetKey() == "x-ratelimit-reset" && hv.GetValue() == "0" {
				t.Errorf("%s: x-ratelimit-reset: 0", summary(resp))
			}
		}
		if len(c.req.Descriptors) == 1 {
			var reset string
			for _, hv := range resp.GetResponseHeadersToAdd() {
				if hv.GetKey() == "x-ratelimit-reset" {
					reset = hv.GetValue()
				}
			}
			if reset != "60" {
				t.Errorf("%s: x-ratelimit-reset: %q, want 60", summary(resp), reset)
			}
		}
	}
}

// A descriptor's own hits_addend replaces the request's, and descriptors
// of different weights are decided together, each at its own, all or
// nothing. A weight of 0 checks without counting: it refuses when nothing
// is left, and then the request records nothing anywhere.
func TestDescriptorHitsAddend(t *testing.T) {
	h := newHarness(t, fivePerMinute)
	weighed := func(n uint64, value string) *rlv3.RateLimitDescriptor {
		d := desc("k", value)
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	refund := desc("k", "x")
	refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(2), true
	r := request("d", weighed(2, "x"))
	r.HitsAddend = 4
	h.trace(t, []step{
		{0, r, "OK | OK 3/5 MINUTE t=1m0s"},
		{0, request("d", weighed(0, "x")), "OK | OK 3/5 MINUTE t=1m0s"},
		{0, request("d", refund), "OK | OK 3/5 MINUTE t=1m0s"},
		{0, request("d", weighed(1, "x"), weighed(2, "y")), "OK | OK 2/5 MINUTE t=1m0s | OK 3/5 MINUTE t=1m0s"},
		// y has 3 left: a weight of 4 refuses, and x counts nothing.
		{0, request("d", weighed(1, "x"), weighed(4, "y")), "OVER_LIMIT | OK 2/5 MINUTE t=1m0s | OVER_LIMIT 3/5 MINUTE t=1m0s"},
		{0, request("d", weighed(2, "x")), "OK | OK 0/5 MINUTE t=1m0s"},
		{0, request("d", weighed(0, "x")), "OVER_LIMIT | OVER_LIMIT 0/5 MINUTE t=1m0s"},
		// x, checked, has nothing left: y counts nothing.
		{0, request("d", weighed(0, "x"), weighed(1, "y")), "OVER_LIMIT | OVER_LIMIT 0/5 MINUTE t=1m0s | OK 3/5 MINUTE t=1m0s"},
		{0, request("d", weighed(0, "y")), "OK | OK 3/5 MINUTE t=1m0s"},
		{0, request("d", weighed(0, "z")), "OK | OK 5/5 MINUTE t=0s"},
	})
}

// A request is admitted only when every descriptor has room, and a refusal
// leaves the other descriptors' budgets as they were.
func TestAllOrNothing(t *testing.T) {
	h := newHarness(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	both := request("d", desc("a", "x"), desc("b", "y"))
	h.trace(t, []step{
		{0, both, "OK | OK 0/1 MINUTE t=1m0s | OK 4/5 MINUTE t=1m0s"},
		{time.Second, both, "OVER_LIMIT | OVER_LIMIT 0/1 MINUTE t=59s | OK 4/5 MINUTE t=59s"},
		{time.Second, both, "OVER_LIMIT | OVER_LIMIT 0/1 MINUTE t=59s | OK 4/5 MINUTE t=59s"},
		{2 * time.Second, request("d", desc("b", "y")), "OK | OK 3/5 MINUTE t=58s"},
	})
}

// Two per second, sliding: a third call half a second after the first two
// is refused though a whole second began between them, where a fixed window
// would have admitted it.
func TestSlidingWindow(t *testing.T) {
	h := newHarness(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2}
`)
	r := request("d", desc("k", "x"))
	h.trace(t, []step{
		// Durations are whole seconds, rounded up: 950ms is 1s.
		{900 * time.Millisecond, r, "OK | OK 1/2 SECOND t=1s"},
		{950 * time.Millisecond, r, "OK | OK 0/2 SECOND t=1s"},
		{1450 * time.Millisecond, r, "OVER_LIMIT | OVER_LIMIT 0/2 SECOND t=1s"},
		{1899 * time.Millisecond, r, "OVER_LIMIT | OVER_LIMIT 0/2 SECOND t=1s"},
		{1900 * time.Millisecond, r, "OK | OK 0/2 SECOND t=1s"},
	})
}

// window: 3s is a window of three seconds, reported as 3 x SECOND.
func TestWindow(t *testing.T) {
	h := newHarness(t, "extensions.yaml")
	r := request("api", desc("client", "c1"))
	h.trace(t, []step{
		{0, r, "OK | OK 1/2 3xSECOND t=3s"},
		{time.Second, r, "OK | OK 0/2 3xSECOND t=2s"},
		{2 * time.Second, r, "OVER_LIMIT | OVER_LIMIT 0/2 3xSECOND t=1s"},
		{3 * time.Second, r, "OK | OK 0/2 3xSECOND t=1s"},
	})
}

// Several limits on one descriptor are decided together; the status
// reports the binding one: the one with least left, or the one that
// refused.
func TestSeveralLimits(t *testing.T) {
	h := newHarness(t, `
domain: api
descriptors:
  - key: api_key
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 3}
      - {name: hourly, unit: hour, requests_per_unit: 4}
`)
	r := request("api", desc("api_key", "k1"))
	h.trace(t, []step{
		{0, r, "OK | OK 2/3 SECOND burst t=1s"},
		{0, r, "OK | OK 1/3 SECOND burst t=1s"},
		{0, r, "OK | OK 0/3 SECOND burst t=1s"},
		{0, r, "OVER_LIMIT | OVER_LIMIT 0/3 SECOND burst t=1s"},
		{time.Second, r, "OK | OK 0/4 HOUR hourly t=59m59s"},
		{time.Second, r, "OVER_LIMIT | OVER_LIMIT 0/4 HOUR hourly t=59m59s"},
	})
}

// A rule that replaces another by name leaves it out of a request that
// matches both, and leaves its budget alone.
func TestReplaces(t *testing.T) {
	h := newHarness(t, "example7.yaml")
	one, two := desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")
	h.trace(t, []step{
		{0, request("example7", one), "OK | OK 4/5 SECOND specific_limit t=1s"},
		{0, request("example7", two), "OK | OK 9/10 SECOND t=1s"},
		{0, request("example7", one, two), "OK | OK | OK 8/10 SECOND t=1s"},
		{0, request("example7", one), "OK | OK 3/5 SECOND specific_limit t=1s"},
	})
}

// A wildcard value gives each value it matches a budget of its own, or one
// budget for all with share_threshold.
func TestWildcards(t *testing.T) {
	h := newHarness(t, "wildcards.yaml")
	h.trace(t, []step{
		{0, request("example9", desc("path", "/api/123/action")), "OK | OK 19/20 MINUTE t=1m0s"},
		{0, request("example9", desc("path", "/api/123/action")), "OK | OK 18/20 MINUTE t=1m0s"},
		{0, request("example9", desc("path", "/api/456/action")), "OK | OK 19/20 MINUTE t=1m0s"},
		{0, request("example9", desc("path", "/api/123/other")), "OK | OK"},
		{0, request("example9", desc("files_no_share", "files_no_share/a.pdf")), "OK | OK 9/10 HOUR t=1h0m0s"},
		{0, request("example9", desc("files_no_share", "files_no_share/b.csv")), "OK | OK 9/10 HOUR t=1h0m0s"},
	})
	for i := range 5 {
		h.ask(t, request("example9", desc("files", "files/a.pdf")))
		if i < 4 {
			h.ask(t, request("example9", desc("files", "files/b.csv")))
		}
	}
	h.trace(t, []step{
		{0, request("example9", desc("files", "files/b.csv")), "OK | OK 0/10 HOUR t=1h0m0s"},
		{0, request("example9", desc("files", "files/c.txt")), "OVER_LIMIT | OVER_LIMIT 0/10 HOUR t=1h0m0s"},
	})
}

func TestMatchWildcard(t *testing.T) {
	for _, c := range []struct {
		pattern, value string
		want           bool
	}{
		{"value*", "value", true},
		{"value*", "valueXYZ", true},
		{"value*", "valu", false},
		{"/api/*/action", "/api/123/action", true},
		{"/api/*/action", "/api//action", true},
		{"/api/*/action", "/api/123/other", false},
		{"/api/*/action", "/api/action", false}, // prefix and suffix may not overlap
		{"/api/*/r/*/a", "/api/v1/r/9/a", true},
		{"/api/*/r/*/a", "/api/v1/x/9/a", false},
		{"a*b*b", "ab", false},
		{"a*b*b", "abb", true},
		{"*", "", true},
		{"**", "anything", true},
	} {
		if got := matchWildcard(strings.Split(c.pattern, "*"), c.value); got != c.want {
			t.Errorf("matchWildcard(%q, %q) = %v, want %v", c.pattern, c.value, got, c.want)
		}
	}
}

// A descriptor's limit override applies instead of the configuration, to
// a budget per list of entries; a limit of 0 refuses.
func TestLimitOverride(t *testing.T) {
	h := newHarness(t, fivePerMinute+"---\ndomain: other\ndescriptors: []\n")
	override := overrideDesc
	h.trace(t, []step{
		{0, request("d", override("x", 2, typev3.RateLimitUnit_HOUR, 0)), "OK | OK 1/2 HOUR t=1h0m0s"},
		{0, request("d", override("x", 2, typev3.RateLimitUnit_HOUR, 0)), "OK | OK 0/2 HOUR t=1h0m0s"},
		{0, request("d", override("x", 2, typev3.RateLimitUnit_HOUR, 0)), "OVER_LIMIT | OVER_LIMIT 0/2 HOUR t=1h0m0s"},
		{0, request("d", override("y", 2, typev3.RateLimitUnit_HOUR, 0)), "OK | OK 1/2 HOUR t=1h0m0s"},
		{0, request("d", desc("k", "x")), "OK | OK 4/5 MINUTE t=1m0s"},
		{0, request("other", override("x", 1, typev3.RateLimitUnit_SECOND, 30)), "OK | OK 0/1 30xSECOND t=30s"},
		// No override outside the configured domains, as envoyproxy/ratelimit.
		{0, request("unknown", override("x", 1, typev3.RateLimitUnit_SECOND, 30)), "OK | OK"},
		{0, request("d", override("x", 0, typev3.RateLimitUnit_SECOND, 0)), "OVER_LIMIT | OVER_LIMIT 0/0 SECOND"},
		{0, request("d", override("x", 5, typev3.RateLimitUnit_UNKNOWN, 0)), "OVER_LIMIT | OVER_LIMIT 0/5 UNKNOWN"},
	})
}

// overrideDesc returns a descriptor (k, value) with a limit override of
// rpu per mult units.
func overrideDesc(value string, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *rlv3.RateLimitDescriptor {
	d := desc("k", value)
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

// Made-up overrides cannot lock others out: past the domain's slots, a new
// override takes the slot of the least recently used one of its window,
// and an override moved out of its slot and back keeps its counts. Other
// domains have slots of their own.
func TestLimitOverridesCannotBeExhausted(t *testing.T) {
	h := newHarness(t, fivePerMinute+"---\ndomain: other\ndescriptors: []\n")
	legit := request("d", overrideDesc("legit", 3, typev3.RateLimitUnit_HOUR, 0))
	h.trace(t, []step{{0, legit, "OK | OK 2/3 HOUR t=1h0m0s"}})
	for i := range 300 { // more than the 256 an earlier bound took for good
		got := h.ask(t, request("d", overrideDesc("made-up", uint32(1000+i), typev3.RateLimitUnit_HOUR, 0)))
		if got != fmt.Sprintf("OK | OK %d/%d HOUR t=1h0m0s", 999+i, 1000+i) {
			t.Fatalf("made-up override %d: %s", i, got)
		}
	}
	h.trace(t, []step{
		// legit lost its slot to the made-up ones, got one back, and kept
		// its count.
		{time.Minute, legit, "OK | OK 1/3 HOUR t=59m0s"},
		{time.Minute, request("d", overrideDesc("new", 7, typev3.RateLimitUnit_MINUTE, 0)), "OK | OK 6/7 MINUTE t=1m0s"},
		{time.Minute, request("other", overrideDesc("x", 2, typev3.RateLimitUnit_SECOND, 0)), "OK | OK 1/2 SECOND t=1s"},
	})
	if strings.Contains(h.log.String(), "refusing") {
		t.Errorf("an override was refused:\n%s", h.log)
	}
}

// An override moved out of its slot keeps its counts, even when the slot
// goes to an override of a shorter window: the slot then keeps its
// budgets' events for the longer window, so that the janitor does not
// sweep them while they still count.
func TestLimitOverrideSlotKeepsEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := keyrate.NewManualClock(t0)
		st, err := newLimiterStore(0, clock, minMaxWindow)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarnessWith(t, st, fivePerMinute, serviceOptions{maxOverridesPerDomain: 1, clock: clock})
		h.clock = clock
		hourly := request("d", overrideDesc("a", 5, typev3.RateLimitUnit_HOUR, 0))
		h.trace(t, []step{
			{0, hourly, "OK | OK 4/5 HOUR t=1h0m0s"},
			{0, hourly, "OK | OK 3/5 HOUR t=1h0m0s"},
			// The one slot goes to a limit of a second.
			{time.Second, request("d", overrideDesc("b", 5, typev3.RateLimitUnit_SECOND, 0)), "OK | OK 4/5 SECOND t=1s"},
		})
		clock.Advance(2 * time.Minute)
		time.Sleep(time.Minute + time.Second) // the janitor sweeps, once a minute
		synctest.Wait()
		h.trace(t, []step{{2*time.Minute + time.Second, hourly, "OK | OK 2/5 HOUR t=57m59s"}})
	})
}

// Distinct lists of values never share a budget: values are written with
// their lengths, and long ones are replaced by a digest of them all.
func TestValuesKeepBudgetsApart(t *testing.T) {
	h := newHarness(t, `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
`)
	long := strings.Repeat("v", 10_000)
	h.trace(t, []step{
		{0, request("d", desc("a", "x", "b", "yz")), "OK | OK 0/1 MINUTE t=1m0s"},
		{0, request("d", desc("a", "xy", "b", "z")), "OK | OK 0/1 MINUTE t=1m0s"},
		{0, request("d", desc("a", long+"1", "b", "z")), "OK | OK 0/1 MINUTE t=1m0s"},
		{0, request("d", desc("a", long+"2", "b", "z")), "OK | OK 0/1 MINUTE t=1m0s"},
		{0, request("d", desc("a", long+"2", "b", "z")), "OVER_LIMIT | OVER_LIMIT 0/1 MINUTE t=1m0s"},
	})
	_, key := h.svc.rules.Load().match("d", desc("a", long, "b", "z").Entries)
	if len(key) > 2+len(ruleTier(""))+32 {
		t.Errorf("a key for a value of %d bytes is %d bytes long", len(long), len(key))
	}
}

// Near-limit hits are those past 80% of the limit, as envoyproxy/ratelimit
// counts them.
func TestNearLimitMetric(t *testing.T) {
	h := newHarness(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	r := request("d", desc("k", "x"))
	for range 8 {
		h.ask(t, r)
	}
	if got := h.counter("near_limit", "d", "k"); got != 0 {
		t.Errorf("near_limit after 8 of 10 = %v, want 0", got)
	}
	h.ask(t, r)
	h.ask(t, r)
	h.ask(t, r) // over: not near
	if got := h.counter("near_limit", "d", "k"); got != 2 {
		t.Errorf("near_limit after 11 = %v, want 2", got)
	}
}

// Invalid requests, and requests whose context is done, get an error.
func TestRequestErrors(t *testing.T) {
	h := newHarness(t, fivePerMinute)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	many := request("d")
	for range maxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, desc("k", "x"))
	}
	for _, c := range []struct {
		ctx  context.Context
		req  *rlspb.RateLimitRequest
		want codes.Code
	}{
		{context.Background(), request("", desc("k", "x")), codes.InvalidArgument},
		{context.Background(), request("d"), codes.InvalidArgument},
		{context.Background(), many, codes.InvalidArgument},
		{done, request("d", desc("k", "x")), codes.Canceled},
	} {
		_, err := h.svc.ShouldRateLimit(c.ctx, c.req)
		if status.Code(err) != c.want {
			t.Errorf("%v: got %v, want code %v", c.req, err, c.want)
		}
	}
	h.trace(t, []step{{0, request("d", desc("k", "x")), "OK | OK 4/5 MINUTE t=1m0s"}})
}

// A rule's budgets are named after its path alone: services that loaded
// different files, in different orders, name the budget of one rule alike,
// and of two rules apart. Replicas sharing budgets in Redis rely on it.
func TestRuleTiersAreStable(t *testing.T) {
	x := "  - key: x\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	y := "  - key: y\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	z := "  - key: z\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
	a := newHarness(t, "domain: d\ndescriptors:\n"+x+y)
	b := newHarness(t, "domain: d\ndescriptors:\n"+z+y+x)
	keyOf := func(h *harness, key string) string {
		_, k := h.svc.rules.Load().match("d", desc(key, "v").Entries)
		return k
	}
	for _, k := range []string{"x", "y"} {
		if ka, kb := keyOf(a, k), keyOf(b, k); ka != kb || ka == "" {
			t.Errorf("rule %s: budget %q in one service, %q in the other", k, ka, kb)
		}
	}
	if keyOf(b, "x") == keyOf(b, "z") || keyOf(a, "x") == keyOf(a, "y") {
		t.Error("two rules share a budget")
	}
}
