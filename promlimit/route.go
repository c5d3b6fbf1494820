package promlimit

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
)

// route holds one route's series, resolved once, so that counting a request
// is an atomic add and not a label lookup.
type route struct {
	allowed, limited, shadowLimited, errored prometheus.Counter
	clientGone                               prometheus.Counter
	fromStore, fromFallback                  prometheus.Counter
	timeout, unavailable, invalid, oom       prometheus.Counter
	refund                                   prometheus.Counter
	duration                                 prometheus.Observer
	policies                                 *policyCounters
}

// route returns name's series, creating them at 0: a rate over a series
// that appears on its first increment misses that increment.
func (m *Metrics) route(name string) *route {
	return &route{
		allowed:       m.requests.WithLabelValues(name, resultAllowed),
		limited:       m.requests.WithLabelValues(name, resultLimited),
		shadowLimited: m.requests.WithLabelValues(name, resultShadowLimited),
		errored:       m.requests.WithLabelValues(name, resultError),
		clientGone:    m.requests.WithLabelValues(name, resultClientGone),
		fromStore:     m.decisions.WithLabelValues(name, sourceStore),
		fromFallback:  m.decisions.WithLabelValues(name, sourceFallback),
		timeout:       m.errors.WithLabelValues(name, kindTimeout),
		unavailable:   m.errors.WithLabelValues(name, kindUnavailable),
		invalid:       m.errors.WithLabelValues(name, kindInvalid),
		oom:           m.errors.WithLabelValues(name, kindOOM),
		refund:        m.errors.WithLabelValues(name, kindRefund),
		duration:      m.duration.WithLabelValues(name),
		policies:      &policyCounters{vec: m.violations, route: name},
	}
}

func (r *route) decided(d keyrate.Decision, shadow bool, took time.Duration) {
	switch {
	case d.Allowed:
		r.allowed.Inc()
	case shadow:
		r.shadowLimited.Inc()
	default:
		r.limited.Inc()
	}
	if d.Fallback {
		r.fromFallback.Inc()
	} else {
		r.fromStore.Inc()
	}
	r.policies.observe(&d)
	r.duration.Observe(took.Seconds())
}

// failed counts a request that got no decision. A request whose client had
// gone is client_gone, not an error: it says nothing about the store, and
// counting it as a failure or a timeout would show a healthy store as
// failing whenever clients give up. Of the rest, only an error that says
// something about the backend counts as a backend error: not one from
// before the backend was asked (asked false), nor a cancellation.
func (r *route) failed(err error, took time.Duration, asked bool) {
	switch {
	case errors.Is(err, middleware.ErrClientGone):
		r.clientGone.Inc()
		return
	case errors.Is(err, middleware.ErrRefundFailed):
		// The request was decided and counted already; only the refund
		// after it failed.
		r.refund.Inc()
		return
	}
	r.errored.Inc()
	if !asked {
		return
	}
	switch {
	case errors.Is(err, keyrate.ErrInvalidKey):
		r.invalid.Inc()
	case errors.Is(err, backend.ErrOutOfMemory):
		r.oom.Inc()
	case connectionFailed(err):
		// Ahead of the deadline: a client that retries a refused connection
		// until the budget runs out reports both, and the store was not
		// slow, it was not there.
		r.unavailable.Inc()
	case errors.Is(err, middleware.ErrBudgetExceeded), errors.Is(err, context.DeadlineExceeded):
		r.timeout.Inc()
	case errors.Is(err, context.Canceled):
		return
	case errors.Is(err, keyrate.ErrUnavailable):
		// Known down without waiting, as behind an open circuit breaker.
		r.unavailable.Inc()
	default:
		r.unavailable.Inc()
	}
	r.duration.Observe(took.Seconds())
}

// connectionFailed reports whether err holds a network error that is
// neither a timeout nor a cancellation: a connection refused, reset or
// unroutable, as net.Dial and the clients built on it (go-redis) report
// them. errors.AsType, unlike errors.As, needs no target on the heap.
func connectionFailed(err error) bool {
	op, ok := errors.AsType[*net.OpError](err)
	return ok && !op.Timeout() && !errors.Is(op, context.Canceled)
}
