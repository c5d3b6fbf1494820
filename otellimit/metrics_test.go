package otellimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/otellimit"
)

var _ middleware.Observer = (*otellimit.Metrics)(nil)

// Three requests admitted and two refused on route "search" read back as
// allowed 3 and limited 2, and every other series of the route as they
// stand: nothing shadowed, failed or gone, five decisions by the store and
// their five times, no backend error, two violations of the route's one
// policy, and one key tracked.
func TestHTTPCountsDecisions(t *testing.T) {
	m, r := newMetrics(t)
	l := manualLimiter(t, 3, time.Minute)
	require.NoError(t, m.TrackKeys("search", l))
	h, served := limited(t, m, l)
	var codes []int
	for range 5 {
		codes = append(codes, get(h, "192.0.2.1"))
	}
	require.Equal(t, []int{200, 200, 200, 429, 429}, codes)
	assert.Equal(t, 3, *served)

	assert.Equal(t, 3.0, r.requests("search", "allowed"))
	assert.Equal(t, 2.0, r.requests("search", "limited"))
	for _, result := range []string{"shadow_limited", "error", "client_gone"} {
		assert.Zero(t, r.requests("search", result), result)
	}
	assert.Len(t, r.points("keyrate.requests"), 5, "one series per result")
	assert.Equal(t, 5.0, r.source("search", "store"))
	assert.Zero(t, r.source("search", "fallback"))
	assert.Equal(t, 5.0, r.decisions("search"))
	for _, kind := range []string{"timeout", "unavailable", "oom", "invalid", "refund"} {
		assert.Zero(t, r.backendErrors("search", kind), kind)
	}
	assert.Equal(t, 2.0, r.violations("search", ""), "the unnamed policy refused twice")
	assert.Equal(t, 1.0, r.value("keyrate.keys", map[string]string{"keyrate.route": "search"}))
}

// The instruments carry OpenTelemetry's units and kinds: monotonic
// cumulative counters, a histogram in seconds with buckets for both an
// in-process decision and a networked store, and a gauge.
func TestInstruments(t *testing.T) {
	m, r := newMetrics(t)
	require.NoError(t, m.TrackKeys("r", manualLimiter(t, 1, time.Minute)))
	observeDecision(m, "r", keyrate.Decision{Allowed: true}, false, time.Microsecond)
	units := map[string]string{}
	for _, mt := range r.collect() {
		units[mt.Name] = mt.Unit
		assert.NotEmpty(t, mt.Description, mt.Name)
		if sum, ok := mt.Data.(metricdata.Sum[int64]); ok {
			assert.True(t, sum.IsMonotonic, mt.Name)
			assert.Equal(t, metricdata.CumulativeTemporality, sum.Temporality, mt.Name)
		}
	}
	for _, name := range []string{"keyrate.requests", "keyrate.decisions", "keyrate.backend.errors", "keyrate.policy.violations"} {
		assert.IsType(t, metricdata.Sum[int64]{}, data(r, name), name)
	}
	assert.IsType(t, metricdata.Histogram[float64]{}, data(r, "keyrate.backend.duration"))
	assert.IsType(t, metricdata.Gauge[int64]{}, data(r, "keyrate.keys"))
	assert.Equal(t, map[string]string{
		"keyrate.requests":          "{request}",
		"keyrate.decisions":         "{decision}",
		"keyrate.backend.duration":  "s",
		"keyrate.backend.errors":    "{error}",
		"keyrate.policy.violations": "{violation}",
		"keyrate.keys":              "{key}",
	}, units)
}

// In shadow mode a refusal counts as shadow_limited, not limited.
func TestHTTPShadow(t *testing.T) {
	m, r := newMetrics(t)
	h, served := limited(t, m, manualLimiter(t, 1, time.Minute), httplimit.WithShadow())
	get(h, "192.0.2.1")
	get(h, "192.0.2.1")
	assert.Equal(t, 1.0, r.requests("search", "allowed"))
	assert.Equal(t, 1.0, r.requests("search", "shadow_limited"))
	assert.Zero(t, r.requests("search", "limited"))
	assert.Equal(t, 2, *served)
}

