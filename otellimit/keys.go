package otellimit

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyrate/keyrate"
)

// keysGauge reads each tracked Limiter's Len when the reader collects, so
// that the gauge costs nothing between collections.
type keysGauge struct {
	mu      sync.Mutex
	byRoute map[string]trackedLimiter
}

type trackedLimiter struct {
	l    *keyrate.Limiter
	opts []metric.ObserveOption
}

func (g *keysGauge) register(meter metric.Meter) error {
	g.byRoute = make(map[string]trackedLimiter)
	_, err := meter.Int64ObservableGauge("keyrate.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys an in-process rate limiter tracks, by route: clients seen within its window."),
		metric.WithInt64Callback(g.observe))
	return err
}

func (g *keysGauge) observe(_ context.Context, o metric.Int64Observer) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.byRoute {
		o.Observe(int64(t.l.Len()), t.opts...)
	}
	return nil
}

// TrackKeys exports l's Len, the keys it tracks, as keyrate.keys with
// keyrate.route set to route. It is read at each collection. Watch it
// against WithMaxKeys: a Limiter at its bound evicts the keys decided least
// recently to make room for new ones (under WithRefuseNewKeys, it refuses
// new clients). A route can be tracked once; a Limiter that serves several
// routes (grpclimit's, which serves every method) is tracked under one name
// of your choosing. A nil l or a route tracked already gives an error
// wrapping keyrate.ErrConfig.
func (m *Metrics) TrackKeys(route string, l *keyrate.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: otellimit: limiter for route %q is nil", keyrate.ErrConfig, route)
	}
	g := &m.keys
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.byRoute[route]; ok {
		return fmt.Errorf("%w: otellimit: route %q already has its keys tracked", keyrate.ErrConfig, route)
	}
	g.byRoute[route] = trackedLimiter{l, []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(keyRoute, route)))}}
	return nil
}
