package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keyrate/keyrate/promlimit"
)

// metricsPath serves keyrate's Prometheus metrics, unlimited.
const metricsPath = "/metrics"

// metrics counts what the limiters decide, on a registry of its own, so
// that a scrape of the demo shows keyrate's series alone.
type metrics struct {
	*promlimit.Metrics
	handler http.Handler
}

func newMetrics() (*metrics, error) {
	reg := prometheus.NewRegistry()
	m, err := promlimit.New(reg)
	if err != nil {
		return nil, err
	}
	return &metrics{m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}
