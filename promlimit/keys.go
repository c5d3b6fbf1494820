package promlimit

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
)

// keysCollector reads each tracked Limiter's Len when scraped, so that the
// gauge costs nothing between scrapes.
type keysCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	byRoute map[string]*keyrate.Limiter
}

func newKeysCollector() *keysCollector {
	return &keysCollector{
		desc: prometheus.NewDesc("keyrate_keys",
			"Keys an in-process rate limiter tracks, by route: clients seen within its window.",
			[]string{"route"}, nil),
		byRoute: make(map[string]*keyrate.Limiter),
	}
}

// Describe sends the gauge's description.
func (c *keysCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect sends each tracked Limiter's Len.
func (c *keysCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for route, l := range c.byRoute {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(l.Len()), route)
	}
}

// TrackKeys exports l's Len, the keys it tracks, as keyrate_keys{route}. It
// is read at each scrape. Watch it against WithMaxKeys: a Limiter at its
// bound evicts the keys decided least recently to make room for new ones
// (under WithRefuseNewKeys, it refuses new clients). A route can be tracked
// once; a Limiter that serves several routes (grpclimit's, which serves
// every method) is tracked under one name of your choosing. A nil l or a
// route tracked already gives an error wrapping keyrate.ErrConfig.
func (m *Metrics) TrackKeys(route string, l *keyrate.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: promlimit: limiter for route %q is nil", keyrate.ErrConfig, route)
	}
	m.keys.mu.Lock()
	defer m.keys.mu.Unlock()
	if _, ok := m.keys.byRoute[route]; ok {
		return fmt.Errorf("%w: promlimit: route %q already has its keys tracked", keyrate.ErrConfig, route)
	}
	m.keys.byRoute[route] = l
	return nil
}
