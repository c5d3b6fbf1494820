package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/promlimit"
)

// otherDomain labels the metrics of requests for a domain the
// configuration does not have (a descriptor with a limit override can
// still be decided there): domains come from requests, labels only from
// the configuration.
const otherDomain = "(other)"

// nearLimitRatio is the share of a limit past which a hit counts as near
// the limit, as envoyproxy/ratelimit's NEAR_LIMIT_RATIO defaults to.
const nearLimitRatio = 0.8

// metrics is what /metrics serves: promlimit's request metrics, by domain,
// and per rule the counters envoyproxy/ratelimit keeps, under the names its
// Prometheus mapping gives them, so that dashboards built on those carry
// over. Their labels are the domain and the rule (see rule.stat), never a
// value a request sent.
type metrics struct {
	prom                                                   *promlimit.Metrics
	totalHits, overLimit, nearLimit, withinLimit, shadowed *prometheus.CounterVec
	configLoads                                            *prometheus.CounterVec
	byRule                                                 sync.Map // [2]string{domain, stat} -> *ruleCounters
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
	}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowed, m.configLoads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.configLoads.WithLabelValues("success")
	m.configLoads.WithLabelValues("error")
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
		return
	}
	m.configLoads.WithLabelValues("success").Inc()
}

// observe counts a decided request's hits on each rule and, when the store
// was asked (in took), the request in promlimit's metrics.
func (s *service) observe(domain string, items []item, took time.Duration, asked bool) {
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
				if shadowOnly == nil {
					shadowOnly = it
				}
			} else if overall == nil {
				overall = it
			}
		default:
			c.within.Add(w)
			c.near.Add(float64(nearHits(it)))
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
	case overall != nil:
		m.prom.Observe(middleware.Event{Route: domain, Key: domain, Decision: decisionOf(overall), Duration: took})
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
			return keyrate.Combine(keyrate.PolicyDecision{Policy: keyrate.Policy{Name: l.name, Window: l.window}})
		}
	}
	return keyrate.Combine(keyrate.PolicyDecision{Policy: keyrate.Policy{Name: it.rule.limits[0].name}})
}

// nearHits returns how many of an admitted item's hits fall past
// nearLimitRatio of its binding limit, as envoyproxy/ratelimit counts them:
// the part of the hits above the threshold. When the request was refused
// by another descriptor, they are the hits it would have added.
func nearHits(it *item) int {
	if len(it.d.Policies()) == 0 {
		return 0 // not decided: the store refused the request on another key without asking
	}
	limit, used := it.d.Limit, it.d.Limit-it.d.Remaining
	before, after := used, used+it.weight
	if it.recorded {
		before, after = used-it.weight, used
	}
	threshold := int(float64(limit) * nearLimitRatio)
	if after <= threshold {
		return 0
	}
	return after - max(threshold, before)
}

// storeError counts a request the store could not decide.
func (m *metrics) storeError(domain string, err error, took time.Duration) {
	m.prom.Observe(middleware.Event{Route: domain, Key: domain, Err: err, Duration: took})
}
