package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/promlimit"
)

// otherDomain labels the metrics of requests for a domain the
// configuration does not have: domains come from requests, labels only
// from the configuration.
const otherDomain = "(other)"

// defaultNearLimitRatio is the share of a limit past which a hit counts as
// near the limit, as envoyproxy/ratelimit's NEAR_LIMIT_RATIO defaults to.
const defaultNearLimitRatio = 0.8

// metrics is what /metrics serves: promlimit's request metrics, by domain,
// and per rule the counters envoyproxy/ratelimit keeps, under the names its
// Prometheus mapping gives them, so that dashboards built on those carry
// over. Their labels are the domain and the rule (see rule.stat), never a
// value a request sent.
//
// Beside them are envoyproxy/ratelimit's service-level series, under the
// names its Prometheus mapping gives them: configuration loads, gRPC
// requests and their response times by method, errors by type, and the
// requests SHADOW_MODE let through.
type metrics struct {
	prom                                                   *promlimit.Metrics
	totalHits, overLimit, nearLimit, withinLimit, shadowed *prometheus.CounterVec
	configLoads                                            *prometheus.CounterVec
	byRule                                                 sync.Map // [2]string{domain, stat} -> *ruleCounters

	loadSuccess, loadError, globalShadow prometheus.Counter
	domainNotFound                       prometheus.Counter
	requests                             *prometheus.CounterVec   // by grpc_method
	responseTime                         *prometheus.HistogramVec // by grpc_method
	errors                               *prometheus.CounterVec   // by err_type

	// nearRatio is NEAR_LIMIT_RATIO; responseMillis records response times
	// in milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS); redis
	// says that store errors are Redis's (err_type="redis_error").
	nearRatio      float64
	responseMillis bool
	redis          bool
}

// ruleCounters are one rule's counters, resolved once.
type ruleCounters struct {
	total, over, near, within, shadowed prometheus.Counter
}

// newMetrics registers the metrics on reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	prom, err := promlimit.New(reg)
	if err != nil {
		return nil, err
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain", "rule"})
	}
	m := &metrics{
		prom:        prom,
		totalHits:   counter("ratelimit_service_rate_limit_total_hits", "Hits on each rule (a request counts its hits_addend), by domain and rule."),
		overLimit:   counter("ratelimit_service_rate_limit_over_limit", "Hits a rule's limits refused, shadow mode included."),
		nearLimit:   counter("ratelimit_service_rate_limit_near_limit", "Hits within a rule's limits past 80% of the binding limit."),
		withinLimit: counter("ratelimit_service_rate_limit_within_limit", "Hits within a rule's limits."),
		shadowed:    counter("ratelimit_service_rate_limit_shadow_mode", "Hits a rule in shadow mode would have refused."),
		configLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyrate_rls_config_loads_total",
			Help: "Configuration loads, by result: success, or error (the file was invalid and the rules in force stayed).",
		}, []string{"result"}),
		loadSuccess: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_success",
			Help: "Configurations loaded.",
		}),
		loadError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_error",
			Help: "Configurations refused as invalid or unreadable; the rules in force stayed.",
		}),
		domainNotFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_domain_not_found",
			Help: "Descriptors of requests for a domain the configuration does not have (envoyproxy/ratelimit's ratelimit.service.rate_limit.<domain>.domain_not_found, without the domain, which comes from requests).",
		}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_global_shadow_mode",
			Help: "Requests over a limit that SHADOW_MODE answered OK.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_total_requests",
			Help: "gRPC requests, by method.",
		}, []string{"grpc_method"}),
		responseTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_service_response_time_seconds",
			Help:    "Time to answer a gRPC request, by method (in milliseconds with PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).",
			Buckets: prometheus.DefBuckets,
		}, []string{"grpc_method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error",
			Help: "ShouldRateLimit calls answered with an error, by type: redis_error (Redis could not decide), service_error (an invalid request).",
		}, []string{"err_type"}),
		nearRatio: defaultNearLimitRatio,
	}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowed, m.configLoads,
		m.loadSuccess, m.loadError, m.globalShadow, m.domainNotFound, m.requests, m.responseTime, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.configLoads.WithLabelValues("success")
	m.configLoads.WithLabelValues("error")
	m.errors.WithLabelValues("redis_error")
	m.errors.WithLabelValues("service_error")
	return m, nil
}

func (m *metrics) rule(domain, stat string) *ruleCounters {
	k := [2]string{domain, stat}
	if c, ok := m.byRule.Load(k); ok {
		return c.(*ruleCounters)
	}
	c := &ruleCounters{
		total:    m.totalHits.WithLabelValues(domain, stat),
		over:     m.overLimit.WithLabelValues(domain, stat),
		near:     m.nearLimit.WithLabelValues(domain, stat),
		within:   m.withinLimit.WithLabelValues(domain, stat),
		shadowed: m.shadowed.WithLabelValues(domain, stat),
	}
	actual, _ := m.byRule.LoadOrStore(k, c)
	return actual.(*ruleCounters)
}

