package otellimit

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
)

// The counts of a route, by series: its requests by result, its decisions
// by source, its backend errors by kind.
const (
	allowed = iota
	limited
	shadowLimited
	errored
	clientGone
	fromStore
	fromFallback
	timeout
	unavailable
	invalid
	oom
	refund
	nCounts
)

// seriesOf names each count's instrument and the attribute beside
// keyrate.route that tells its series apart.
var seriesOf = [nCounts]struct {
	instrument int // 0 requests, 1 decisions, 2 backend errors
	attr       attribute.KeyValue
}{
	allowed:       {0, attribute.String(keyResult, resultAllowed)},
	limited:       {0, attribute.String(keyResult, resultLimited)},
	shadowLimited: {0, attribute.String(keyResult, resultShadowLimited)},
	errored:       {0, attribute.String(keyResult, resultError)},
	clientGone:    {0, attribute.String(keyResult, resultClientGone)},
	fromStore:     {1, attribute.String(keySource, sourceStore)},
	fromFallback:  {1, attribute.String(keySource, sourceFallback)},
	timeout:       {2, attribute.String(keyError, kindTimeout)},
	unavailable:   {2, attribute.String(keyError, kindUnavailable)},
	invalid:       {2, attribute.String(keyError, kindInvalid)},
	oom:           {2, attribute.String(keyError, kindOOM)},
	refund:        {2, attribute.String(keyError, kindRefund)},
}

// route holds one route's counts and, built once, the options that carry
// each series' attribute set: counting a request is an atomic add, and
// builds no set, sorts no attributes and allocates nothing. Each option is
// a slice of one, passed on with ..., so that no variadic slice is made
// per call.
type route struct {
	counts   [nCounts]atomic.Int64
	opts     [nCounts][]metric.ObserveOption
	duration []metric.RecordOption
	policies policyCounters
}

// observeOpts returns the options of route name's series with the further
// attributes kvs.
func observeOpts(name string, kvs ...attribute.KeyValue) []metric.ObserveOption {
	return []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(append(kvs, attribute.String(keyRoute, name))...))}
}

// route returns name's series, each at 0 from now on: a rate over a series
// that appears on its first increment misses that increment.
func (m *Metrics) route(name string) *route {
	r := &route{
		duration: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(keyRoute, name)))},
		policies: policyCounters{route: name},
	}
	for i := range r.opts {
		r.opts[i] = observeOpts(name, seriesOf[i].attr)
	}
	return r
}

// collect reports every route's counts to the SDK, when its reader
// collects.
func (m *Metrics) collect(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	routes := m.routes
	m.mu.Unlock()
	instruments := [...]metric.Int64Observable{m.requests, m.decisions, m.errors}
	for _, r := range routes {
		for i := range r.counts {
			o.ObserveInt64(instruments[seriesOf[i].instrument], r.counts[i].Load(), r.opts[i]...)
		}
		r.policies.collect(o, m.violations)
	}
	return nil
}

// ctx is the context of the histogram's records: not the request's, so
// that no exemplar links a series to a trace a client may have named.
var ctx = context.Background()

func (r *route) decided(m *Metrics, d *keyrate.Decision, shadow bool, took time.Duration) {
	switch {
	case d.Allowed:
		r.counts[allowed].Add(1)
	case shadow:
		r.counts[shadowLimited].Add(1)
	default:
		r.counts[limited].Add(1)
	}
	if d.Fallback {
		r.counts[fromFallback].Add(1)
	} else {
		r.counts[fromStore].Add(1)
	}
	r.policies.observe(d)
	m.duration.Record(ctx, took.Seconds(), r.duration...)
}

// failed counts a request that got no decision. A request whose client had
// gone is client_gone, not an error: it says nothing about the store, and
// counting it as a failure or a timeout would show a healthy store as
// failing whenever clients give up. Of the rest, only an error that says
// something about the backend counts as a backend error: not one from
// before the backend was asked (asked false), nor a cancellation.
func (r *route) failed(m *Metrics, err error, took time.Duration, asked bool) {
	switch {
	case errors.Is(err, middleware.ErrClientGone):
		r.counts[clientGone].Add(1)
		return
	case errors.Is(err, middleware.ErrRefundFailed):
		// The request was decided and counted already; only the refund
		// after it failed.
		r.counts[refund].Add(1)
		return
	}
	r.counts[errored].Add(1)
	if !asked {
		return
	}
	switch {
	case errors.Is(err, keyrate.ErrInvalidKey):
		r.counts[invalid].Add(1)
	case errors.Is(err, backend.ErrOutOfMemory):
		r.counts[oom].Add(1)
	case connectionFailed(err):
		// Ahead of the deadline: a client that retries a refused connection
		// until the budget runs out reports both, and the store was not
		// slow, it was not there.
		r.counts[unavailable].Add(1)
	case errors.Is(err, middleware.ErrBudgetExceeded), errors.Is(err, context.DeadlineExceeded):
		r.counts[timeout].Add(1)
	case errors.Is(err, context.Canceled):
		return
	default:
		// keyrate.ErrUnavailable among them: known down without waiting,
		// as behind an open circuit breaker.
		r.counts[unavailable].Add(1)
	}
	m.duration.Record(ctx, took.Seconds(), r.duration...)
}

// connectionFailed reports whether err holds a network error that is
// neither a timeout nor a cancellation: a connection refused, reset or
// unroutable, as net.Dial and the clients built on it (go-redis) report
// them. errors.AsType, unlike errors.As, needs no target on the heap.
func connectionFailed(err error) bool {
	op, ok := errors.AsType[*net.OpError](err)
	return ok && !op.Timeout() && !errors.Is(op, context.Canceled)
}
