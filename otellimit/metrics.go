package otellimit

import (
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/metric"

	"github.com/keyrate/keyrate"
)

// instrumentationName is the instrumentation scope of every instrument.
const instrumentationName = "github.com/keyrate/keyrate/otellimit"

// Metrics holds keyrate's instruments, created on one MeterProvider. Create
// it with New, once per provider (a second set would count every request
// twice under the same names); it is safe for concurrent use.
//
// The counters are observable: Observe adds to counts of its own, with
// atomic adds, and the SDK reads them when its reader collects, so that a
// request pays for no attribute lookup in the SDK. Only the histogram is
// recorded as the request is observed.
type Metrics struct {
	requests   metric.Int64ObservableCounter
	decisions  metric.Int64ObservableCounter
	errors     metric.Int64ObservableCounter
	violations metric.Int64ObservableCounter
	duration   metric.Float64Histogram
	keys       keysGauge

	maxRoutes int
	// observed maps the routes Observe was told of to their series; see
	// WithMaxRoutes.
	observed sync.Map // string -> *route
	mu       sync.Mutex
	routes   []*route // those of observed, in order, under mu
}

// Buckets of keyrate.backend.duration, in seconds: 1-2.5-5 steps from 100ns
// to 1s, as promlimit's, so that one histogram resolves both an in-process
// decision (well under a microsecond) and a networked store's time budget
// (250ms by default). They are advice: a View of the SDK may replace them.
var durationBuckets = []float64{
	100e-9, 250e-9, 500e-9,
	1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1,
}

// The attribute keys.
const (
	keyRoute  = "keyrate.route"
	keyResult = "keyrate.result"
	keySource = "keyrate.source"
	keyPolicy = "keyrate.policy"
	keyError  = "error.type" // OpenTelemetry's own key for a class of error
)

// The result, source and error-kind values below are promlimit's too, word
// for word, so that a dashboard reads either. They are kept in each module
// rather than shared: the modules have no public package in common to
// own them (middleware is the middlewares' surface, and a module may not
// import another's internal packages). dev/metricsbench's
// TestLabelValuesAgree checks that the two agree.
//
// The values of keyrate.result.
const (
	resultAllowed       = "allowed"
	resultLimited       = "limited"
	resultShadowLimited = "shadow_limited"
	resultError         = "error"
	resultClientGone    = "client_gone"
)

// The values of keyrate.source.
const (
	sourceStore    = "store"
	sourceFallback = "fallback"
)

// The values of error.type on keyrate.backend.errors.
const (
	kindTimeout     = "timeout"
	kindUnavailable = "unavailable"
	kindInvalid     = "invalid"
	kindOOM         = "oom"
	kindRefund      = "refund"
)

// New creates keyrate's instruments on a Meter of mp named
// "github.com/keyrate/keyrate/otellimit". It fails when mp is nil, or an
// option is invalid (errors wrapping keyrate.ErrConfig), or mp refuses an
// instrument.
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		return nil, fmt.Errorf("%w: otellimit: meter provider is nil", keyrate.ErrConfig)
	}
	c := config{maxRoutes: defaultMaxRoutes}
	for _, o := range opts {
		o(&c)
	}
	if c.maxRoutes < 1 {
		return nil, fmt.Errorf("%w: otellimit: WithMaxRoutes(%d), want at least 1", keyrate.ErrConfig, c.maxRoutes)
	}
	meter := mp.Meter(instrumentationName)
	m := &Metrics{maxRoutes: c.maxRoutes}
	var errs [7]error
	m.requests, errs[0] = meter.Int64ObservableCounter("keyrate.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the rate limiter saw, by route and result: allowed, limited, shadow_limited (refused but served, in shadow mode), error (no decision could be had) or client_gone (the client cancelled or timed out before the decision; not served)."))
	m.decisions, errs[1] = meter.Int64ObservableCounter("keyrate.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Requests the rate limiter's backend decided, by route and source: store (the backend's store decided: Redis, or an in-process limiter) or fallback (a local fallback decided at a share of each limit because the store could not answer; the store is down)."))
	m.duration, errs[2] = meter.Float64Histogram("keyrate.backend.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the rate limiter's backend took to decide a request or fail, by route."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.errors, errs[3] = meter.Int64ObservableCounter("keyrate.backend.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Backend calls that gave no decision, by route and error.type: timeout (the store did not answer within the time budget or a deadline), unavailable (the store failed, or refused the connection), oom (the store is out of memory and refused to record), invalid (the request could not be placed) or refund (a refund the backend could not make, for a request already counted)."))
	m.violations, errs[4] = meter.Int64ObservableCounter("keyrate.policy.violations", metric.WithUnit("{violation}"),
		metric.WithDescription("Refused requests by each policy that refused them, by route and policy (its configured name, empty for an unnamed one): a request several policies refused counts once for each. Shadowed refusals count too."))
	errs[5] = m.keys.register(meter)
	if errors.Join(errs[:6]...) == nil {
		_, errs[6] = meter.RegisterCallback(m.collect, m.requests, m.decisions, m.errors, m.violations)
	}
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otellimit: %w", err)
	}
	return m, nil
}
