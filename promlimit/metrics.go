package promlimit

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
)

// Metrics holds keyrate's collectors, registered on one registry. Create it
// with New, once per registry; it is safe for concurrent use.
type Metrics struct {
	requests   *prometheus.CounterVec
	decisions  *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	errors     *prometheus.CounterVec
	violations *prometheus.CounterVec
	keys       *keysCollector

	maxRoutes int
	// observed maps the routes Observe was told of to their series; see
	// WithMaxRoutes.
	observed sync.Map // string -> *route
	mu       sync.Mutex
	nobs     int // routes in observed, under mu
}

// Buckets of keyrate_backend_duration_seconds: 1-2.5-5 steps from 100ns to
// 1s, so that one histogram resolves both an in-process decision (well
// under a microsecond) and a networked store's time budget (250ms by
// default; a call that outlives it lands just above, in le="0.5").
var durationBuckets = []float64{
	100e-9, 250e-9, 500e-9,
	1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1,
}

// The result, source and error-kind values below are otellimit's too, word
// for word, so that a dashboard reads either. They are kept in each module
// rather than shared: the modules have no public package in common to
// own them (middleware is the middlewares' surface, and a module may not
// import another's internal packages). dev/metricsbench's
// TestLabelValuesAgree checks that the two agree.
//
// The values of the result label of keyrate_requests_total.
const (
	resultAllowed       = "allowed"
	resultLimited       = "limited"
	resultShadowLimited = "shadow_limited"
	resultError         = "error"
	resultClientGone    = "client_gone"
)

// The values of the source label of keyrate_decisions_total.
const (
	sourceStore    = "store"
	sourceFallback = "fallback"
)

// The values of the kind label of keyrate_backend_errors_total.
const (
	kindTimeout     = "timeout"
	kindUnavailable = "unavailable"
	kindInvalid     = "invalid"
	kindOOM         = "oom"
	kindRefund      = "refund"
)

// New creates keyrate's collectors and registers them on reg. It fails when
// reg is nil or an option is out of its range (an error wrapping
// keyrate.ErrConfig) or reg refuses them (they are already registered
// there: call New once per registry and share the Metrics); it then leaves
// reg as it found it.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: promlimit: registerer is nil", keyrate.ErrConfig)
	}
	c := config{maxRoutes: defaultMaxRoutes}
	for _, o := range opts {
		o(&c)
	}
	if c.maxRoutes < 1 {
		return nil, fmt.Errorf("%w: promlimit: WithMaxRoutes(%d), want at least 1", keyrate.ErrConfig, c.maxRoutes)
	}
	m := &Metrics{
		maxRoutes: c.maxRoutes,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyrate_requests_total",
			Help: "Requests the rate limiter saw, by route and result: allowed, limited, shadow_limited (refused but served, in shadow mode), error (no decision could be had) or client_gone (the client cancelled or timed out before the decision; not served).",
		}, []string{"route", "result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyrate_decisions_total",
			Help: "Requests the rate limiter's backend decided, by route and source: store (the backend's store decided: Redis, or an in-process limiter) or fallback (a local fallback decided at a share of each limit because the store could not answer; the store is down).",
		}, []string{"route", "source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keyrate_backend_duration_seconds",
			Help:    "Time the rate limiter's backend took to decide a request or fail, by route.",
			Buckets: durationBuckets,
		}, []string{"route"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyrate_backend_errors_total",
			Help: "Backend calls that gave no decision, by route and kind: timeout (the store did not answer within the time budget or a deadline), unavailable (the store failed, or refused the connection), oom (the store is out of memory and refused to record), invalid (the request could not be placed) or refund (a refund the backend could not make, for a request already counted).",
		}, []string{"route", "kind"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyrate_policy_violations_total",
			Help: "Refused requests by each policy that refused them, by route and policy (its configured name, empty for an unnamed one): a request several policies refused counts once for each. Shadowed refusals count too.",
		}, []string{"route", "policy"}),
		keys: newKeysCollector(),
	}
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{m.requests, m.decisions, m.duration, m.errors, m.violations, m.keys} {
		if err := reg.Register(c); err != nil {
			for _, r := range done {
				reg.Unregister(r)
			}
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				return nil, fmt.Errorf("promlimit: keyrate's metrics are already registered here; create one Metrics per registry and share it: %w", err)
			}
			return nil, fmt.Errorf("promlimit: %w", err)
		}
		done = append(done, c)
	}
	return m, nil
}
