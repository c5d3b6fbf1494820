package promlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/promlimit"
)

var _ middleware.Observer = (*promlimit.Metrics)(nil)

func requests(t *testing.T, reg prometheus.Gatherer, route, result string) float64 {
	t.Helper()
	return value(t, reg, "keyrate_requests_total", map[string]string{"route": route, "result": result})
}

func backendErrors(t *testing.T, reg prometheus.Gatherer, route, kind string) float64 {
	t.Helper()
	return value(t, reg, "keyrate_backend_errors_total", map[string]string{"route": route, "kind": kind})
}

func decisions(t *testing.T, reg prometheus.Gatherer, route string) float64 {
	t.Helper()
	return value(t, reg, "keyrate_backend_duration_seconds", map[string]string{"route": route})
}

// Every request through httplimit is counted once, under its result, and
// every decision's time is observed.
func TestHTTPCountsDecisions(t *testing.T) {
	m, reg := newMetrics(t)
	h, served := limited(t, m, manualLimiter(t, 2, time.Minute))
	for _, from := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		get(h, from)
	}
	if got := requests(t, reg, "search", "allowed"); got != 3 {
		t.Errorf("allowed %v, want 3", got)
	}
	if got := requests(t, reg, "search", "limited"); got != 1 {
		t.Errorf("limited %v, want 1", got)
	}
	if got := requests(t, reg, "search", "shadow_limited") + requests(t, reg, "search", "error"); got != 0 {
		t.Errorf("shadow_limited + error %v, want 0", got)
	}
	if got := decisions(t, reg, "search"); got != 4 {
		t.Errorf("%v decision times observed, want 4", got)
	}
	if *served != 3 {
		t.Errorf("%d requests served, want 3", *served)
	}
}

// In shadow mode a refusal is counted as shadow_limited, not limited.
func TestHTTPShadow(t *testing.T) {
	m, reg := newMetrics(t)
	h, served := limited(t, m, manualLimiter(t, 1, time.Minute), httplimit.WithShadow())
	get(h, "192.0.2.1")
	get(h, "192.0.2.1")
	if a, s, l := requests(t, reg, "search", "allowed"), requests(t, reg, "search", "shadow_limited"), requests(t, reg, "search", "limited"); a != 1 || s != 1 || l != 0 {
		t.Errorf("allowed %v, shadow_limited %v, limited %v; want 1, 1, 0", a, s, l)
	}
	if *served != 2 {
		t.Errorf("%d requests served, want 2", *served)
	}
}

// Backend errors are counted by kind; an identity failure and a cancelled
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
		// As redislimit reports the first call of an outage, which waited
		// out its budget, and the calls after it, which its open circuit
		// breaker answered at once: a timeout, then the store known down.
		{"no answer within the budget",
			fail(fmt.Errorf("redislimit: take key #8254c329: %w: no answer from redis within the 250ms budget: %w", keyrate.ErrUnavailable, context.DeadlineExceeded)),
			nil, "timeout", 1},
		{"circuit breaker open",
			fail(fmt.Errorf("redislimit: take key #8254c329: %w: not asked, the circuit breaker has been open for 1.2s; the latest failure: dial tcp: connection refused", keyrate.ErrUnavailable)),
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
			m, reg := newMetrics(t)
			h, _ := limited(t, m, tc.b, tc.opts...)
			get(h, "192.0.2.1")
			if got := requests(t, reg, "search", "error"); got != 1 {
				t.Errorf("error requests %v, want 1", got)
			}
			for _, kind := range []string{"timeout", "unavailable", "invalid", "oom"} {
				want := 0.0
				if kind == tc.kind {
					want = 1
				}
				if got := backendErrors(t, reg, "search", kind); got != want {
					t.Errorf("backend errors of kind %s: %v, want %v", kind, got, want)
				}
			}
			if got := decisions(t, reg, "search"); got != tc.observed {
				t.Errorf("%v backend times observed, want %v", got, tc.observed)
			}
		})
	}
}