// configLoaded counts a load of the configuration.
func (m *metrics) configLoaded(err error) {
	if err != nil {
		m.configLoads.WithLabelValues("error").Inc()
		m.loadError.Inc()
		return
	}
	m.configLoads.WithLabelValues("success").Inc()
	m.loadSuccess.Inc()
}

// serviceError counts a request refused as invalid.
func (m *metrics) serviceError() { m.errors.WithLabelValues("service_error").Inc() }

// served counts a gRPC request of method (its last path element, as
// envoyproxy/ratelimit names it) answered in took.
func (m *metrics) served(method string, took time.Duration) {
	m.requests.WithLabelValues(method).Inc()
	v := took.Seconds()
	if m.responseMillis {
		v = float64(took.Milliseconds())
	}
	m.responseTime.WithLabelValues(method).Observe(v)
}

// observe counts a decided request's hits on each rule and, when the store
// was asked (in took), the request in promlimit's metrics: refused by the
// first descriptor that refuses it, let through although one is over its
// limit (in shadow or quota mode, or any with SHADOW_MODE) as a shadow
// refusal, else admitted under the descriptor with the least left.
func (s *service) observe(domain string, items []item, took time.Duration, asked, refused bool) {
	m := s.metrics
	var overall, shadowOnly, least *item
	for i := range items {
		it := &items[i]
		if !it.counts() {
			continue
		}
		c := m.rule(domain, it.rule.stat)
		w := float64(it.weight)
		c.total.Add(w)
		switch {
		case it.over:
			c.over.Add(w)
			if it.rule.shadow {
				c.shadowed.Add(w)
			}
			if refused && !it.rule.shadow && overall == nil {
				overall = it
			} else if shadowOnly == nil {
				shadowOnly = it
			}
		default:
			c.within.Add(w)
			c.near.Add(float64(nearHits(it, m.nearRatio)))
			if least == nil || it.d.Remaining < least.d.Remaining {
				least = it
			}
		}
	}
	if !asked {
		return
	}
	// promlimit reads a non-empty Key as "the store was asked"; it never
	// labels anything with it.
	switch {
	case overall != nil && !s.opts.shadow:
		m.prom.Observe(middleware.Event{Route: domain, Key: domain, Decision: decisionOf(overall), Duration: took})
	case overall != nil:
		m.prom.Observe(middleware.Event{Route: domain, Key: domain, Decision: decisionOf(overall), Shadow: true, Duration: took})
	case shadowOnly != nil:
		m.prom.Observe(middleware.Event{Route: domain, Key: domain, Decision: decisionOf(shadowOnly), Shadow: true, Duration: took})
	case least != nil:
		m.prom.Observe(middleware.Event{Route: domain, Key: domain, Decision: least.d, Duration: took})
	}
}

// decisionOf returns the decision that refused it, made up for a limit of
// 0, which refuses before the store is asked.
func decisionOf(it *item) keyrate.Decision {
	if len(it.d.Policies()) > 0 {
		return it.d
	}
	for _, l := range it.rule.limits {
		if l.perUnit == 0 {
			return backend.Combine(keyrate.PolicyDecision{Policy: keyrate.Policy{Name: l.name, Window: l.window}})
		}
	}
	return backend.Combine(keyrate.PolicyDecision{Policy: keyrate.Policy{Name: it.rule.limits[0].name}})
}

// nearHits returns how many of an admitted item's hits fall past
// nearLimitRatio of its binding limit, as envoyproxy/ratelimit counts them:
// the part of the hits above the threshold. When the request was refused
// by another descriptor, they are the hits it would have added.
func nearHits(it *item, ratio float64) int {
	if len(it.d.Policies()) == 0 {
		return 0 // not decided: the store refused the request on another key without asking
	}
	limit, used := it.d.Limit, it.d.Limit-it.d.Remaining
	before, after := used, used+it.weight
	if it.recorded {
		before, after = used-it.weight, used
	}
	threshold := int(float64(limit) * ratio)
	if after <= threshold {
		return 0
	}
	return after - max(threshold, before)
}

// storeError counts a request the store could not decide.
func (m *metrics) storeError(domain string, err error, took time.Duration) {
	if m.redis {
		m.errors.WithLabelValues("redis_error").Inc()
	}
	m.prom.Observe(middleware.Event{Route: domain, Key: domain, Err: err, Duration: took})
}