// Backend errors count by kind; an identity failure and a cancelled
// request are errors but not backend errors.
func TestHTTPErrorKinds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	for _, tc := range []struct {
		name     string
		b        keyrate.Backend
		opts     []httplimit.Option
		kind     string // "" when no backend error should be counted
		observed float64
	}{
		{"store down", fail(errors.New("connection refused")), nil, "unavailable", 1},
		{"connection refused", fail(refusedDial(t)), nil, "unavailable", 1},
		// As redislimit reports a call whose budget ran out while go-redis
		// kept retrying a refused connection: the store is down, not slow.
		{"connection refused until the budget ran out",
			fail(fmt.Errorf("redislimit: take key #8254c329: no answer from redis within the 250ms budget; connecting to it failed: %w: %w", refusedDial(t), context.DeadlineExceeded)),
			nil, "unavailable", 1},
		{"connecting timed out", fail(fmt.Errorf("redislimit: take key #8254c329: %w", timedOutDial(t))), nil, "timeout", 1},
		{"no answer within the budget",
			fail(fmt.Errorf("redislimit: take key #8254c329: %w: no answer from redis within the 250ms budget: %w", keyrate.ErrUnavailable, context.DeadlineExceeded)),
			nil, "timeout", 1},
		{"circuit breaker open",
			fail(fmt.Errorf("redislimit: take key #8254c329: %w: not asked, the circuit breaker has been open for 1.2s", keyrate.ErrUnavailable)),
			nil, "unavailable", 1},
		{"invalid key", fail(fmt.Errorf("%w: empty key", keyrate.ErrInvalidKey)), nil, "invalid", 1},
		{"store out of memory", fail(fmt.Errorf("take key #1a2b: %w: OOM command not allowed", backend.ErrOutOfMemory)), nil, "oom", 1},
		{"deadline", fail(fmt.Errorf("read: %w", context.DeadlineExceeded)), nil, "timeout", 1},
		{"over the time budget",
			backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
				<-release // a store that hangs, whatever its context says
				return keyrate.Decision{}, nil
			}),
			[]httplimit.Option{httplimit.WithTimeBudget(10 * time.Millisecond)}, "timeout", 1},
		{"client cancelled", fail(context.Canceled), nil, "", 0},
		{"client not identified", manualLimiter(t, 5, time.Minute),
			[]httplimit.Option{httplimit.WithKeyFunc(func(*http.Request) (string, error) { return "", errors.New("no key") })}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, r := newMetrics(t)
			h, _ := limited(t, m, tc.b, tc.opts...)
			get(h, "192.0.2.1")
			assert.Equal(t, 1.0, r.requests("search", "error"))
			for _, kind := range []string{"timeout", "unavailable", "invalid", "oom", "refund"} {
				want := 0.0
				if kind == tc.kind {
					want = 1
				}
				assert.Equal(t, want, r.backendErrors("search", kind), kind)
			}
			if tc.observed == 0 {
				assert.Empty(t, r.points("keyrate.backend.duration"), "no backend time recorded")
			} else {
				assert.Equal(t, tc.observed, r.decisions("search"))
			}
		})
	}
}

// refusedDial returns the error of a real dial to a port where nothing
// listens.
func refusedDial(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	conn, err := net.Dial("tcp", addr)
	if err == nil {
		conn.Close()
		t.Fatalf("dialling %s, where nothing listens: no error", addr)
	}
	return err
}

// timedOutDial returns the error of a real dial whose deadline has passed.
func timedOutDial(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:1")
	if err == nil {
		conn.Close()
		t.Fatal("a dial past its deadline: no error")
	}
	return err
}

// Observe counts what a middleware reports, by route, and the histogram
// puts a timeout above the 250ms bucket and decisions in the first
// buckets.
func TestObserve(t *testing.T) {
	m, r := newMetrics(t)
	const route = "/pkg.S/M"
	observeDecision(m, route, keyrate.Decision{Allowed: true}, false, time.Microsecond)
	observeDecision(m, route, keyrate.Decision{}, false, time.Microsecond)
	observeDecision(m, route, keyrate.Decision{}, true, time.Microsecond)
	observeError(m, route, fmt.Errorf("budget: %w", context.DeadlineExceeded), 251*time.Millisecond)
	for result, want := range map[string]float64{"allowed": 1, "limited": 1, "shadow_limited": 1, "error": 1, "client_gone": 0} {
		assert.Equal(t, want, r.requests(route, result), result)
	}
	assert.Equal(t, 1.0, r.backendErrors(route, "timeout"))

	h := histogram(t, r, route)
	require.Equal(t, uint64(4), h.Count)
	bounds, counts := h.Bounds, h.BucketCounts
	require.Len(t, counts, len(bounds)+1)
	var below1us, at500ms uint64
	for i, b := range bounds {
		if b <= 1e-6 {
			below1us += counts[i]
		}
		if b == 0.5 {
			at500ms = counts[i]
		}
	}
	assert.Equal(t, uint64(3), below1us, "the three decisions of 1µs")
	assert.Equal(t, uint64(1), at500ms, "the 251ms timeout, in (0.25, 0.5]")
	assert.InDelta(t, 3e-6+0.251, h.Sum, 1e-9)
}

// Routes reported at run time (method names a client may choose) get at
// most WithMaxRoutes series of their own; the rest share "(other)".
func TestObservedRoutesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		opts  []otellimit.Option
		bound int
	}{{nil, 300}, {[]otellimit.Option{otellimit.WithMaxRoutes(10)}, 10}} {
		m, r := newMetrics(t, tc.opts...)
		for i := range tc.bound + 50 {
			observeDecision(m, fmt.Sprintf("/pkg.S/M%d", i), keyrate.Decision{Allowed: true}, false, time.Microsecond)
		}
		routes := map[string]bool{}
		for _, p := range r.points("keyrate.requests") {
			v, _ := p.attrs.Value("keyrate.route")
			routes[v.AsString()] = true
		}
		assert.Len(t, routes, tc.bound+1, "routes of their own and (other)")
		assert.True(t, routes["(other)"])
		assert.True(t, routes[fmt.Sprintf("/pkg.S/M%d", tc.bound-1)])
		assert.False(t, routes[fmt.Sprintf("/pkg.S/M%d", tc.bound)])
		assert.Equal(t, 50.0, r.requests("(other)", "allowed"))
		assert.LessOrEqual(t, len(r.points("keyrate.requests")), 2000, "within the SDK's default cardinality limit")
	}
}

