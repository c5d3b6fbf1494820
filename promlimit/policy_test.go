package promlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

var (
	perSecond = keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	perDay    = keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
)

func violations(t *testing.T, reg prometheus.Gatherer, route, policy string) float64 {
	t.Helper()
	return value(t, reg, "keyrate_policy_violations_total", map[string]string{"route": route, "policy": policy})
}

// part returns a policy's part of a decision: admitted, or refused.
func part(p keyrate.Policy, allowed bool) keyrate.PolicyDecision {
	d := keyrate.PolicyDecision{Policy: p, Allowed: allowed, Remaining: 1}
	if !allowed {
		d.Remaining, d.RetryAfter = 0, p.Window
	}
	return d
}

// Each refusal counts once for every policy that refused it; an admission
// counts nothing but makes each policy's series; an overflow refusal
// violated no policy of the client's.
func TestPolicyViolations(t *testing.T) {
	m, reg := newMetrics(t)
	const route = "/pkg.S/M"
	observe := func(parts ...keyrate.PolicyDecision) {
		observeDecision(m, route, backend.Combine(parts...), false, time.Microsecond)
	}
	observe(part(perSecond, true), part(perDay, true))
	if s, d := violations(t, reg, route, "second"), violations(t, reg, route, "day"); s != 0 || d != 0 {
		t.Fatalf("after an admission: second %v, day %v; want both series at 0", s, d)
	}
	observe(part(perSecond, false), part(perDay, true))
	observe(part(perSecond, false), part(perDay, true))
	observe(part(perSecond, true), part(perDay, false))
	observe(part(perSecond, false), part(perDay, false))
	overflow := backend.Combine(part(perSecond, false), part(perDay, false))
	overflow.Overflow = true
	observeDecision(m, route, overflow, false, time.Microsecond)
	observeDecision(m, route, backend.Combine(part(perSecond, false), part(perDay, true)), true, time.Microsecond)
	if s, d := violations(t, reg, route, "second"), violations(t, reg, route, "day"); s != 4 || d != 2 {
		t.Errorf("violations: second %v, day %v; want 4 (three refusals, one shadowed) and 2", s, d)
	}
	if got := requests(t, reg, route, "limited") + requests(t, reg, route, "shadow_limited"); got != 6 {
		t.Errorf("refusals %v, want 6: each counted once in keyrate_requests_total", got)
	}
	// A Decision a backend filled in by hand names its binding policy alone.
	observeDecision(m, route, keyrate.Decision{Policy: "day", Limit: 1000, RetryAfter: time.Hour}, false, time.Microsecond)
	if got := violations(t, reg, route, "day"); got != 3 {
		t.Errorf("day after a decision by hand: %v, want 3", got)
	}
}

// Through httplimit: the refusals of a backend with two policies.
func TestHTTPPolicyViolations(t *testing.T) {
	m, reg := newMetrics(t)
	refuseDay := false
	b := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return backend.Combine(part(perSecond, true), part(perDay, !refuseDay)), nil
	})
	h, _ := limited(t, m, b)
	get(h, "192.0.2.1")
	refuseDay = true
	get(h, "192.0.2.1")
	get(h, "192.0.2.1")
	if s, d := violations(t, reg, "search", "second"), violations(t, reg, "search", "day"); s != 0 || d != 2 {
		t.Errorf("violations: second %v, day %v; want 0 and 2", s, d)
	}
}

// Policy names come from configuration, but a backend that invents them
// (a tier per customer) cannot grow a route's series without end.
func TestPolicyLabelsAreBounded(t *testing.T) {
	m, reg := newMetrics(t)
	for i := range 100 {
		p := keyrate.Policy{Name: fmt.Sprintf("tier-%d", i), Limit: 1, Window: time.Minute}
		observeDecision(m, "r", backend.Combine(part(p, false)), false, time.Microsecond)
	}
	n := 0
	for _, s := range series(t, reg, "keyrate_policy_violations_total") {
		if hasLabels(s, map[string]string{"route": "r"}) {
			n++
		}
	}
	if n != 33 {
		t.Errorf("%d series for route r, want 32 and (other)", n)
	}
	if got := violations(t, reg, "r", "(other)"); got != 68 {
		t.Errorf("(other) counted %v, want 68", got)
	}
}

// Counting a two-policy refusal allocates nothing once its series exist.
func TestObservePoliciesAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	m, _ := newMetrics(t)
	d := backend.Combine(part(perSecond, false), part(perDay, false))
	observeDecision(m, "r", d, false, time.Microsecond)
	if allocs := testing.AllocsPerRun(1000, func() { observeDecision(m, "r", d, false, time.Microsecond) }); allocs != 0 {
		t.Errorf("%.1f allocations per observed refusal, want 0", allocs)
	}
}

// Counting a backend error allocates nothing either: the kind is found
// without an allocation, a network error's included.
func TestObserveErrorAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	m, _ := newMetrics(t)
	for _, err := range []error{
		fmt.Errorf("take: %w", keyrate.ErrUnavailable),
		fmt.Errorf("take: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}),
	} {
		observeError(m, "r", err, time.Millisecond)
		if allocs := testing.AllocsPerRun(1000, func() { observeError(m, "r", err, time.Millisecond) }); allocs != 0 {
			t.Errorf("%v: %.1f allocations per observed error, want 0", err, allocs)
		}
	}
}
