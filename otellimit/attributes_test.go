package otellimit_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// No attribute value is anything a client sent: not its API key, however
// hostile, nor its address, through httplimit or reported to Observe
// directly. Every value is a route, a policy or one of the fixed words, and
// the series are those of one route, however many clients come.
func TestAttributesNeverNameClients(t *testing.T) {
	const hostile = `evil"key\</script>;keyrate.route=admin`
	m, r := newMetrics(t)
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "burst", Limit: 1, Window: time.Minute}},
		keyrate.WithClock(keyrate.NewManualClock(t0)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, m.TrackKeys("search", l))
	ip, err := httplimit.ClientIP(httplimit.IPConfig{})
	require.NoError(t, err)
	h, _ := limited(t, m, l, httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", ip)))
	for i := range 100 {
		for range 2 { // admitted, then refused
			req := httptest.NewRequest("GET", "/search", nil)
			req.RemoteAddr = fmt.Sprintf("198.51.100.%d:40000", i)
			if i%2 == 0 {
				req.Header.Set("X-API-Key", fmt.Sprintf("%s-%d", hostile, i))
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	m.Observe(middleware.Event{Route: "search", Identity: hostile, Key: "search\x00" + hostile, Decision: keyrate.Decision{Policy: "burst"}})

	allowed := map[string]bool{"search": true, "burst": true}
	for _, w := range []string{"allowed", "limited", "shadow_limited", "error", "client_gone", "store", "fallback",
		"timeout", "unavailable", "oom", "invalid", "refund"} {
		allowed[w] = true
	}
	n := 0
	for _, mt := range r.collect() {
		for _, p := range r.points(mt.Name) {
			n++
			for _, kv := range p.attrs.ToSlice() {
				v := kv.Value.Emit()
				assert.True(t, allowed[v], "%s has %s=%q", mt.Name, kv.Key, v)
				assert.False(t, strings.Contains(v, "evil") || strings.Contains(v, "198.51.100"), "%s has %s=%q", mt.Name, kv.Key, v)
			}
		}
	}
	// 5 results + 2 sources + 5 error kinds + 1 histogram + 1 policy's
	// violations + 1 gauge, for one route.
	assert.Equal(t, 15, n)
	assert.Equal(t, 101.0, r.violations("search", "burst"))
	assert.Equal(t, 100.0, r.value("keyrate.keys", map[string]string{"keyrate.route": "search"}))
}