func TestTrackKeys(t *testing.T) {
	m, r := newMetrics(t)
	a, b := manualLimiter(t, 5, time.Minute), manualLimiter(t, 5, time.Minute)
	require.NoError(t, m.TrackKeys("a", a))
	require.NoError(t, m.TrackKeys("b", b))
	a.Allow("x")
	a.Allow("y")
	b.Allow("z")
	assert.Equal(t, 2.0, r.value("keyrate.keys", map[string]string{"keyrate.route": "a"}))
	assert.Equal(t, 1.0, r.value("keyrate.keys", map[string]string{"keyrate.route": "b"}))
	a.Allow("w")
	assert.Equal(t, 3.0, r.value("keyrate.keys", map[string]string{"keyrate.route": "a"}), "read again at each collection")
	assert.ErrorIs(t, m.TrackKeys("a", b), keyrate.ErrConfig, "route a twice")
	assert.ErrorIs(t, m.TrackKeys("c", nil), keyrate.ErrConfig, "a nil limiter")
}

// New fails cleanly on a nil provider, a bad option and a provider that
// refuses an instrument.
func TestNew(t *testing.T) {
	_, err := otellimit.New(nil)
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	_, err = otellimit.New(noop.NewMeterProvider(), otellimit.WithMaxRoutes(0))
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	_, err = otellimit.New(refusingProvider{})
	assert.ErrorContains(t, err, "keyrate.backend.duration: refused")

	// Any MeterProvider will do: with the no-op one, Observe counts nothing
	// and fails at nothing.
	m, err := otellimit.New(noop.NewMeterProvider())
	require.NoError(t, err)
	observeDecision(m, "r", keyrate.Decision{Allowed: true}, false, time.Microsecond)
}

// refusingProvider's meters refuse the histogram.
type refusingProvider struct{ noop.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

type refusingMeter struct{ noop.Meter }

func (refusingMeter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, fmt.Errorf("%s: refused", name)
}

// Hooks of one's own and the metrics both hear of every request: neither
// replaces the other.
func TestOwnHooksBesideMetrics(t *testing.T) {
	m, r := newMetrics(t)
	var decided, failed int
	h, _ := limited(t, m, manualLimiter(t, 1, time.Minute),
		httplimit.WithOnDecision(func(middleware.Event) { decided++ }),
		httplimit.WithOnError(func(middleware.Event) { failed++ }),
		httplimit.WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("Id"), nil }))
	for _, id := range []string{"alice", "alice", ""} {
		req := httptest.NewRequest("GET", "/search", nil)
		req.Header.Set("Id", id)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	assert.Equal(t, 2, decided)
	assert.Equal(t, 1, failed)
	for result, want := range map[string]float64{"allowed": 1, "limited": 1, "error": 1} {
		assert.Equal(t, want, r.requests("search", result), result)
	}
}

// A refund that failed counts as a backend error of its own kind, and the
// request it was for once, as decided.
func TestRefundFailure(t *testing.T) {
	m, r := newMetrics(t)
	d := backend.Combine(keyrate.PolicyDecision{Policy: keyrate.Policy{Limit: 5, Window: time.Minute}, Allowed: true, Remaining: 4})
	m.Observe(middleware.Event{Route: "login", Key: "login\x00a", Decision: d})
	m.Observe(middleware.Event{Route: "login", Key: "login\x00a", Decision: d,
		Err: fmt.Errorf("%w: store unavailable", middleware.ErrRefundFailed)})
	assert.Equal(t, 1.0, r.backendErrors("login", "refund"))
	assert.Zero(t, r.requests("login", "error"))
	assert.Equal(t, 1.0, r.requests("login", "allowed"))
}

// Every decision counts under its source: store, or fallback when a local
// fallback decided it while the store was down.
func TestDecisionSources(t *testing.T) {
	m, r := newMetrics(t)
	local := manualLimiter(t, 1, time.Minute)
	down := false
	b := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		d, err := local.TakeContext(ctx, key, n)
		d.Fallback = down
		return d, err
	})
	h, _ := limited(t, m, b)
	get(h, "192.0.2.1")
	assert.Equal(t, 1.0, r.source("search", "store"))
	assert.Zero(t, r.source("search", "fallback"))
	down = true
	get(h, "192.0.2.2") // admitted by the fallback
	get(h, "192.0.2.2") // refused by it
	assert.Equal(t, 1.0, r.source("search", "store"))
	assert.Equal(t, 2.0, r.source("search", "fallback"))
	assert.Equal(t, 2.0, r.requests("search", "allowed"))
	assert.Equal(t, 1.0, r.requests("search", "limited"), "a fallback's decisions are requests like any other")
	assert.Zero(t, r.backendErrors("search", "unavailable"), "a fallback decision is no error")
}
