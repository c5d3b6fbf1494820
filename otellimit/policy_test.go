package otellimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

var (
	perSecond = keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	perDay    = keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
)

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
	m, r := newMetrics(t)
	const route = "/pkg.S/M"
	observe := func(parts ...keyrate.PolicyDecision) {
		observeDecision(m, route, backend.Combine(parts...), false, time.Microsecond)
	}
	observe(part(perSecond, true), part(perDay, true))
	assert.Zero(t, r.violations(route, "second"))
	assert.Zero(t, r.violations(route, "day"))
	observe(part(perSecond, false), part(perDay, true))
	observe(part(perSecond, false), part(perDay, true))
	observe(part(perSecond, true), part(perDay, false))
	observe(part(perSecond, false), part(perDay, false))
	overflow := backend.Combine(part(perSecond, false), part(perDay, false))
	overflow.Overflow = true
	observeDecision(m, route, overflow, false, time.Microsecond)
	observeDecision(m, route, backend.Combine(part(perSecond, false), part(perDay, true)), true, time.Microsecond)
	assert.Equal(t, 4.0, r.violations(route, "second"), "three refusals and one shadowed")
	assert.Equal(t, 2.0, r.violations(route, "day"))
	assert.Equal(t, 6.0, r.requests(route, "limited")+r.requests(route, "shadow_limited"), "each refusal counted once")
	// A Decision a backend filled in by hand names its binding policy alone.
	observeDecision(m, route, keyrate.Decision{Policy: "day", Limit: 1000, RetryAfter: time.Hour}, false, time.Microsecond)
	assert.Equal(t, 3.0, r.violations(route, "day"))
}

// Through httplimit: the refusals of a backend with two policies.
func TestHTTPPolicyViolations(t *testing.T) {
	m, r := newMetrics(t)
	refuseDay := false
	b := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return backend.Combine(part(perSecond, true), part(perDay, !refuseDay)), nil
	})
	h, _ := limited(t, m, b)
	get(h, "192.0.2.1")
	refuseDay = true
	get(h, "192.0.2.1")
	get(h, "192.0.2.1")
	assert.Zero(t, r.violations("search", "second"))
	assert.Equal(t, 2.0, r.violations("search", "day"))
}

// Policy names come from configuration, but a backend that invents them
// (a tier per customer) cannot grow a route's series without end.
func TestPolicyAttributesAreBounded(t *testing.T) {
	m, r := newMetrics(t)
	for i := range 100 {
		p := keyrate.Policy{Name: fmt.Sprintf("tier-%d", i), Limit: 1, Window: time.Minute}
		observeDecision(m, "r", backend.Combine(part(p, false)), false, time.Microsecond)
	}
	assert.Len(t, r.points("keyrate.policy.violations"), 33, "32 policies and (other)")
	assert.Equal(t, 68.0, r.violations("r", "(other)"))
	assert.Equal(t, 1.0, r.violations("r", "tier-31"))
}