// refusedDial returns the error of a real dial to a port where nothing
// listens.
func refusedDial(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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

func fail(err error) keyrate.Backend {
	return backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{}, err
	})
}

// Observe counts what a middleware reports, by route.
func TestObserve(t *testing.T) {
	m, reg := newMetrics(t)
	const route = "/pkg.S/M"
	observeDecision(m, route, keyrate.Decision{Allowed: true}, false, time.Microsecond)
	observeDecision(m, route, keyrate.Decision{}, false, time.Microsecond)
	observeDecision(m, route, keyrate.Decision{}, true, time.Microsecond)
	observeError(m, route, fmt.Errorf("budget: %w", context.DeadlineExceeded), 251*time.Millisecond)
	for result, want := range map[string]float64{"allowed": 1, "limited": 1, "shadow_limited": 1, "error": 1} {
		if got := requests(t, reg, route, result); got != want {
			t.Errorf("%s: %v, want %v", result, got, want)
		}
	}
	if got := backendErrors(t, reg, route, "timeout"); got != 1 {
		t.Errorf("timeouts %v, want 1", got)
	}
	// The timeout lands above the 250ms bucket, the decisions in the first.
	for _, m := range series(t, reg, "keyrate_backend_duration_seconds") {
		for _, b := range m.GetHistogram().GetBucket() {
			var want uint64
			switch le := b.GetUpperBound(); {
			case le >= 0.5:
				want = 4
			case le >= 1e-6:
				want = 3
			}
			if b.GetCumulativeCount() != want {
				t.Errorf("bucket le=%g holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
	}
}

// Routes reported at run time (method names a client may choose) get at
// most 1000 series of their own; the rest share route="(other)".
func TestObservedRoutesAreBounded(t *testing.T) {
	m, reg := newMetrics(t)
	for i := range 1500 {
		observeDecision(m, fmt.Sprintf("/pkg.S/M%d", i), keyrate.Decision{Allowed: true}, false, time.Microsecond)
	}
	routes := map[string]bool{}
	for _, s := range series(t, reg, "keyrate_requests_total") {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "route" {
				routes[lp.GetValue()] = true
			}
		}
	}
	if len(routes) != 1001 || !routes["(other)"] || !routes["/pkg.S/M999"] || routes["/pkg.S/M1000"] {
		t.Errorf("%d routes, want 1000 of their own and (other)", len(routes))
	}
	if got := requests(t, reg, "(other)", "allowed"); got != 500 {
		t.Errorf("(other) counted %v, want 500", got)
	}
}

// WithMaxRoutes moves the bound: with 10, the eleventh route on counts
// under route="(other)".
func TestWithMaxRoutes(t *testing.T) {
	m, reg := newMetrics(t, promlimit.WithMaxRoutes(10))
	for i := range 60 {
		observeDecision(m, fmt.Sprintf("/pkg.S/M%d", i), keyrate.Decision{Allowed: true}, false, time.Microsecond)
	}
	routes := map[string]bool{}
	for _, s := range series(t, reg, "keyrate_requests_total") {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "route" {
				routes[lp.GetValue()] = true
			}
		}
	}
	if len(routes) != 11 || !routes["(other)"] || !routes["/pkg.S/M9"] || routes["/pkg.S/M10"] {
		t.Errorf("%d routes, want 10 of their own and (other)", len(routes))
	}
	if got := requests(t, reg, "(other)", "allowed"); got != 50 {
		t.Errorf("(other) counted %v, want 50", got)
	}
}

// No label value ever names a client, however many come.
func TestLabelsNeverNameClients(t *testing.T) {
	m, reg := newMetrics(t)
	l := manualLimiter(t, 1, time.Minute)
	h, _ := limited(t, m, l)
	if err := m.TrackKeys("search", l); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		get(h, fmt.Sprintf("198.51.100.%d", i%250))
		get(h, fmt.Sprintf("198.51.100.%d", i%250))
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, s := range f.GetMetric() {
			n++
			for _, lp := range s.GetLabel() {
				if strings.Contains(lp.GetValue(), "198.51.100") {
					t.Errorf("%s has label %s=%q", f.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	// 5 results + 2 sources + 5 error kinds + 1 histogram + 1 policy's
	// violations + 1 gauge, for one route.
	if n != 15 {
		t.Errorf("%d series, want 15", n)
	}
	if got := value(t, reg, "keyrate_policy_violations_total", map[string]string{"route": "search", "policy": ""}); got != 200 {
		t.Errorf("violations of the unnamed policy %v, want 200", got)
	}
	if got := value(t, reg, "keyrate_keys", map[string]string{"route": "search"}); got != 200 {
		t.Errorf("keyrate_keys %v, want 200", got)
	}
}

func TestTrackKeys(t *testing.T) {
	m, reg := newMetrics(t)
	a, b := manualLimiter(t, 5, time.Minute), manualLimiter(t, 5, time.Minute)
	if err := m.TrackKeys("a", a); err != nil {
		t.Fatal(err)
	}
	if err := m.TrackKeys("b", b); err != nil {
		t.Fatal(err)
	}
	a.Allow("x")
	a.Allow("y")
	b.Allow("z")
	if ga, gb := value(t, reg, "keyrate_keys", map[string]string{"route": "a"}), value(t, reg, "keyrate_keys", map[string]string{"route": "b"}); ga != 2 || gb != 1 {
		t.Errorf("keyrate_keys a=%v b=%v, want 2 and 1", ga, gb)
	}
	if err := m.TrackKeys("a", b); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("tracking route a twice: %v, want keyrate.ErrConfig", err)
	}
	if err := m.TrackKeys("c", nil); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("tracking nil: %v, want keyrate.ErrConfig", err)
	}
}

// New fails cleanly on a nil registry and on a registry that has the
// metrics already, and leaves the registry as it was.
func TestNew(t *testing.T) {
	if _, err := promlimit.New(nil); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("New(nil): %v, want keyrate.ErrConfig", err)
	}
	if _, err := promlimit.New(prometheus.NewRegistry(), promlimit.WithMaxRoutes(0)); !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("WithMaxRoutes(0): %v, want keyrate.ErrConfig", err)
	}
	m, reg := newMetrics(t)
	if _, err := promlimit.New(reg); err == nil {
		t.Error("New twice on one registry: no error")
	}
	observeDecision(m, "r", keyrate.Decision{Allowed: true}, false, time.Microsecond)
	if got := requests(t, reg, "r", "allowed"); got != 1 {
		t.Errorf("the first Metrics no longer counts: %v", got)
	}
	// A registry holding only part of the set gets none of the rest.
	partial := prometheus.NewRegistry()
	partial.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "keyrate_keys", Help: "x"}))
	if _, err := promlimit.New(partial); err == nil {
		t.Error("New on a registry with a clashing keyrate_keys: no error")
	}
	if families, _ := partial.Gather(); len(families) != 1 {
		t.Errorf("after a failed New, the registry has %d families, want 1", len(families))
	}
}

// The metrics pass Prometheus's own linter: names, units, help.
func TestLint(t *testing.T) {
	m, reg := newMetrics(t)
	observeDecision(m, "r", keyrate.Decision{Allowed: true}, false, time.Microsecond)
	if err := m.TrackKeys("r", manualLimiter(t, 1, time.Minute)); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// Hooks of one's own and the metrics both hear of every request: neither
// replaces the other, whatever the order of the options.
func TestOwnHooksBesideMetrics(t *testing.T) {
	m, reg := newMetrics(t)
	var decided, failed int
	h, _ := limited(t, m, manualLimiter(t, 1, time.Minute),
		httplimit.WithOnDecision(func(middleware.Event) { decided++ }),
		httplimit.WithOnError(func(middleware.Event) { failed++ }),
		httplimit.WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("Id"), nil }))
	for _, id := range []string{"alice", "alice", ""} {
		r := httptest.NewRequest("GET", "/search", nil)
		r.Header.Set("Id", id)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if decided != 2 || failed != 1 {
		t.Errorf("own hooks heard %d decisions and %d errors, want 2 and 1", decided, failed)
	}
	for result, want := range map[string]float64{"allowed": 1, "limited": 1, "error": 1} {
		if got := requests(t, reg, "search", result); got != want {
			t.Errorf("%s: %v, want %v", result, got, want)
		}
	}
}

// TestRefundFailure counts a refund that failed as a backend error of its
// own kind, and the request it was for once, as decided.
func TestRefundFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	d := backend.Combine(keyrate.PolicyDecision{Policy: keyrate.Policy{Limit: 5, Window: time.Minute}, Allowed: true, Remaining: 4})
	m.Observe(middleware.Event{Route: "login", Key: "login\x00a", Decision: d})
	m.Observe(middleware.Event{Route: "login", Key: "login\x00a", Decision: d,
		Err: fmt.Errorf("%w: store unavailable", middleware.ErrRefundFailed)})
	if got := value(t, reg, "keyrate_backend_errors_total", map[string]string{"route": "login", "kind": "refund"}); got != 1 {
		t.Errorf("refund errors %v, want 1", got)
	}
	if got := value(t, reg, "keyrate_requests_total", map[string]string{"route": "login", "result": "error"}); got != 0 {
		t.Errorf("requests counted as errors %v, want 0", got)
	}
	if got := value(t, reg, "keyrate_requests_total", map[string]string{"route": "login", "result": "allowed"}); got != 1 {
		t.Errorf("requests allowed %v, want 1", got)
	}
}

// Every decision counts under its source: store, or fallback when a local
// fallback decided it while the store was down (Decision.Fallback), behind
// httplimit and observed directly alike.
func TestDecisionSources(t *testing.T) {
	source := func(t *testing.T, reg prometheus.Gatherer, route, source string) float64 {
		t.Helper()
		return value(t, reg, "keyrate_decisions_total", map[string]string{"route": route, "source": source})
	}
	m, reg := newMetrics(t)
	local := manualLimiter(t, 1, time.Minute)
	down := false
	b := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		d, err := local.TakeContext(ctx, key, n)
		d.Fallback = down
		return d, err
	})
	h, _ := limited(t, m, b)
	get(h, "192.0.2.1")
	if s, f := source(t, reg, "search", "store"), source(t, reg, "search", "fallback"); s != 1 || f != 0 {
		t.Errorf("store %v, fallback %v; want 1, 0", s, f)
	}
	down = true
	get(h, "192.0.2.2") // admitted by the fallback
	get(h, "192.0.2.2") // refused by it
	if s, f := source(t, reg, "search", "store"), source(t, reg, "search", "fallback"); s != 1 || f != 2 {
		t.Errorf("store %v, fallback %v; want 1, 2", s, f)
	}
	if a, l := requests(t, reg, "search", "allowed"), requests(t, reg, "search", "limited"); a != 2 || l != 1 {
		t.Errorf("allowed %v, limited %v; want 2, 1: a fallback's decisions are requests like any other", a, l)
	}
	if got := backendErrors(t, reg, "search", "unavailable"); got != 0 {
		t.Errorf("%v unavailable errors, want 0: a fallback decision is no error", got)
	}

	const route = "/pkg.S/M"
	for _, d := range []keyrate.Decision{{Allowed: true}, {Allowed: true, Fallback: true}, {Fallback: true}} {
		m.Observe(middleware.Event{Route: route, Key: route, Decision: d, Duration: time.Microsecond})
	}
	if s, f := source(t, reg, route, "store"), source(t, reg, route, "fallback"); s != 1 || f != 2 {
		t.Errorf("observed: store %v, fallback %v; want 1, 2", s, f)
	}
}
